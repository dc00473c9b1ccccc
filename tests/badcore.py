"""Bad inputs for ``coreepi inspect``: real small seed cores, their layout, and
byte-level mutations of them (used by ``test_bad_input.py`` and
``test_fuzz_core.py``).

Seeds:

* a gcore core of a tiny C program that dereferences NULL (built with gcc, run
  under ``gdb -batch``; gdb writes the note segment *after* the memory), and
* elfutils' ``backtrace.x86_64.core`` from ``../shared/testdata`` (GPL-3.0, not
  redistributed with coreepi: see ``testdata.shared``; a kernel
  core: the note segment comes *before* the memory).

Layouts follow the System V gABI (ELF64 header, program headers, notes).
"""

from __future__ import annotations

import bz2
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from testdata import shared, shared_missing

__all__ = [
    "ELFUTILS_CORE",
    "Layout",
    "NoteHeader",
    "ProgramHeader",
    "SeedUnavailable",
    "elfutils_core",
    "gcore_core",
    "layout",
]

ELFUTILS_CORES = shared("elf-cores-elfutils")  # None where ../shared/testdata is absent
ELFUTILS_CORE = None if ELFUTILS_CORES is None else ELFUTILS_CORES / "backtrace.x86_64.core.bz2"

PT_LOAD, PT_NOTE = 1, 4
EHDR_SIZE, PHDR_SIZE, NHDR_SIZE = 64, 56, 12

NULL_DEREF_C = """\
int main(void)
{
    volatile int *p = 0;
    return *p; /* SIGSEGV, SEGV_MAPERR at address 0 */
}
"""


class SeedUnavailable(Exception):
    """A seed core cannot be made here (tool or file missing); the reason says which."""


def gcore_core(workdir: Path) -> Path:
    """Build the NULL-dereferencing program in ``workdir`` and write its core
    with gdb's ``gcore`` at the SIGSEGV. Returns the core's path."""
    for tool in ("gcc", "gdb"):
        if shutil.which(tool) is None:
            raise SeedUnavailable(f"{tool} is not installed; cannot make a seed core")
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "null_deref.c"
    source.write_text(NULL_DEREF_C)
    binary = workdir / "null_deref"
    build = subprocess.run(
        ["gcc", "-g", "-O0", "-o", binary, source], capture_output=True, text=True, timeout=120
    )
    if build.returncode != 0:
        raise SeedUnavailable(f"gcc failed: {build.stderr.strip()[:300]}")
    core = workdir / "null_deref.core"
    run = subprocess.run(
        ["gdb", "-batch", "-nx", "-ex", "run", "-ex", f"gcore {core}", "--args", binary],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workdir,
    )
    if not core.is_file() or core.stat().st_size == 0:
        output = (run.stdout + run.stderr).strip()[-300:]
        raise SeedUnavailable(f"gdb did not write a core (ptrace not allowed?): {output}")
    return core


