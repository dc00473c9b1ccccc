"""The crashed process's memory, as far as it can be known after the fact.

A kernel core holds anonymous and written pages but not, by default, the
read-only file-backed ones (``coredump_filter``, see core(5)): the code at pc
is usually not in the core. :class:`ProcessMemory` reads the core first and
falls back to the mapped file (from NT_FILE, optionally under a sysroot),
which holds the same bytes as long as it is the same file: a file is used
only when its size reaches the mapping and, for a module with a known
build-id, its build-id matches; a module the core states no build-id for
reads only the file :mod:`.unidentified` accepted for it.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path


from coreepi.parse.elf.corefile import CoreFile
from coreepi.parse.elf.elfimage import build_id, program_headers
from coreepi.parse.elf.notes import FileMapping

PT_LOAD = 1

__all__ = ["ProcessMemory", "file_build_id"]


@dataclass(frozen=True, slots=True)
class Region:
    """One mapping of the address space (addresses and offset in bytes).
    ``perms`` is 'r-x' etc.; a '?' marks a permission nobody recorded."""

    start: int
    end: int
    perms: str
    path: str | None
    offset: int = 0
    in_core: bool = False


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
        checked: dict[str, str] | None = None,
    ) -> None:
        self._core = core
        self._files = sorted(files, key=lambda f: f.start)
        self._build_ids = build_ids or {}
        self._sysroot = sysroot
        self._exe = exe  # (path recorded in the core, path given by the user)
        # modules without a build-id: path in the core -> the file accepted for it
        self._checked = checked or {}
        self._usable: dict[str, str | None] = {}
        self._loads: dict[str, list[tuple[int, int, int]]] = {}
        self.arch = core.arch
        by_start = {f.start: f for f in files}
        regions = []
        for seg in core.loads:
            f = by_start.get(seg.vaddr)
            regions.append(
                Region(
                    seg.vaddr,
                    seg.end,
                    seg.perms,
                    f.path if f else None,
                    f.offset if f else 0,
                    in_core=seg.filesz > 0 and seg.offset + seg.filesz <= core.size,
                )
            )
        # gdb's gcore writes no PT_LOAD for the mappings it filters out (the
        # kernel writes one with p_filesz 0); NT_FILE still lists them. Their
        # permissions come from the mapped file's program headers when the
        # file is at hand.
        load_starts = {seg.vaddr for seg in core.loads}
        for f in files:
            if f.start not in load_starts:
                perms = self._file_perms(f.path, f.offset)
                regions.append(Region(f.start, f.end, perms, f.path, f.offset, in_core=False))
        regions.sort(key=lambda r: r.start)
        self.regions = regions
        self._region_starts = [r.start for r in regions]

    def region_for(self, address: int) -> Region | None:
        """The mapping holding ``address``, or None if it is unmapped."""
        i = bisect.bisect_right(self._region_starts, address) - 1
        if i >= 0 and address < self.regions[i].end:
            return self.regions[i]
        return None

    def _file_perms(self, path: str, offset: int) -> str:
        """Permissions of the file's PT_LOAD that maps file ``offset``; '???'
        when the file or such a segment is not at hand."""
        local = self._local_path(path)
        if local is None:
            return "???"
        for start, end, flags in self._file_loads(local):
            if start <= offset < end:
                return ("r" if flags & 4 else "-") + ("w" if flags & 2 else "-") + (
                    "x" if flags & 1 else "-"
                )
        return "???"

    def _file_loads(self, local: str) -> list[tuple[int, int, int]]:
        """(file start, file end, p_flags) of each PT_LOAD of the ELF file at
        ``local``, read once per file (NT_FILE may name one file many times)."""
        if local not in self._loads:
            loads = []
            try:
                with open(local, "rb") as fh:
                    for seg in program_headers(fh):
                        if seg.type != PT_LOAD:
                            continue
                        start = seg.offset & ~(seg.align - 1 if seg.align else 0)
                        end = seg.offset + max(seg.filesz, 1)
                        loads.append((start, end, seg.flags))
            except OSError:
                pass
            self._loads[local] = loads
        return self._loads[local]

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
        if path in self._build_ids and self._build_ids[path] is None:
            # a module without a build-id: any file would pass the check below
            self._usable[path] = self._checked.get(path)
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
                expected is None or file_build_id(candidate) == expected
            ):
                found = candidate
                break
        self._usable[path] = found
        return found


def file_build_id(path: str) -> str | None:
    """The NT_GNU_BUILD_ID of the ELF file at ``path``, lower-case hex."""
    try:
        with open(path, "rb") as fh:
            return build_id(fh)
    except OSError:
        return None
