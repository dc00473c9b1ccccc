"""Is a file on this machine the one a core mapped, when the core states no
build-id to compare with? (``--exe``, or a module's file under ``--sysroot``
or at its recorded path.)

Without a build-id, drgn accepts any file offered for a module, so a wrong
file would lend the report its build-id, size and symbols. What the core
does record is checked instead:

- layout: the file must be an ELF executable or shared object (``ET_EXEC``
  or ``ET_DYN``) for the core's machine, and every mapping of it in NT_FILE
  must fall in one of its ``PT_LOAD`` segments at the same
  virtual-address-minus-file-offset (the kernel maps ``p_offset`` at
  ``p_vaddr`` plus one load bias), ending no later than that segment's
  memory size rounded up to a 64 KiB page;
- content: two small programs built by one toolchain have the same layout,
  so the bytes the core holds of the file's read-only segments (the kernel
  dumps at least the ELF header page, coredump_filter bit 4; gdb's gcore
  dumps more) must be the file's bytes. Nothing writes to a segment without
  ``PF_W`` after it is mapped (RELRO lives in a writable segment), so any
  difference means another file.

(The file's name is not checked: a renamed copy of the right file is still
right.)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import BinaryIO

from coreepi.parse.elf.corefile import SUPPORTED_MACHINES
from coreepi.parse.elf.elfimage import ProgramHeader, program_headers
from coreepi.parse.elf.notes import FileMapping

__all__ = ["MemoryReader", "dynamic_address", "exe_mismatch"]

_ET_EXEC, _ET_DYN, _PT_LOAD, _PT_DYNAMIC, _PF_W = 2, 3, 1, 2, 2
_MAX_PAGE = 1 << 16  # the largest page size a mapping's offset can be aligned to
_MAX_COMPARE = 1 << 16  # bytes compared per mapping: enough to tell files apart, cheap

#: reads process memory from the core: (address, size) -> bytes, or None
#: when any of them is not in the core (``CoreFile.read``)
MemoryReader = Callable[[int, int], "bytes | None"]


def exe_mismatch(path: str, arch: str, mappings: Sequence[FileMapping],
                 read: MemoryReader | None = None) -> str | None:
    """Why the ELF file at ``path`` cannot be the file that the core (machine
    ``arch``, as :class:`~coreepi.parse.elf.corefile.CoreFile` names it)
    mapped as ``mappings`` (its NT_FILE entries; [] when the core has none:
    only type and machine are checked), or None when every check passes.
    ``read``: the core's memory, for the content check (None: layout only).
    Raises OSError when the file cannot be read."""
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
        bias = _load_bias(e_type == _ET_DYN, loads, mappings)
        if bias is None:
            return None
        reason = _layout_mismatch(loads, mappings, bias)
        if reason is None and read is not None:
            reason = _content_mismatch(fh, loads, mappings, bias, read)
        return reason


def dynamic_address(path: str, mappings: Sequence[FileMapping]) -> int | None:
    """Run-time address of the dynamic section (``PT_DYNAMIC``) of the ELF
    file at ``path`` loaded as ``mappings`` (what the link map's ``l_ld``
    holds, and what drgn keys a shared library by), or None when the file
    has none or cannot be read."""
    try:
        with open(path, "rb") as fh:
            headers = program_headers(fh)
    except OSError:
        return None
    loads = [p for p in headers if p.type == _PT_LOAD]
    dynamic = next((p for p in headers if p.type == _PT_DYNAMIC), None)
    bias = _load_bias(True, loads, mappings) if loads else None
    return None if dynamic is None or bias is None else bias + dynamic.vaddr


def _load_bias(relocatable: bool, loads: list[ProgramHeader],
               mappings: Sequence[FileMapping]) -> int | None:
    """Run-time minus link-time addresses: 0 for ``ET_EXEC``; for a PIE or a
    shared object, from the mapping of file offset 0; None when the core
    records no such mapping (nothing to check against)."""
    if not relocatable:
        return 0
    first = min(loads, key=lambda p: p.offset)
    heads = [m.start for m in mappings if m.offset == 0]
    if not heads:
        return None
    return min(heads) - (first.vaddr - first.offset)


def _layout_mismatch(loads: list[ProgramHeader], mappings: Sequence[FileMapping],
                     bias: int) -> str | None:
    """The first mapping no PT_LOAD accounts for, described, or None."""
    for m in mappings:
        if not any(_covers(p, m, bias) for p in loads) and not _reserved_gap(loads, m, bias):
            return (f"its PT_LOAD segments do not match the core's mapping "
                    f"{m.start:#x}-{m.end:#x} at file offset {m.offset:#x}")
    return None


def _content_mismatch(fh: BinaryIO, loads: list[ProgramHeader],
                      mappings: Sequence[FileMapping], bias: int,
                      read: MemoryReader) -> str | None:
    """The first read-only mapping whose bytes in the core differ from the
    file's, described, or None (mappings the core does not hold are skipped)."""
    for m in mappings:
        segment = next((p for p in loads if _covers(p, m, bias)), None)
        if segment is None or segment.flags & _PF_W:
            continue
        size = min(m.end - m.start, segment.offset + segment.filesz - m.offset, _MAX_COMPARE)
        if size <= 0:
            continue
        in_core = read(m.start, size)
        if in_core is None:
            continue
        fh.seek(m.offset)
        if fh.read(size) != in_core:
            return (f"its bytes differ from the core's copy of the mapping "
                    f"{m.start:#x}-{m.end:#x} (file offset {m.offset:#x})")
    return None


def _reserved_gap(loads: list[ProgramHeader], m: FileMapping, bias: int) -> bool:
    """Whether ``m`` is the hole between two segments that the dynamic
    linker maps with the first one and leaves PROT_NONE (glibc's
    ``_dl_map_segments`` maps the whole span from the first segment's file
    offset, then protects the gaps: with 2 MiB segment alignment, old
    toolchains' default, the gap is most of the span)."""
    first = min(loads, key=lambda p: p.offset)
    span_end = max(p.vaddr + p.memsz for p in loads) + bias
    return (m.start - m.offset == bias + first.vaddr - first.offset
            and bias + first.vaddr <= m.start and m.end <= span_end)


def _covers(p: ProgramHeader, m: FileMapping, bias: int) -> bool:
    end = -(-(bias + p.vaddr + p.memsz) // _MAX_PAGE) * _MAX_PAGE
    return (p.offset - _MAX_PAGE < m.offset < p.offset + max(p.filesz, 1)
            and m.start - m.offset == bias + p.vaddr - p.offset
            and m.end <= end)
