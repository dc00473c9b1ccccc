"""Files for the modules a core states no build-id for.

drgn matches a module's file by build-id. A module without one (built with
``-Wl,--build-id=none``, or an old toolchain) takes any file drgn is offered,
and drgn offers none of its own for an NT_FILE object it found no link-map
entry for. For each such object this module picks the file on this machine
that stands for it (``--exe`` for the executable, else the copy under
``--sysroot``, else the file at its recorded path) and accepts it only when
it fits what the core records of it (:func:`~.exe_check.exe_mismatch`:
layout and the bytes the core holds). :mod:`.unwind` hands drgn those files
and no others.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from coreepi.parse.elf.corefile import CoreFile
from coreepi.parse.elf.elfimage import gnu_build_id
from coreepi.parse.elf.exe_check import dynamic_address, exe_mismatch
from coreepi.parse.elf.notes import CoreNotes, FileMapping

__all__ = [
    "AT_ENTRY", "LocalFile", "build_id_in_core", "exe_refusal", "local_files", "maps_elf_header",
]

AT_ENTRY = 9
_NOT_FILES = ("/dev/", "/memfd:", "/SYSV")  # mappings of no ELF file on disk


@dataclass(frozen=True, slots=True)
class LocalFile:
    """The file on this machine accepted for the object the core maps at
    ``start``..``end`` as ``name``; ``dynamic``: the run-time address of its
    dynamic section (None: it has none, e.g. a static executable)."""

    name: str
    start: int
    end: int
    dynamic: int | None
    path: str


def local_files(core: CoreFile, notes: CoreNotes, *, exe: str | None, sysroot: str | None,
                warnings: list[str]) -> list[LocalFile]:
    """One :class:`LocalFile` per ELF object of ``notes.files`` that the core
    states no build-id for and for which a fitting file is found. ``exe``:
    the user's executable, already checked (:func:`exe_refusal`). A file
    under ``sysroot`` or at the recorded path that does not fit is said in
    ``warnings`` ("…; not used") and not used. Mapped data files (a locale
    archive, a database: no ELF header, :func:`maps_elf_header`) are left
    alone."""
    main = _main_path(notes)
    by_path: dict[str, list[FileMapping]] = {}
    for f in notes.files:
        if f.path.startswith("/") and not f.path.startswith(_NOT_FILES):
            by_path.setdefault(f.path, []).append(f)
    found = []
    for name, mappings in by_path.items():
        heads = [f for f in mappings if f.offset == 0]
        if not maps_elf_header(core, heads, sysroot) or build_id_in_core(core, heads) is not None:
            continue  # not an ELF object, or one drgn checks by build-id
        if name == main and exe is not None:
            found.append(_local(name, mappings, exe))
            continue
        candidates = [os.path.join(sysroot, name.lstrip("/"))] if sysroot is not None else []
        for candidate in [*candidates, name]:
            if not os.path.isfile(candidate):
                continue
            try:
                reason = exe_mismatch(candidate, core.arch, mappings, core.read)
            except OSError as exc:
                reason = f"cannot be read ({exc.strerror})"
            if reason is None:
                found.append(_local(name, mappings, candidate))
                break
            warnings.append(f"{candidate}: {reason}, so it is not the core's {name}; not used")
    return found


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def maps_elf_header(core: CoreFile, heads: Sequence[FileMapping],
                    sysroot: str | None = None) -> bool:
    """True when a file is mapped from file offset 0 (``heads``) and that page
    starts with the ELF magic. When the core lacks that page, the file itself
    tells (under ``sysroot``, else at its path); with neither, assume it does."""
    for f in heads:
        head = core.read(f.start, 4)
        if head is not None:
            return head == b"\x7fELF"
        at_hand = [os.path.join(sysroot, f.path.lstrip("/"))] if sysroot is not None else []
        on_disk = [p for p in [*at_hand, f.path] if os.path.isfile(p)]
        return _is_elf(on_disk[0]) if on_disk else True
    return False


def _local(name: str, mappings: list[FileMapping], path: str) -> LocalFile:
    return LocalFile(name, min(f.start for f in mappings), max(f.end for f in mappings),
                     dynamic_address(path, mappings), path)


def _main_path(notes: CoreNotes) -> str:
    """The NT_FILE path of the executable (the mapping AT_ENTRY falls in), or ""."""
    entry = notes.auxv.get(AT_ENTRY)
    if entry is None:
        return ""
    return next((f.path for f in notes.files if f.start <= entry < f.end), "")


def exe_refusal(core: CoreFile, notes: CoreNotes, exe: str) -> str | None:
    """The warning that refuses ``--exe`` when the core states no build-id
    for its executable (the one AT_ENTRY falls in) and the file does not fit
    what the core records of it (:func:`exe_mismatch`); None otherwise.
    With a stated build-id drgn compares it, and open_core warns of a
    mismatch."""
    main = _main_path(notes)
    mappings = [f for f in notes.files if f.path == main] if main else []
    if build_id_in_core(core, [f for f in mappings if f.offset == 0]) is not None:
        return None
    try:
        reason = exe_mismatch(exe, core.arch, mappings, core.read)
    except OSError as exc:
        reason = f"cannot be read ({exc.strerror})"
    if reason is None:
        return None
    return f"--exe {exe}: {reason}, so it is not the core's {main or 'executable'}; not used"


def build_id_in_core(core: CoreFile, heads: Sequence[FileMapping]) -> str | None:
    """The GNU build-id of a file, read from an ELF image of it that the core
    holds (``heads``: the file's mappings of file offset 0), or None.

    The kernel dumps the first page of a file mapping that starts with an ELF
    header. That page need not be the text mapping's: with 64 KiB pages a small
    executable's data mapping also starts at file offset 0 and may be the only
    one dumped. Any mapping of file offset 0 shows the file's first bytes, so
    the build-id note is read at its file offset in that mapping.
    """
    for f in heads:
        size = f.end - f.start
        ehdr = core.read(f.start, 64)
        if ehdr is None or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
            continue
        (phoff,) = struct.unpack_from("<Q", ehdr, 32)
        phentsize, phnum = struct.unpack_from("<HH", ehdr, 54)
        if phentsize != 56 or phoff + 56 * phnum > min(size, 1 << 16):
            continue
        phdrs = core.read(f.start + phoff, 56 * phnum)
        for i in range(phnum if phdrs is not None else 0):
            p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from(
                "<IIQQQQ", phdrs, 56 * i
            )
            if p_type != 4 or p_filesz > 1 << 16 or p_offset + p_filesz > size:  # PT_NOTE
                continue
            build_id = gnu_build_id(core.read(f.start + p_offset, p_filesz))
            if build_id:
                return build_id
    return None
