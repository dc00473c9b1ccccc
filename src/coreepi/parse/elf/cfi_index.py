"""Which addresses of an ELF object have DWARF call-frame information.

drgn unwinds a frame with CFI when the callee's pc has an FDE, and falls back
to the frame-pointer chain otherwise, but it does not say which it used. This
index answers "does this link-time pc have an FDE?", which is exactly what
decides a caller frame's trust (``cfi`` or ``frame-pointer``).

It reads ``.eh_frame_hdr``'s sorted search table and the one FDE it points to,
so a lookup costs one binary search. Objects without ``.eh_frame_hdr`` fall
back to pyelftools' full parse of ``.eh_frame`` / ``.debug_frame``.

Sources: Linux Standard Base Core spec, "Exception Frames" (``.eh_frame``,
``.eh_frame_hdr``, DW_EH_PE pointer encodings); DWARF 5 §6.4.1 (CIE/FDE).
"""

from __future__ import annotations

import bisect
import io
import struct
from dataclasses import dataclass

from typing import TYPE_CHECKING, BinaryIO

from coreepi.parse.elf.elfimage import SHT_NOBITS, read_section

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile

__all__ = ["CfiIndex"]

DW_EH_PE_omit = 0xFF
DW_EH_PE_datarel_sdata4 = 0x3B  # DW_EH_PE_datarel | DW_EH_PE_sdata4


@dataclass(slots=True)
class _Section:
    addr: int
    data: bytes


class CfiIndex:
    """FDE coverage of one ELF object, by link-time address.

    Build with :meth:`from_elf` (a path or the bytes of an ELF image). Never
    raises on a malformed object: a table it cannot read covers nothing.
    """

    def __init__(self) -> None:
        self._hdr: _Section | None = None
        self._eh: _Section | None = None
        self._table: list[tuple[int, int]] = []  # (initial location, FDE address)
        self._keys: list[int] = []
        self._ranges: list[tuple[int, int]] = []  # fallback: sorted (start, end)
        self._range_starts: list[int] = []

    @classmethod
    def from_elf(cls, source: str | bytes) -> CfiIndex:
        index = cls()
        try:
            if isinstance(source, bytes):
                index._fill(io.BytesIO(source))
            else:
                with open(source, "rb") as fh:
                    index._fill(fh)
        except (OSError, struct.error, ValueError, KeyError, IndexError):
            pass
        return index

    def _fill(self, fh: BinaryIO) -> None:
        if self._load_search_table(fh):
            return
        if not any(_has_data(fh, name) for name in (".eh_frame", ".debug_frame")):
            return  # e.g. a separate debug file: .eh_frame is SHT_NOBITS there
        # pyelftools (slow to import and to open a file) only for the rare
        # object without a search table.
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        try:
            self._load(ELFFile(fh))
        except ELFError:
            pass

    def _load_search_table(self, fh: BinaryIO) -> bool:
        """Read ``.eh_frame_hdr``'s search table; False when there is none."""
        hdr = read_section(fh, ".eh_frame_hdr")
        eh = read_section(fh, ".eh_frame")
        if hdr is None or eh is None or hdr[0].type == SHT_NOBITS:
            return False
        self._hdr = _Section(hdr[0].addr, hdr[1])
        self._eh = _Section(eh[0].addr, eh[1])
        self._read_search_table()
        return bool(self._table)

    def _load(self, elf: ELFFile) -> None:
        """No usable search table: parse every FDE once (slower, but rare)."""
        # Only sections with contents: a separate debug file keeps .eh_frame as
        # SHT_NOBITS (pyelftools would read its zeros as empty entries), and
        # get_dwarf_info() reads and decompresses every .debug_* section, so
        # skip it when there is no CFI to read at all.
        wanted = {
            getter
            for getter, name in (("EH_CFI_entries", ".eh_frame"), ("CFI_entries", ".debug_frame"))
            if _has_contents(elf, name)
        }
        ranges: list[tuple[int, int]] = []
        if wanted and elf.has_dwarf_info():
            dwarf = elf.get_dwarf_info()
            for getter in ("EH_CFI_entries", "CFI_entries"):
                has = dwarf.has_EH_CFI() if getter == "EH_CFI_entries" else dwarf.has_CFI()
                if getter not in wanted or not has:
                    continue
                for entry in getattr(dwarf, getter)():
                    header = getattr(entry, "header", None)  # ZERO terminators have none
                    if header is not None and "initial_location" in header:
                        start = header["initial_location"]
                        ranges.append((start, start + header["address_range"]))
        ranges.sort()
        self._ranges = ranges
        self._range_starts = [r[0] for r in ranges]

    def _read_search_table(self) -> None:
        assert self._hdr is not None
        data, base = self._hdr.data, self._hdr.addr
        if len(data) < 4 or data[0] != 1:
            return
        ptr_enc, count_enc, table_enc = data[1], data[2], data[3]
        pos = 4
        _eh_ptr, pos = _read_encoded(data, pos, ptr_enc, base)
        if count_enc == DW_EH_PE_omit or table_enc == DW_EH_PE_omit:
            return
        count, pos = _read_encoded(data, pos, count_enc, base)
        table: list[tuple[int, int]] = []
        if table_enc == DW_EH_PE_datarel_sdata4:  # what every x86-64/arm64 linker writes
            # One struct call for the table (libc: ~4,000 entries) instead of
            # two _read_encoded calls per entry: ~0.02 s of each inspect.
            if pos + 8 * count > len(data):
                raise struct.error("truncated .eh_frame_hdr search table")
            mask = (1 << 64) - 1
            table = [((loc + base) & mask, (fde + base) & mask)
                     for loc, fde in struct.iter_unpack("<ii", data[pos:pos + 8 * count])]
        else:
            for _ in range(min(count, len(data))):
                loc, pos = _read_encoded(data, pos, table_enc, base)
                fde, pos = _read_encoded(data, pos, table_enc, base)
                table.append((loc, fde))
        table.sort()
        self._table = table
        self._keys = [t[0] for t in table]

    def covers(self, pc: int) -> bool:
        """True when link-time address ``pc`` lies inside some FDE's range."""
        try:
            if self._table:
                i = bisect.bisect_right(self._keys, pc) - 1
                if i < 0:
                    return False
                start, fde_addr = self._table[i]
                length = self._fde_range(fde_addr)
                return length is not None and start <= pc < start + length
            i = bisect.bisect_right(self._range_starts, pc) - 1
            return i >= 0 and self._ranges[i][0] <= pc < self._ranges[i][1]
        except (struct.error, IndexError, ValueError):
            return False

    def _fde_range(self, fde_addr: int) -> int | None:
        """The pc_range of the FDE at link-time address ``fde_addr``."""
        assert self._eh is not None
        data, base = self._eh.data, self._eh.addr
        off = fde_addr - base
        if not 0 <= off < len(data) - 8:
            return None
        (length,) = struct.unpack_from("<I", data, off)
        pos = off + 4
        if length == 0xFFFFFFFF:
            return None  # 64-bit DWARF .eh_frame: not produced by GCC or LLVM
        (cie_ptr,) = struct.unpack_from("<I", data, pos)
        if cie_ptr == 0:
            return None  # that is a CIE, not an FDE
        enc = self._cie_fde_encoding(pos - cie_ptr)
        if enc is None:
            return None
        _begin, p = _read_encoded(data, pos + 4, enc, base)
        pc_range, _ = _read_encoded(data, p, enc & 0x0F, base)
        return pc_range

    def _cie_fde_encoding(self, off: int) -> int | None:
        """The FDE pointer encoding ('R' augmentation) of the CIE at ``off``."""
        assert self._eh is not None
        data = self._eh.data
        if not 0 <= off < len(data) - 9:
            return None
        pos = off + 8  # length, CIE id
        version = data[pos]
        pos += 1
        end = data.index(b"\0", pos)
        aug = data[pos:end].decode("latin-1")
        pos = end + 1
        if "eh" in aug:
            pos += 8
        _, pos = _uleb(data, pos)  # code alignment
        _, pos = _uleb(data, pos)  # data alignment (sleb: only skipped)
        if version == 1:
            pos += 1
        else:
            _, pos = _uleb(data, pos)
        if not aug.startswith("z"):
            return 0  # DW_EH_PE_absptr
        _, pos = _uleb(data, pos)
        for ch in aug[1:]:
            if ch == "R":
                return data[pos]
            if ch == "L":
                pos += 1
            elif ch == "P":
                penc = data[pos]
                _, pos = _read_encoded(data, pos + 1, penc & 0x0F, 0)
            elif ch not in "SB":
                return None
        return 0


