"""Loaded objects from the dynamic linker's link map, read from the core's
memory: the module list of a core without an NT_FILE note.

The kernel's NT_FILE note is what normally names the mapped files. Cores
written by other tools (or cut short) can lack it; the dynamic linker's own
list is still in memory. The walk follows the System V ABI and glibc's
``<link.h>``: AT_PHDR (auxv) -> the executable's program headers ->
PT_DYNAMIC -> DT_DEBUG -> ``struct r_debug`` (``r_map`` at offset 8) ->
``struct link_map`` chain (``l_addr`` +0, ``l_name`` +8, ``l_ld`` +16,
``l_next`` +24). Each object's own ELF and program headers are read at its
load address (the kernel dumps the first page of every ELF mapping,
coredump_filter bit 4), which gives its mapped range, its file offsets and
its build-id. 64-bit little-endian only (x86-64, aarch64).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from coreepi.parse.elf.corefile import CoreFile
from coreepi.parse.elf.elfimage import ProgramHeader, gnu_build_id
from coreepi.parse.elf.notes import FileMapping

__all__ = ["LinkMapObject", "link_map_objects"]

AT_PHDR, AT_PHNUM = 3, 5
PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_PHDR = 1, 2, 4, 6
DT_NULL, DT_DEBUG = 0, 21
PHDR_SIZE = 56
PAGE = 4096  # mapping granularity assumed for file offsets (x86-64; aarch64 4 KiB kernels)
MAX_OBJECTS = 4096  # a link map longer than this is corrupt (or a cycle)
MAX_DYNAMIC = 512  # dynamic entries read from the executable
MAX_PHNUM = 64  # program headers read per object


@dataclass(frozen=True, slots=True)
class LinkMapObject:
    """One loaded object: its name as the link map spells it ("" for the main
    program), its load bias (``l_addr``), its dynamic section address
    (``l_ld``), its lowest and highest mapped addresses, its build-id (hex,
    when its notes are in the core), and one :class:`FileMapping` per
    PT_LOAD (page-aligned; the file part only, not the bss beyond it)."""

    name: str
    load_bias: int
    dynamic: int
    start: int
    end: int
    build_id: str | None
    mappings: tuple[FileMapping, ...]


def link_map_objects(core: CoreFile, auxv: dict[int, int]) -> list[LinkMapObject]:
    """The objects of the link map, in link-map order (the main program first),
    each with ``name`` as the dynamic linker recorded it. Empty when the
    executable is static, has no DT_DEBUG, or the structures are not in the
    core; objects whose ELF header is not in the core are left out."""
    phdr, phnum = auxv.get(AT_PHDR), auxv.get(AT_PHNUM)
    if phdr is None or phnum is None or not 0 < phnum <= MAX_PHNUM:
        return []
    headers = _program_headers(core, phdr, phnum)
    self_header = next((h for h in headers if h.type == PT_PHDR), None)
    dynamic = next((h for h in headers if h.type == PT_DYNAMIC), None)
    if self_header is None or dynamic is None:
        return []
    exe_bias = phdr - self_header.vaddr
    r_debug = _dt_debug(core, exe_bias + dynamic.vaddr)
    entry = core.read_u64(r_debug + 8) if r_debug else None  # r_map
    out: list[LinkMapObject] = []
    seen: set[int] = set()
    while entry and entry not in seen and len(out) < MAX_OBJECTS:
        seen.add(entry)
        raw = core.read(entry, 32)
        if raw is None:
            break
        l_addr, l_name, l_ld, l_next = struct.unpack("<QQQQ", raw)
        name_bytes = core.read_c_string(l_name) if l_name else b""
        name = (name_bytes or b"").decode("utf-8", "surrogateescape")
        if not out:
            obj = _object(core, name, l_addr, l_ld, headers)
        else:
            obj = _object_at(core, name, l_addr, l_ld)
        if obj is not None:
            out.append(obj)
        entry = l_next
    return out


def _program_headers(core: CoreFile, address: int, count: int) -> list[ProgramHeader]:
    """The ``count`` program headers at ``address`` in the process's memory;
    [] when they are not in the core."""
    raw = core.read(address, PHDR_SIZE * count)
    if raw is None:
        return []
    return [
        ProgramHeader(p_type, flags, offset, vaddr, filesz, memsz, align)
        for p_type, flags, offset, vaddr, _paddr, filesz, memsz, align in (
            struct.unpack_from("<IIQQQQQQ", raw, PHDR_SIZE * i) for i in range(count)
        )
    ]


def _dt_debug(core: CoreFile, address: int) -> int | None:
    """The value of DT_DEBUG (the address of ``r_debug``) in the dynamic
    section at ``address``, or None (static executable, not yet set)."""
    for i in range(MAX_DYNAMIC):
        raw = core.read(address + 16 * i, 16)
        if raw is None:
            return None
        tag, value = struct.unpack("<qQ", raw)
        if tag == DT_NULL:
            return None
        if tag == DT_DEBUG:
            return value or None
    return None


def _object_at(core: CoreFile, name: str, l_addr: int, l_ld: int) -> LinkMapObject | None:
    """A shared object: its ELF header is at its lowest PT_LOAD, which for a
    shared object linked at 0 (every one ld.so loads) is ``l_addr``."""
    ehdr = core.read(l_addr, 64)
    if ehdr is None or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
        return None
    (phoff,) = struct.unpack_from("<Q", ehdr, 32)
    phentsize, phnum = struct.unpack_from("<HH", ehdr, 54)
    if phentsize != PHDR_SIZE or not 0 < phnum <= MAX_PHNUM:
        return None
    return _object(core, name, l_addr, l_ld, _program_headers(core, l_addr + phoff, phnum))


def _object(
    core: CoreFile,
    name: str,
    bias: int,
    l_ld: int,
    headers: list[ProgramHeader],
) -> LinkMapObject | None:
    loads = [h for h in headers if h.type == PT_LOAD]
    if not loads:
        return None
    mappings = []
    for h in loads:
        start = (bias + h.vaddr) & ~(PAGE - 1)
        end = (bias + h.vaddr + h.filesz + PAGE - 1) & ~(PAGE - 1)
        if end > start:
            mappings.append(FileMapping(start, end, h.offset & ~(PAGE - 1), name))
    start = min((bias + h.vaddr) & ~(PAGE - 1) for h in loads)
    end = max((bias + h.vaddr + h.memsz + PAGE - 1) & ~(PAGE - 1) for h in loads)
    build_id = None
    for h in headers:
        if h.type == PT_NOTE and h.filesz <= 1 << 16:
            build_id = gnu_build_id(core.read(bias + h.vaddr, h.filesz))
            if build_id:
                break
    return LinkMapObject(name, bias, l_ld, start, end, build_id, tuple(mappings))
