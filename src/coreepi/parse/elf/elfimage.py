"""The few facts coreepi reads from ELF files on disk on every core: program
headers, a section by name, the GNU build-id.

pyelftools parses these too, but importing it and building its section
tables costs more than the rest of a small core's analysis (benchmarks in
docs/performance.md); these reads are a few ``struct`` calls. Layouts from
the System V gABI (ELF64 header, program and section headers, notes);
64-bit little-endian only (x86-64, aarch64), anything else reads as "not an
ELF image" (None / empty).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = [
    "ProgramHeader",
    "Section",
    "build_id",
    "gnu_build_id",
    "program_headers",
    "read_section",
    "read_section_at",
]

PT_NOTE = 4
SHT_NOBITS = 8
NT_GNU_BUILD_ID = 3
EHDR_SIZE, PHDR_SIZE, SHDR_SIZE = 64, 56, 64
MAX_HEADERS = 1 << 16  # e_phnum / e_shnum are 16-bit
MAX_NOTE_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class ProgramHeader:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


@dataclass(frozen=True, slots=True)
class Section:
    type: int
    addr: int
    offset: int
    size: int
    link: int  # sh_link: e.g. a symbol table's string table


def _ehdr(fh: BinaryIO) -> tuple[int, int, int, int, int] | None:
    """(phoff, phnum, shoff, shnum, shstrndx) of an ELF64 LE header, or None."""
    fh.seek(0)
    raw = fh.read(EHDR_SIZE)
    if len(raw) < EHDR_SIZE or raw[:4] != b"\x7fELF" or raw[4] != 2 or raw[5] != 1:
        return None
    phoff, shoff = struct.unpack_from("<QQ", raw, 32)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", raw, 54)
    if (phnum and phentsize != PHDR_SIZE) or (shnum and shentsize != SHDR_SIZE):
        return None
    return phoff, phnum, shoff, shnum, shstrndx


def program_headers(fh: BinaryIO) -> list[ProgramHeader]:
    """Every program header of the ELF file open as ``fh``; [] if not ELF64 LE
    or the table is cut short."""
    header = _ehdr(fh)
    if header is None:
        return []
    phoff, phnum = header[0], header[1]
    fh.seek(phoff)
    raw = fh.read(PHDR_SIZE * phnum)
    if len(raw) < PHDR_SIZE * phnum:
        return []
    out = []
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, p_align = (
            struct.unpack_from("<IIQQQQQQ", raw, PHDR_SIZE * i)
        )
        out.append(ProgramHeader(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz, p_align))
    return out


def _section_headers(fh: BinaryIO) -> tuple[list[tuple[int, ...]], int] | None:
    """The raw section headers (sh_name, sh_type, sh_flags, sh_addr,
    sh_offset, sh_size, sh_link) and e_shstrndx, or None."""
    header = _ehdr(fh)
    if header is None:
        return None
    _phoff, _phnum, shoff, shnum, shstrndx = header
    if not shnum or shstrndx >= shnum:
        return None
    fh.seek(shoff)
    raw = fh.read(SHDR_SIZE * shnum)
    if len(raw) < SHDR_SIZE * shnum:
        return None
    return [struct.unpack_from("<IIQQQQI", raw, SHDR_SIZE * i) for i in range(shnum)], shstrndx


def _read(fh: BinaryIO, sh: tuple[int, ...]) -> tuple[Section, bytes] | None:
    _name, sh_type, _flags, addr, offset, size, link = sh
    section = Section(sh_type, addr, offset, size, link)
    if sh_type == SHT_NOBITS:
        return section, b""
    fh.seek(offset)
    data = fh.read(size)
    return (section, data) if len(data) == size else None


def read_section(fh: BinaryIO, name: str) -> tuple[Section, bytes] | None:
    """The section called ``name`` and its bytes (b"" for SHT_NOBITS), or None
    when the file has no such section or its headers are unreadable."""
    table = _section_headers(fh)
    if table is None:
        return None
    headers, shstrndx = table
    names = _read(fh, headers[shstrndx])
    if names is None:
        return None
    strings, wanted = names[1], name.encode()
    for sh in headers:
        start = sh[0]
        end = strings.find(b"\0", start)
        if strings[start : end if end >= 0 else None] == wanted:
            return _read(fh, sh)
    return None


def read_section_at(fh: BinaryIO, index: int) -> tuple[Section, bytes] | None:
    """Section number ``index`` and its bytes, or None."""
    table = _section_headers(fh)
    if table is None or not 0 <= index < len(table[0]):
        return None
    return _read(fh, table[0][index])


def gnu_build_id(data: bytes | None) -> str | None:
    """The NT_GNU_BUILD_ID in the bytes of a PT_NOTE segment, hex, or None."""
    pos = 0
    while data is not None and pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        desc = pos + 12 + ((namesz + 3) & ~3)
        if ntype == NT_GNU_BUILD_ID and data[pos + 12 : pos + 12 + namesz] == b"GNU\0" and descsz:
            return data[desc : desc + descsz].hex()
        pos = desc + ((descsz + 3) & ~3)
    return None


def build_id(fh: BinaryIO) -> str | None:
    """The GNU build-id of the ELF file open as ``fh`` (from its PT_NOTEs)."""
    for ph in program_headers(fh):
        if ph.type == PT_NOTE and ph.filesz <= MAX_NOTE_BYTES:
            fh.seek(ph.offset)
            found = gnu_build_id(fh.read(ph.filesz))
            if found:
                return found
    return None