def elfutils_core(workdir: Path, arch: str = "x86_64") -> Path:
    """elfutils' kernel core of ``backtrace`` for ``arch`` (x86_64, aarch64),
    decompressed into ``workdir``."""
    if ELFUTILS_CORES is None:
        raise SeedUnavailable(shared_missing("elf-cores-elfutils"))
    packed = ELFUTILS_CORES / f"backtrace.{arch}.core.bz2"
    if not packed.is_file():
        raise SeedUnavailable(f"{packed} is absent")
    workdir.mkdir(parents=True, exist_ok=True)
    core = workdir / f"backtrace.{arch}.core"
    with bz2.open(packed) as src, open(core, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return core


@dataclass(frozen=True)
class ProgramHeader:
    index: int
    at: int  # file offset of this program header
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


@dataclass(frozen=True)
class NoteHeader:
    at: int  # file offset of the note header (namesz, descsz, type)
    namesz: int
    descsz: int
    type: int
    name: bytes
    desc_at: int


@dataclass(frozen=True)
class Layout:
    """Where the structures of an ELF64 little-endian core lie in its bytes."""

    size: int
    phoff: int
    phnum: int
    shoff: int
    phdrs: tuple[ProgramHeader, ...]
    notes: tuple[NoteHeader, ...]

    @property
    def headers_end(self) -> int:
        return self.phoff + self.phnum * PHDR_SIZE

    @property
    def note_segment(self) -> ProgramHeader:
        return next(p for p in self.phdrs if p.type == PT_NOTE)

    @property
    def loads(self) -> tuple[ProgramHeader, ...]:
        return tuple(p for p in self.phdrs if p.type == PT_LOAD)

    def note(self, type_: int) -> NoteHeader:
        return next(n for n in self.notes if n.type == type_)

    def structure_ranges(self) -> list[tuple[int, int]]:
        """(start, end) of the ELF header + program headers, and of the notes."""
        seg = self.note_segment
        return [(0, self.headers_end), (seg.offset, seg.offset + seg.filesz)]


def layout(data: bytes) -> Layout:
    """The layout of a well-formed core (the seeds); not for hostile input."""
    (phoff, shoff) = struct.unpack_from("<QQ", data, 32)
    (phnum,) = struct.unpack_from("<H", data, 56)
    phdrs = []
    for i in range(phnum):
        at = phoff + i * PHDR_SIZE
        p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", data, at
        )
        phdrs.append(ProgramHeader(i, at, p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
    notes = []
    for seg in (p for p in phdrs if p.type == PT_NOTE):
        pos, end = seg.offset, seg.offset + seg.filesz
        while pos + NHDR_SIZE <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name = data[pos + NHDR_SIZE : pos + NHDR_SIZE + namesz]
            desc_at = pos + NHDR_SIZE + _align4(namesz)
            notes.append(NoteHeader(pos, namesz, descsz, ntype, name, desc_at))
            pos = desc_at + _align4(descsz)
    return Layout(len(data), phoff, phnum, shoff, tuple(phdrs), tuple(notes))


def _align4(n: int) -> int:
    return (n + 3) & ~3


def note(name: bytes, type_: int, desc: bytes) -> bytes:
    """One ELF note (Elf64_Nhdr, name and descriptor padded to 4 bytes)."""
    namesz = len(name) + 1 if name else 0
    raw_name = name + b"\0" if name else b""
    return (
        struct.pack("<III", namesz, len(desc), type_)
        + raw_name.ljust(_align4(namesz), b"\0")
        + desc.ljust(_align4(len(desc)), b"\0")
    )


@dataclass(frozen=True)
class ExtraLoad:
    """A PT_LOAD to add: ``filesz`` bytes of ``fill`` (None: a hole, so the
    file stays sparse)."""

    vaddr: int
    memsz: int
    filesz: int
    flags: int = 6  # rw-
    fill: bytes | None = None


def craft_core(
    out: Path,
    seed: bytes,
    *,
    extra_notes: bytes = b"",
    drop_notes: bool = False,
    extra_loads: tuple[ExtraLoad, ...] = (),
) -> Path:
    """Write a variant of the core ``seed`` to ``out``: the seed's bytes, then
    the extra note segment and PT_LOAD data, then a new program header table
    (the seed's headers plus the new ones) that ``e_phoff`` points to. With
    ``drop_notes`` the seed's PT_NOTE headers are left out."""
    lay = layout(seed)
    phdrs = [
        seed[p.at : p.at + PHDR_SIZE] for p in lay.phdrs if not (drop_notes and p.type == PT_NOTE)
    ]
    with open(out, "wb") as fh:
        fh.write(seed)
        pos = len(seed)
        if extra_notes:
            pos = _align(pos, 8)
            fh.seek(pos)
            fh.write(extra_notes)
            phdrs.append(_phdr(PT_NOTE, 4, pos, 0, len(extra_notes), 0))
            pos += len(extra_notes)
        for load in extra_loads:
            pos = _align(pos, 4096)
            if load.fill is not None:
                fh.seek(pos)
                fh.write((load.fill * (load.filesz // max(1, len(load.fill)) + 1))[: load.filesz])
            phdrs.append(_phdr(PT_LOAD, load.flags, pos, load.vaddr, load.filesz, load.memsz))
            pos += load.filesz
        if len(phdrs) >= 0xFFFF:
            raise ValueError("too many program headers for e_phnum")
        phoff = _align(pos, 8)
        fh.seek(phoff)
        fh.write(b"".join(phdrs))
        fh.seek(32)
        fh.write(struct.pack("<Q", phoff))
        fh.seek(56)
        fh.write(struct.pack("<H", len(phdrs)))
    return out


def _phdr(p_type: int, flags: int, offset: int, vaddr: int, filesz: int, memsz: int) -> bytes:
    return struct.pack("<IIQQQQQQ", p_type, flags, offset, vaddr, 0, filesz, memsz, 1)


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def notes_first(seed: bytes) -> bytes:
    """The core ``seed`` laid out as the kernel writes it: ELF header, program
    headers, the note segment, then the PT_LOAD data page-aligned (gdb's gcore
    puts the notes after the memory). No section headers."""
    lay = layout(seed)
    order = sorted(lay.phdrs, key=lambda p: p.type != PT_NOTE)  # notes first, stable
    pos = EHDR_SIZE + PHDR_SIZE * len(order)
    placed: list[tuple[ProgramHeader, int]] = []
    for p in order:
        pos = _align(pos, 4096 if p.type == PT_LOAD else 8)
        placed.append((p, pos))
        pos += p.filesz
    out = bytearray(pos)
    out[:EHDR_SIZE] = seed[:EHDR_SIZE]
    struct.pack_into("<QQ", out, 32, EHDR_SIZE, 0)  # e_phoff, e_shoff
    struct.pack_into("<HHHH", out, 56, len(order), 0, 0, 0)  # e_phnum, e_shentsize/num/strndx
    for i, (p, offset) in enumerate(placed):
        header = bytearray(seed[p.at : p.at + PHDR_SIZE])
        struct.pack_into("<Q", header, 8, offset)
        out[EHDR_SIZE + PHDR_SIZE * i : EHDR_SIZE + PHDR_SIZE * (i + 1)] = header
        out[offset : offset + p.filesz] = seed[p.offset : p.offset + p.filesz]
    return bytes(out)


def patch(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    """``data`` with ``struct.pack(fmt, *values)`` written at ``offset``."""
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


PN_XNUM = 0xFFFF


def with_pn_xnum(seed: bytes, *, sh_info: int | None = None, shoff: int | None = None) -> bytes:
    """``seed`` with e_phnum = PN_XNUM and the real count in section header
    0's sh_info (gABI "Extended program header numbering"), as the kernel
    writes a core of more than 65534 segments. ``sh_info`` overrides the
    count, ``shoff`` where e_shoff points (default: the appended header)."""
    lay = layout(seed)
    at = _align(len(seed), 8)
    # Elf64_Shdr: name, type (SHT_NULL), flags, addr, offset, size, link, info, align, entsize
    count = lay.phnum if sh_info is None else sh_info
    shdr0 = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, count, 0, 0)
    out = seed.ljust(at, b"\0") + shdr0
    out = patch(out, 40, "<Q", at if shoff is None else shoff)  # e_shoff
    return patch(out, 56, "<HHHH", PN_XNUM, 64, 1, 0)  # e_phnum, e_shentsize, e_shnum, e_shstrndx
