"""Look up an exported symbol of a loaded module in the process memory, the
way the dynamic linker does: ELF header -> PT_DYNAMIC -> DT_GNU_HASH,
DT_SYMTAB, DT_STRTAB (System V gABI "Dynamic Section"; the GNU hash table
layout is glibc's ``elf/dl-lookup.c``). Needs no file on disk: the pages come
from the core, or from the mapped file through the process memory.
"""

from __future__ import annotations

import struct

from coreepi.analyze.context import AnalysisContext
from coreepi.model.report import Module

__all__ = ["find_module", "lookup_symbol"]

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_SYMTAB, DT_GNU_HASH = 0, 5, 6, 0x6FFFFEF5
SYM_SIZE = 24  # sizeof(Elf64_Sym)
MAX_DYNAMIC = 512  # entries; a real .dynamic has a few dozen
MAX_CHAIN = 4096


def _gnu_hash(name: bytes) -> int:
    h = 5381
    for c in name:
        h = (h * 33 + c) & 0xFFFFFFFF
    return h


def find_module(ctx: AnalysisContext, *prefixes: str) -> Module | None:
    """The first module whose file name starts with one of ``prefixes``
    (e.g. ``"libc.so"``)."""
    for module in ctx.report.modules:
        if module.path.rsplit("/", 1)[-1].startswith(prefixes):
            return module
    return None


def lookup_symbol(ctx: AnalysisContext, module: Module, name: str) -> int | None:
    """Run-time address of the dynamic symbol ``name`` of ``module`` (64-bit
    little-endian ELF), or None when it is absent or the tables are unreadable."""
    mem = ctx.memory
    if mem is None:
        return None
    base = module.base
    ehdr = mem.read(base, 64)
    if ehdr is None or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
        return None
    (phoff,) = struct.unpack_from("<Q", ehdr, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", ehdr, 0x36)
    phdrs = mem.read(base + phoff, phentsize * phnum) if phentsize >= 56 else None
    if phdrs is None:
        return None
    dynamic = None
    first_load = None
    for i in range(phnum):
        p_type, _, _, p_vaddr = struct.unpack_from("<IIQQ", phdrs, i * phentsize)
        if p_type == PT_LOAD and first_load is None:
            first_load = p_vaddr
        elif p_type == PT_DYNAMIC:
            dynamic = p_vaddr
    if dynamic is None or first_load is None:
        return None
    bias = module.load_bias if module.load_bias is not None else base - (first_load & ~0xFFF)
    table: dict[int, int] = {}
    raw = mem.read(bias + dynamic, 16 * MAX_DYNAMIC) or mem.read(bias + dynamic, 16 * 64)
    if raw is None:
        return None
    for tag, value in struct.iter_unpack("<qQ", raw):
        if tag == DT_NULL:
            break
        table.setdefault(tag, value)
    try:
        # glibc's ld.so relocates these d_ptr entries in place; the vDSO's
        # (and those of a few other loaders) stay link-time addresses.
        strtab, symtab, gnu_hash = (
            v + bias if v < bias else v
            for v in (table[DT_STRTAB], table[DT_SYMTAB], table[DT_GNU_HASH])
        )
    except KeyError:
        return None
    head = mem.read(gnu_hash, 16)
    if head is None:
        return None
    nbuckets, symoffset, bloom_size, _ = struct.unpack("<IIII", head)
    if nbuckets == 0:
        return None
    buckets_at = gnu_hash + 16 + 8 * bloom_size
    chains_at = buckets_at + 4 * nbuckets
    wanted = name.encode()
    h = _gnu_hash(wanted)
    bucket = mem.read(buckets_at + 4 * (h % nbuckets), 4)
    if bucket is None:
        return None
    (index,) = struct.unpack("<I", bucket)
    if index < symoffset:
        return None
    for _ in range(MAX_CHAIN):
        chain = mem.read(chains_at + 4 * (index - symoffset), 4)
        if chain is None:
            return None
        (chain_hash,) = struct.unpack("<I", chain)
        if (chain_hash | 1) == (h | 1):
            sym = mem.read(symtab + SYM_SIZE * index, SYM_SIZE)
            if sym is None:
                return None
            st_name, _, _, st_shndx, st_value, _ = struct.unpack("<IBBHQQ", sym)
            if st_shndx != 0 and ctx.read_c_string(strtab + st_name, len(wanted) + 1) == wanted:
                return bias + st_value
        if chain_hash & 1:
            return None
        index += 1
    return None
