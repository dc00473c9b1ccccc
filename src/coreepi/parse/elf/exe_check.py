"""Is a user's ``--exe`` the program a core was dumped from, when the core
states no build-id to compare with?

Without a build-id, drgn accepts any file offered for the main module, so a
wrong ``--exe`` would lend the report its build-id, size and symbols. What
the core does record is checked instead: the file must be an ELF executable
(``ET_EXEC`` or ``ET_DYN``) for the core's machine, and every mapping of it
in NT_FILE must fall in one of its ``PT_LOAD`` segments at the same
virtual-address-minus-file-offset (the kernel maps ``p_offset`` at
``p_vaddr`` plus one load bias), ending no later than that segment's
memory size rounded up to a 64 KiB page. (The file's name is not checked:
a renamed copy of the right executable is still right.)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from coreepi.parse.elf.corefile import SUPPORTED_MACHINES
from coreepi.parse.elf.elfimage import ProgramHeader, program_headers
from coreepi.parse.elf.notes import FileMapping

__all__ = ["exe_mismatch"]

_ET_EXEC, _ET_DYN, _PT_LOAD = 2, 3, 1
_MAX_PAGE = 1 << 16  # the largest page size a mapping's offset can be aligned to


def exe_mismatch(path: str, arch: str, mappings: Sequence[FileMapping]) -> str | None:
    """Why the ELF file at ``path`` cannot be the executable that the core
    (machine ``arch``, as :class:`~coreepi.parse.elf.corefile.CoreFile`
    names it) mapped as ``mappings`` (its NT_FILE entries; [] when the core
    has none: only type and machine are checked), or None when every check
    passes. Raises OSError when the file cannot be read."""
    with open(path, "rb") as fh:
        head = fh.read(20)
        if len(head) < 20 or head[:4] != b"\x7fELF":
            return "not an ELF file"
        if head[4] != 2 or head[5] != 1:
            return "not a 64-bit little-endian ELF file"
        e_type, e_machine = struct.unpack_from("<HH", head, 16)
        if e_type not in (_ET_EXEC, _ET_DYN):
            return f"ELF type {e_type} is not an executable"
        machine = SUPPORTED_MACHINES.get(e_machine, f"e_machine {e_machine}")
        if machine != arch:
            return f"built for {machine}, the core is {arch}"
        loads = [p for p in program_headers(fh) if p.type == _PT_LOAD]
    if not mappings:
        return None
    if not loads:
        return "no PT_LOAD segments"
    return _layout_mismatch(e_type == _ET_DYN, loads, mappings)


def _layout_mismatch(relocatable: bool, loads: list[ProgramHeader],
                     mappings: Sequence[FileMapping]) -> str | None:
    """The first mapping no PT_LOAD accounts for, described, or None."""
    bias = 0
    if relocatable:  # a PIE: the mapping of file offset 0 gives the load bias
        first = min(loads, key=lambda p: p.offset)
        heads = [m.start for m in mappings if m.offset == 0]
        if not heads:
            return None
        bias = min(heads) - (first.vaddr - first.offset)
    for m in mappings:
        if not any(_covers(p, m, bias) for p in loads):
            return (f"its PT_LOAD segments do not match the core's mapping "
                    f"{m.start:#x}-{m.end:#x} at file offset {m.offset:#x}")
    return None


def _covers(p: ProgramHeader, m: FileMapping, bias: int) -> bool:
    end = -(-(bias + p.vaddr + p.memsz) // _MAX_PAGE) * _MAX_PAGE
    return (p.offset - _MAX_PAGE < m.offset < p.offset + max(p.filesz, 1)
            and m.start - m.offset == bias + p.vaddr - p.offset
            and m.end <= end)