def _has_data(fh: BinaryIO, name: str) -> bool:
    section = read_section(fh, name)
    return section is not None and section[0].type != SHT_NOBITS and section[0].size > 0


def _has_contents(elf: ELFFile, name: str) -> bool:
    section = elf.get_section_by_name(name)
    return section is not None and section["sh_type"] != "SHT_NOBITS" and section["sh_size"] > 0


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _read_encoded(data: bytes, pos: int, enc: int, section_addr: int) -> tuple[int, int]:
    """Decode a DW_EH_PE-encoded pointer at ``pos`` of a section whose first
    byte is at link-time address ``section_addr``. Returns (value, new pos)."""
    fmt = enc & 0x0F
    start = pos
    if fmt == 0x00 or fmt == 0x04:
        (value,) = struct.unpack_from("<Q", data, pos)
        pos += 8
    elif fmt == 0x01:
        value, pos = _uleb(data, pos)
    elif fmt == 0x02:
        (value,) = struct.unpack_from("<H", data, pos)
        pos += 2
    elif fmt == 0x03:
        (value,) = struct.unpack_from("<I", data, pos)
        pos += 4
    elif fmt == 0x0A:
        (value,) = struct.unpack_from("<h", data, pos)
        pos += 2
    elif fmt == 0x0B:
        (value,) = struct.unpack_from("<i", data, pos)
        pos += 4
    elif fmt == 0x0C:
        (value,) = struct.unpack_from("<q", data, pos)
        pos += 8
    else:
        raise ValueError(f"unsupported pointer encoding 0x{enc:x}")
    app = enc & 0x70
    if app == 0x10:  # pcrel
        value += section_addr + start
    elif app == 0x30:  # datarel: relative to .eh_frame_hdr's start
        value += section_addr
    return value & ((1 << 64) - 1), pos
