"""Bounded reading of an ELF core file's structure: header, program headers,
notes and PT_LOAD memory.

The file is memory-mapped and never read whole: only the headers, the note
segments and the pages a caller asks for are touched. Every size read from the
file is checked against the file before it is used, so a hostile core cannot
make us allocate or loop without bound.

Sources: the System V gABI (ELF header, program headers, note format) and
Linux ``include/uapi/linux/elf.h`` / ``fs/binfmt_elf.c`` (core layout).
"""

from __future__ import annotations

import bisect
import errno
import mmap
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coreepi.errors import (
    CorruptCoreError,
    NotACoreError,
    ResourceLimitError,
    UnsupportedArchError,
)

__all__ = ["CoreFile", "LoadSegment", "Note", "ELF_MACHINES"]

ET_CORE = 4
PT_LOAD = 1
PT_NOTE = 4
PN_XNUM = 0xFFFF
PF_X, PF_W, PF_R = 1, 2, 4

EM_X86_64 = 62
EM_AARCH64 = 183
ELF_MACHINES = {
    3: "i386",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390",
    40: "arm",
    EM_X86_64: "x86_64",
    EM_AARCH64: "aarch64",
    243: "riscv",
    258: "loongarch",
}
SUPPORTED_MACHINES = {EM_X86_64: "x86_64", EM_AARCH64: "aarch64"}

# Limits that no real core reaches but that keep a hostile one bounded.
MAX_NOTES = 1_000_000
MAX_NOTE_DESC = 64 << 20  # bytes; the largest real notes (NT_FILE, xstate) are far smaller


@dataclass(frozen=True, slots=True)
class Note:
    """One ELF note: owner name, type, and where its descriptor lies in the file."""

    name: str
    type: int
    desc_offset: int
    desc_size: int


@dataclass(frozen=True, slots=True)
class LoadSegment:
    """One PT_LOAD segment: a region of the process's memory (sizes in bytes)."""

    vaddr: int
    memsz: int
    offset: int
    filesz: int
    flags: int

    @property
    def end(self) -> int:
        return self.vaddr + self.memsz

    @property
    def perms(self) -> str:
        return (
            ("r" if self.flags & PF_R else "-")
            + ("w" if self.flags & PF_W else "-")
            + ("x" if self.flags & PF_X else "-")
        )


