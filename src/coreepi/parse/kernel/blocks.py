"""A kernel log as blocks of bytes, with the lines that may matter marked.

The scanner (:mod:`coreepi.parse.kernel.scan`) needs to look closely only
at lines that may start a report and, while a report is open, at the
report's own lines. Everything else in a console log (boot messages,
services, a fuzzer's chatter) only has to be counted and its last lines
kept for the next report's prefix. So the log is read in blocks of whole
lines (``bytes``, about 1 MiB each, every block ending with ``\\n``), every
literal the scanner cares about is found in a block with one multi-pattern
search (Aho-Corasick, ``ahocorasick_rs``: one pass over the bytes for all
literals, in compiled code, ~3 GiB per CPU second here; ``str.find`` per
literal was ~40 MiB/s for the 40-odd literals, a regexp alternation less),
and the lines between two marked lines are skipped without being split or
decoded.

Shapes: :class:`Block` holds the bytes, how to decode them, and ``marks``
(byte offset of a line's start -> bits: :data:`HEADER`, :data:`HANGUP`,
:data:`INFO`, :data:`SPECIAL`, :data:`REPLAY`), plus ``stops``, the sorted
line offsets with a ``HEADER`` or ``REPLAY`` bit (where a skip must stop).
A mark is a superset: the line holds the literal somewhere; the scanner
confirms it on the normalised line.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import ahocorasick_rs

from coreepi.parse.kernel.formats import INFO_MESSAGES_WITH_STACK, OOPS_KINDS

__all__ = [
    "Block", "GCE_HANGUP", "HANGUP", "HEADER", "INFO", "REPLAY", "REPLAY_MARK", "SPECIAL",
    "SPECIAL_LITERALS", "mark_block", "text_blocks", "last_lines",
]

GCE_HANGUP: Final = "serialport: VM disconnected."
# printk replays a line the console cut short: the partial one is dropped
REPLAY_MARK: Final = "** replaying previous printk message **"
# The lines a report's window treats apart (ScannedReport.take).
SPECIAL_LITERALS: Final = (
    "Disabling lock debugging due to kernel taint", "Sending NMI from CPU", "Kernel panic - not syncing",
    "WARNING: possible circular locking dependency detected",
)
HEADER: Final = 1  # a report header
HANGUP: Final = 2  # the GCE console hangup
INFO: Final = 4  # a message that prints a stack of its own
SPECIAL: Final = 8  # one of SPECIAL_LITERALS
REPLAY: Final = 16  # the printk replay mark

_GROUPS: Final = (
    (HEADER, tuple(k.header for k in OOPS_KINDS)), (HANGUP, (GCE_HANGUP,)), (INFO, INFO_MESSAGES_WITH_STACK),
    (SPECIAL, SPECIAL_LITERALS), (REPLAY, (REPLAY_MARK,)),
)
# every literal once, with the bits of every group it is in
_BITS: Final[dict[bytes, int]] = {}
for _bit, _literals in _GROUPS:
    for _literal in _literals:
        _BITS[_literal.encode()] = _BITS.get(_literal.encode(), 0) | _bit
_PATTERNS: Final = tuple(_BITS)
_PATTERN_BITS: Final = tuple(_BITS.values())
# Two automata: the first finds the lines holding any literal (leftmost-first
# matching lets it run a SIMD prefilter: ~3 GB per CPU second here, against
# ~400 MB for the overlapping search); the second reads each such line alone
# for every literal in it (a match found first may hide an overlapping one).
_LINES: Final = ahocorasick_rs.BytesAhoCorasick(list(_PATTERNS), matchkind=ahocorasick_rs.MatchKind.LeftmostFirst)
_EVERY: Final = ahocorasick_rs.BytesAhoCorasick(list(_PATTERNS))
_TEXT_BLOCK_LINES: Final = 4096


@dataclass(frozen=True)
class Block:
    """Whole lines of a log (``data`` ends with ``\\n``), decoded as UTF-8
    with ``errors`` (``replace`` for bytes read; ``surrogatepass`` for text
    that was ``str``, so it round-trips), with the marks of its lines."""

    data: bytes
    errors: str
    marks: dict[int, int]
    stops: list[int]

    def text(self, start: int, end: int) -> str:
        """``data[start:end]`` decoded."""
        return self.data[start:end].decode("utf-8", self.errors)


def mark_block(data: bytes, errors: str = "replace") -> Block:
    """Mark every line of ``data`` (whole lines, ending with ``\\n``) that
    holds one of the scanner's literals, with the bits of every literal in
    it (overlapping ones too: ``Kernel panic - not syncing`` is a header and
    a special line)."""
    marks: dict[int, int] = {}
    rfind, find, every = data.rfind, data.find, _EVERY.find_matches_as_indexes
    for _index, start, _end in _LINES.find_matches_as_indexes(data):
        line = rfind(b"\n", 0, start) + 1
        if line not in marks:
            bits = 0
            for index, _start, _end in every(data[line:find(b"\n", start)], overlapping=True):
                bits |= _PATTERN_BITS[index]
            marks[line] = bits
    stops = sorted(offset for offset, bits in marks.items() if bits & (HEADER | REPLAY))
    return Block(data, errors, marks, stops)


def text_blocks(lines: Iterable[str]) -> Iterator[Block]:
    """Lines given as ``str`` (without their newline) in marked blocks of up
    to 4096 lines."""
    source = iter(lines)
    while True:
        batch = [line for _, line in zip(range(_TEXT_BLOCK_LINES), source, strict=False)]
        if not batch:
            return
        yield mark_block(("\n".join(batch) + "\n").encode("utf-8", "surrogatepass"), "surrogatepass")


def last_lines(data: bytes, start: int, end: int, count: int) -> int:
    """Offset of the first of the last ``count`` lines in ``data[start:end]``
    (``end`` a line start, ``start`` too); ``start`` when there are fewer."""
    pos = end
    for _ in range(count):
        if pos <= start:
            return start
        pos = data.rfind(b"\n", start, pos - 1) + 1
        if pos == 0:
            return start
    return max(pos, start)
