"""The crashed process's memory, as far as it can be known after the fact.

A kernel core holds anonymous and written pages but not, by default, the
read-only file-backed ones (``coredump_filter``, see core(5)): the code at pc
is usually not in the core. :class:`ProcessMemory` reads the core first and
falls back to the mapped file (from NT_FILE, optionally under a sysroot),
which holds the same bytes as long as it is the same file: a file is used
only when its size reaches the mapping and, for a module with a known
build-id, its build-id matches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from coreepi.parse.core_notes import FileMapping
from coreepi.parse.elf_core_file import CoreFile

__all__ = ["ProcessMemory"]


@dataclass(frozen=True, slots=True)
class Region:
    """One mapping of the address space, for the analyzers (sizes in bytes)."""

    start: int
    end: int
    perms: str
    path: str | None


class ProcessMemory:
    """Read-only view of the crashed process's address space.

    ``read(address, size)`` returns the bytes, or None when any of them is
    unknown (unmapped, not dumped and no usable file). It never raises on a
    bad address.
    """

    def __init__(
        self,
        core: CoreFile,
        files: list[FileMapping],
        *,
        build_ids: dict[str, str | None] | None = None,
        sysroot: Path | None = None,
        exe: tuple[str, Path] | None = None,
    ) -> None:
        self._core = core
        self._files = sorted(files, key=lambda f: f.start)
        self._build_ids = build_ids or {}
        self._sysroot = sysroot
        self._exe = exe  # (path recorded in the core, path given by the user)
        self._usable: dict[str, str | None] = {}
        self.arch = core.arch
        by_start = {f.start: f for f in files}
        self.regions = [
            Region(s.vaddr, s.end, s.perms, by_start[s.vaddr].path if s.vaddr in by_start else None)
            for s in core.loads
        ]

    def region_for(self, address: int) -> Region | None:
        """The mapping holding ``address``, or None if it is unmapped."""
        seg = self._core.segment_for(address)
        if seg is None:
            return None
        i = self._core.loads.index(seg)
        return self.regions[i]

    def is_executable(self, address: int) -> bool:
        region = self.region_for(address)
        return region is not None and "x" in region.perms

    def read(self, address: int, size: int) -> bytes | None:
        if size < 0 or address < 0 or address + size > 1 << 64:
            return None
        data = self._core.read(address, size)
        if data is not None:
            return data
        return self._read_file(address, size)

    def read_word(self, address: int) -> int | None:
        data = self.read(address, 8)
        return None if data is None else int.from_bytes(data, "little")

    def _read_file(self, address: int, size: int) -> bytes | None:
        mapping = next((f for f in self._files if f.start <= address < f.end), None)
        if mapping is None or address + size > mapping.end:
            return None
        local = self._local_path(mapping.path)
        if local is None:
            return None
        try:
            with open(local, "rb") as fh:
                fh.seek(mapping.offset + (address - mapping.start))
                data = fh.read(size)
        except OSError:
            return None
        return data if len(data) == size else None

    def _local_path(self, path: str) -> str | None:
        if path in self._usable:
            return self._usable[path]
        candidates = []
        if self._exe is not None and self._exe[0] == path:
            candidates.append(os.fspath(self._exe[1]))
        if self._sysroot is not None:
            candidates.append(os.path.join(os.fspath(self._sysroot), path.lstrip("/")))
        candidates.append(path)
        found = None
        expected = self._build_ids.get(path)
        for candidate in candidates:
            if os.path.isfile(candidate) and (
                expected is None or _build_id(candidate) == expected
            ):
                found = candidate
                break
        self._usable[path] = found
        return found


def _build_id(path: str) -> str | None:
    """The NT_GNU_BUILD_ID of the ELF file at ``path``, lower-case hex."""
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            for segment in elf.iter_segments("PT_NOTE"):
                for note in segment.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return str(note["n_desc"])
    except (OSError, ELFError, ValueError, KeyError):
        return None
    return None