class CoreFile:
    """A memory-mapped ELF64 little-endian core of x86-64 or aarch64.

    Raises :class:`NotACoreError` (not an ELF core), :class:`UnsupportedArchError`
    (another class, byte order or machine) or :class:`CorruptCoreError`
    (headers that point outside the file or make no sense). A core whose
    PT_LOAD data is cut short is accepted: :attr:`truncated` is then True and
    the missing bytes read as unavailable.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.warnings: list[str] = []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise NotACoreError(self.name, "no such file") from None
        except OSError as exc:
            raise NotACoreError(self.name, f"cannot read: {exc.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            raise NotACoreError(self.name, "is a directory, not a core file")
        if not stat.S_ISREG(st.st_mode):
            raise NotACoreError(self.name, "is not a regular file")
        self.size = st.st_size
        if self.size == 0:
            raise NotACoreError(self.name, "empty file")
        try:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            if exc.errno == errno.ENOMEM:  # this process's address-space limit, not the core
                raise ResourceLimitError(
                    self.name, f"cannot map the core ({self.size} bytes): {exc.strerror} "
                    "(the process's address-space limit)") from None
            raise NotACoreError(self.name, f"cannot read: {exc.strerror}") from None
        try:
            self._parse_header()
        except BaseException:
            self._map.close()
            raise

    def __enter__(self) -> CoreFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._map.close()

    # -- structure -----------------------------------------------------------

    def _parse_header(self) -> None:
        m = self._map
        if self.size < 4 or m[:4] != b"\x7fELF":
            raise NotACoreError(self.name, "not an ELF file")
        if self.size < 64:
            raise CorruptCoreError(self.name, f"ELF header truncated ({self.size} bytes)")
        ei_class, ei_data = m[4], m[5]
        e_type, e_machine = struct.unpack_from("<HH", m, 16)
        if ei_data == 2:  # big-endian: decode type/machine for the message only
            e_type, e_machine = struct.unpack_from(">HH", m, 16)
        if e_type != ET_CORE:
            kind = {
                1: "a relocatable object",
                2: "an executable",
                3: "a shared library or PIE executable",  # ET_DYN
            }.get(e_type, f"ELF type {e_type}")
            raise NotACoreError(self.name, f"an ELF file but not a core dump ({kind})")
        if ei_class != 2 or ei_data != 1 or e_machine not in SUPPORTED_MACHINES:
            arch = ELF_MACHINES.get(e_machine, f"e_machine {e_machine}")
            bits = {1: "32-bit", 2: "64-bit"}.get(ei_class, "unknown class")
            order = {1: "little-endian", 2: "big-endian"}.get(ei_data, "unknown byte order")
            raise UnsupportedArchError(
                self.name,
                f"core for {arch} ({bits}, {order}); coreepi reads x86_64 and aarch64 cores",
            )
        self.arch = SUPPORTED_MACHINES[e_machine]
        (e_phoff,) = struct.unpack_from("<Q", m, 32)
        (e_shoff,) = struct.unpack_from("<Q", m, 40)
        e_phentsize, e_phnum, e_shentsize = struct.unpack_from("<HHH", m, 54)
        if e_phnum == PN_XNUM:
            # gABI: the real count is in section header 0's sh_info.
            if e_shoff == 0 or e_shoff + 64 > self.size:
                raise CorruptCoreError(self.name, "PN_XNUM set but section header 0 is missing")
            (e_phnum,) = struct.unpack_from("<I", m, e_shoff + 44)
        if e_phentsize != 56:
            raise CorruptCoreError(self.name, f"program header size {e_phentsize}, expected 56")
        if e_phnum == 0:
            raise CorruptCoreError(self.name, "core has no program headers")
        if e_phoff + e_phnum * 56 > self.size:
            raise CorruptCoreError(
                self.name,
                f"program header table ({e_phnum} entries at offset {e_phoff}) "
                f"extends past the end of the file ({self.size} bytes)",
            )
        self.loads: list[LoadSegment] = []
        self._note_segments: list[tuple[int, int]] = []
        self.truncated = False
        short = 0
        for i in range(e_phnum):
            p_type, p_flags, p_offset, p_vaddr, _p_paddr, p_filesz, p_memsz, _align = (
                struct.unpack_from("<IIQQQQQQ", m, e_phoff + i * 56)
            )
            if p_type == PT_NOTE:
                if p_offset + p_filesz > self.size:
                    self.truncated = True
                    self.warnings.append(
                        f"note segment at offset {p_offset} is cut short by the end of the file"
                    )
                    p_filesz = max(0, self.size - p_offset)
                self._note_segments.append((p_offset, p_filesz))
            elif p_type == PT_LOAD:
                # The end must be an address too: no segment reaches 2**64.
                if p_filesz > p_memsz or p_vaddr + p_memsz >= 1 << 64:
                    raise CorruptCoreError(
                        self.name, f"PT_LOAD #{i} at 0x{p_vaddr:x} has impossible sizes"
                    )
                if p_filesz and p_offset + p_filesz > self.size:
                    self.truncated = True
                    short += 1
                self.loads.append(LoadSegment(p_vaddr, p_memsz, p_offset, p_filesz, p_flags))
        if not self._note_segments:
            raise CorruptCoreError(self.name, "core has no PT_NOTE segment")
        if short:
            self.warnings.append(
                f"core is truncated: {short} memory segment(s) end past the file's "
                f"{self.size} bytes; their missing pages are unavailable"
            )
        self.loads.sort(key=lambda s: s.vaddr)
        self._load_starts = [s.vaddr for s in self.loads]

    def notes(self) -> Iterator[Note]:
        """Yield every note of every PT_NOTE segment, in file order.

        Raises :class:`CorruptCoreError` when a note's sizes point outside its
        segment or when there are more than ``MAX_NOTES`` notes.
        """
        count = 0
        m = self._map
        for seg_offset, seg_size in self._note_segments:
            pos, end = seg_offset, seg_offset + seg_size
            while pos + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from("<III", m, pos)
                name_off = pos + 12
                desc_off = name_off + _align4(namesz)
                next_pos = desc_off + _align4(descsz)
                if descsz > MAX_NOTE_DESC or next_pos > end + 3 or desc_off + descsz > end:
                    raise CorruptCoreError(
                        self.name,
                        f"note at offset {pos} claims {namesz}+{descsz} bytes, beyond its "
                        f"segment ({end - pos} bytes left)",
                    )
                count += 1
                if count > MAX_NOTES:
                    raise CorruptCoreError(self.name, f"more than {MAX_NOTES} notes")
                name = bytes(m[name_off : name_off + namesz]).rstrip(b"\0").decode("latin-1")
                yield Note(name, ntype, desc_off, descsz)
                pos = next_pos

    def note_desc(self, note: Note) -> bytes:
        """The descriptor bytes of ``note`` (at most ``MAX_NOTE_DESC`` bytes)."""
        return bytes(self._map[note.desc_offset : note.desc_offset + note.desc_size])

    # -- memory --------------------------------------------------------------

    def segment_for(self, address: int) -> LoadSegment | None:
        """The PT_LOAD segment whose memory range holds ``address``."""
        i = bisect.bisect_right(self._load_starts, address) - 1
        if i >= 0 and self.loads[i].vaddr <= address < self.loads[i].end:
            return self.loads[i]
        return None

    def read(self, address: int, size: int) -> bytes | None:
        """Read ``size`` bytes of process memory at ``address``; None when any
        byte is not in the core (unmapped, not dumped, or truncated away)."""
        out = bytearray()
        while size > 0:
            seg = self.segment_for(address)
            if seg is None:
                return None
            rel = address - seg.vaddr
            if rel >= seg.filesz:
                return None
            n = min(size, seg.filesz - rel)
            start = seg.offset + rel
            if start + n > self.size:
                return None
            if n == size and not out:
                return self._map[start : start + n]  # within one segment: one copy
            out += self._map[start : start + n]
            address += n
            size -= n
        return bytes(out)

    def read_u64(self, address: int) -> int | None:
        data = self.read(address, 8)
        return None if data is None else int.from_bytes(data, "little")

    def read_c_string(self, address: int, limit: int = 4096) -> bytes | None:
        """A NUL-terminated string of at most ``limit`` bytes, without the NUL."""
        seg = self.segment_for(address)
        if seg is None:
            return None
        rel = address - seg.vaddr
        avail = min(limit, seg.filesz - rel)
        if avail <= 0:
            return None
        # Search the mapping for the NUL: copy the string, not ``limit`` bytes.
        start = seg.offset + rel
        stop = min(start + avail, self.size)
        nul = self._map.find(b"\0", start, stop) if start < stop else -1
        if nul < 0:
            if stop < start + avail:
                return None  # cut short by the end of the file
            nul = stop
        return self._map[start:nul]


def _align4(n: int) -> int:
    return (n + 3) & ~3
