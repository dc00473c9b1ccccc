"""Function names from ELF symbol tables, for addresses drgn did not unwind to.

Stack scanning (:mod:`coreepi.analyze.stackscan`) recovers frames after drgn
has finished, so their names cannot come from drgn (which stays inside
:mod:`coreepi.parse.elf.unwind`). This module reads a module file's ``.symtab``
(or, when stripped, ``.dynsym``) once and answers "which function holds this
address, and where does it start?" by binary search.

The symbol table is decoded with :mod:`struct` straight from the section
bytes (``Elf64_Sym``: name u32, info u8, other u8, shndx u16, value u64, size
u64; gABI "Symbol Table"), not symbol by symbol with pyelftools, which is
~20x slower on a libc-sized table. Only ELF64 little-endian objects (x86-64,
aarch64) are read; anything else yields no symbols, never an exception.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from functools import lru_cache

from coreepi.model.report import Module
from coreepi.parse.demangle import demangle
from coreepi.parse.elf.elfimage import SHT_NOBITS, program_headers, read_section, read_section_at

__all__ = ["FunctionSymbol", "ModuleSymbols", "SymbolResolver"]

_SYM = struct.Struct("<IBBHQQ")
STT_FUNC, STT_GNU_IFUNC = 2, 10
PT_LOAD = 1
PAGE = 0x1000


@dataclass(frozen=True, slots=True)
class FunctionSymbol:
    """A function symbol: raw (mangled) ``name``, link-time ``start``, ``size`` in bytes."""

    name: str
    start: int
    size: int


class ModuleSymbols:
    """The function symbols of one ELF file, sorted by link-time address.

    ``first_vaddr``: the lowest PT_LOAD p_vaddr rounded down to a page, which
    maps to the module's base (its lowest mapped address), so that
    ``link address = address - base + first_vaddr``.
    """

    def __init__(self, symbols: list[FunctionSymbol], first_vaddr: int) -> None:
        self._symbols = sorted(symbols, key=lambda s: s.start)
        self._starts = [s.start for s in self._symbols]
        self.first_vaddr = first_vaddr

    def __len__(self) -> int:
        return len(self._symbols)

    @classmethod
    def from_file(cls, path: str) -> ModuleSymbols | None:
        """Read ``path``; None when it is not a readable ELF64 LE object."""
        try:
            with open(path, "rb") as fh:
                headers = program_headers(fh)
                if not headers:
                    return None
                loads = [h.vaddr for h in headers if h.type == PT_LOAD]
                first = min(loads) & ~(PAGE - 1) if loads else 0
                table = read_section(fh, ".symtab")
                if table is None or table[0].type == SHT_NOBITS:
                    table = read_section(fh, ".dynsym")
                if table is None or table[0].type == SHT_NOBITS:
                    return cls([], first)
                strtab = read_section_at(fh, table[0].link)
                if strtab is None:
                    return cls([], first)
                return cls(_functions(table[1], strtab[1]), first)
        except (OSError, struct.error, ValueError, IndexError):
            return None

    def lookup(self, link_address: int) -> FunctionSymbol | None:
        """The function whose [start, start + size) holds ``link_address``
        (a zero-sized symbol holds only its own address)."""
        i = bisect.bisect_right(self._starts, link_address) - 1
        # Aliases share a start; step back over zero-sized ones.
        while i >= 0:
            sym = self._symbols[i]
            if sym.start <= link_address < sym.start + max(sym.size, 1):
                return sym
            if sym.start != link_address or sym.size:
                return None
            i -= 1
        return None


def _functions(data: bytes, strtab: bytes) -> list[FunctionSymbol]:
    out: list[FunctionSymbol] = []
    usable = len(data) - len(data) % _SYM.size
    for name_off, info, _other, shndx, value, size in _SYM.iter_unpack(data[:usable]):
        if info & 0xF not in (STT_FUNC, STT_GNU_IFUNC) or shndx == 0 or value == 0:
            continue
        end = strtab.find(b"\0", name_off)
        if end < 0:
            continue
        raw = strtab[name_off:end].decode("utf-8", "replace")
        name = raw.split("@", 1)[0]  # versioned .dynsym names: memcpy@@GLIBC_2.14
        out.append(FunctionSymbol(name, value, size))  # demangled on lookup: most never are
    return out


@lru_cache(maxsize=64)
def _cached(path: str, mtime_ns: int, size: int) -> ModuleSymbols | None:
    # Keyed by (path, mtime, size): a rebuilt file is read again.
    return ModuleSymbols.from_file(path)


def module_symbols(path: str) -> ModuleSymbols | None:
    """:meth:`ModuleSymbols.from_file`, cached per process."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _cached(path, st.st_mtime_ns, st.st_size)


class SymbolResolver:
    """Symbolizes addresses of a report's modules from their local files.

    A module's file is its ``debug_file`` (the file drgn read symbols from,
    build-id checked by drgn), else its recorded ``path``.
    """

    def __init__(self, modules: list[Module]) -> None:
        self._modules = sorted(modules, key=lambda m: m.base)
        self._bases = [m.base for m in self._modules]

    def module_for(self, address: int) -> Module | None:
        i = bisect.bisect_right(self._bases, address) - 1
        if i >= 0 and address < self._modules[i].end:
            return self._modules[i]
        return None

    def function_for(self, address: int) -> tuple[str, int] | None:
        """(demangled name, offset of ``address`` from the function's start in
        bytes), or None when no symbol covers it."""
        module = self.module_for(address)
        if module is None:
            return None
        for path in dict.fromkeys(p for p in (module.debug_file, module.path) if p):
            symbols = module_symbols(path)
            if symbols is None or not len(symbols):
                continue
            link = address - module.base + symbols.first_vaddr
            sym = symbols.lookup(link)
            if sym is not None:
                return demangle(sym.name), link - sym.start
        return None
