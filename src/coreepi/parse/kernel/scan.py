"""Find crash reports in a stream of kernel log lines.

The scanner reads a console log one line at a time (bounded memory: a ring
of recent lines plus a capped window per open report) and yields one
:class:`ScannedReport` per crash. A report starts at a line holding an oops
header (see :mod:`coreepi.parse.kernel.formats`); it collects the
following lines printed by the same *context* — the same task ``[T123]`` or
CPU ``[C1]`` when the kernel has ``CONFIG_PRINTK_CALLER``, otherwise any
console line — because other CPUs interleave their output. A second oops
header (other than the follow-ups a report prints itself, like ``Kernel
panic - not syncing``) starts the next report.

Log formats: raw console / serial logs, ``dmesg`` (with or without ``-T``),
``/dev/kmsg``-style ``<4>[…]`` lines, journal / syslog text (``Mar 19
10:32:12 host kernel: …``, ``journalctl -o short-monotonic``) and kdump's
``vmcore-dmesg.txt``. Prefixes that are not the kernel's own are normalised
away first, so the rules see the same text everywhere.

Source of the report-window rules: syzkaller's Linux reporter
(``google/syzkaller`` ``pkg/report/linux.go``, ``findReport``),
re-implemented in streaming form. Titles: :mod:`coreepi.parse.kernel.title`.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from coreepi.parse.kernel.blocks import (
    GCE_HANGUP,
    HANGUP,
    HEADER,
    INFO,
    REPLAY,
    REPLAY_MARK,
    SPECIAL,
    Block,
    last_lines,
    text_blocks,
)
from coreepi.parse.kernel.facts import wrap_joiner
from coreepi.parse.kernel.formats import (
    INFO_MESSAGES_WITH_STACK,
    OOPS_KINDS,
    REPORT_START_IGNORES,
    OopsKind,
)
from coreepi.parse.kernel.prefixes import normalize_line

__all__ = ["ScanLimits", "ScannedReport", "normalize_line", "scan_blocks", "scan_lines"]

CONSOLE: Final = "console"
FACT_LINES: Final = 400  # facts are read from a report's first lines

# "[  123.456789] " or "[  123.456789][ T1234] " (CONFIG_PRINTK_CALLER), with
# optional "<4>" log level and debris a console may glue in front.
_CONSOLE_RE: Final = re.compile(
    r"^(?:\*\* [0-9]+ printk messages dropped \*\* )?(?:.* login: )?(?:<[0-9]+>)?"
    r"\[ *[0-9]+\.[0-9]+\](\[ *(?:C|T)[0-9]+\])? "
)
# The same without the login debris, for lines without " login: " (the
# greedy ".*" of that group scans every line to its end and back).
_CONSOLE_PLAIN_RE: Final = re.compile(_CONSOLE_RE.pattern.replace("(?:.* login: )?", "", 1))
_CPU_CONTEXT_RE: Final = re.compile(r"\[ *C[0-9]+\]")
_TASK_CONTEXT_RE: Final = re.compile(r"\[ *T[0-9]+\]")
# x86 prints unreliable (scanned) frames as " ? func+0x1/0x2"; powerpc
# suffixes them with " (unreliable)". They are left out of the report.
_QUESTIONABLE_RE: Final = re.compile(r"(\[<[0-9a-f]+>\])? \? ")

# Every header as one alternation, for the lines the block marks say may hold one.
_ANY_HEADER_RE: Final = re.compile("|".join(re.escape(k.header) for k in OOPS_KINDS))
# (each message holds "FAULT_" or "vmalloc: ", tested first as substrings)
_INFO_WITH_STACK_RE: Final = re.compile("|".join(re.escape(m) for m in INFO_MESSAGES_WITH_STACK))


def _context(line: str) -> str:
    match = (_CONSOLE_RE if " login: " in line else _CONSOLE_PLAIN_RE).match(line)
    if match is None:
        return ""
    return match.group(1) or CONSOLE


def _strip(line: str, context: str) -> tuple[str, bool]:
    """Line without its console prefix, and whether it is an unreliable frame."""
    if not context:
        return line, False
    line = line[line.find("] ") + 2:]
    if "<EOI>" not in line:
        # the regexp needs " ? ": test that substring first (most lines lack it)
        if " ? " in line and _QUESTIONABLE_RE.search(line):
            return line[line.find(" ? ") + 2:], True
        if "(unreliable)" in line and line.rstrip().endswith(" (unreliable)"):
            return line.rstrip()[:-13], True
    return line, False


_View = tuple[str, str, str, bool]


def _view(raw: str) -> _View:
    """(normalised line, context, line without console prefix, unreliable
    frame?) of a raw line."""
    line = normalize_line(raw)
    context = _context(line)
    stripped, questionable = _strip(line, context)
    return line, context, stripped, questionable


def _match_kind(line: str) -> OopsKind | None:
    if _ANY_HEADER_RE.search(line) is None:
        return None
    for kind in OOPS_KINDS:
        if kind.header in line and not any(s.search(line) for s in kind.suppressions):
            return kind
    return None


@dataclass(frozen=True)
class ScanLimits:
    """Memory bounds of the scanner. A report window stops growing at
    ``max_report_lines`` / ``max_report_chars`` (the report is then marked
    truncated); lines longer than ``max_line_chars`` are cut; at most
    ``max_open_reports`` windows are open at once (the oldest is closed).
    An oops line within ``follow_up_lines`` lines of a report from the same
    context belongs to that report. In a log without caller context, a
    report whose title window closed (another report started) takes
    ``tail_lines`` more lines, then is complete; a report whose context
    printed nothing for ``idle_lines`` lines is complete."""

    max_report_lines: int = 3000
    max_report_chars: int = 1 << 20
    max_line_chars: int = 8192
    max_open_reports: int = 8
    prefix_lines: int = 200
    follow_up_lines: int = 10
    tail_lines: int = 50
    idle_lines: int = 100


@dataclass(slots=True)
class ScannedReport:
    """One crash report as found in the log, before titling.

    ``lines`` are the report's lines without console prefixes (the oops line
    first); ``title_end`` is how many of them belong to this report for
    titling (a console log without caller context ends a report where the
    next one starts). ``facts_lines`` are the first ``FACT_LINES`` of them
    with lines a terminal or mail client wrapped joined back (in a
    timestamped log, an untimestamped line right after one of the report's
    lines continues it); titles read ``lines``, as syzkaller does, facts
    read ``facts_lines``. ``prefix`` holds up to 50 earlier lines of the same
    context. ``line_number`` is the 1-based line of the oops header.
    """

    kind: OopsKind
    context: str
    line_number: int
    oops_line: str
    prefix: list[str]
    raw_line: str = ""  # the oops line as read, collector's prefix and all
    lines: list[str] = field(default_factory=list)
    facts_lines: list[str] = field(default_factory=list)
    last_raw: str | None = None  # the physical line last taken, while a wrap may continue it
    title_end: int = 0
    truncated: bool = False
    console_hangup: bool = False
    chars: int = 0
    # findReport state
    next_report_seen: bool = False
    text_lines: int = 0
    skip_text: bool = False
    cpu_traceback: bool = False
    full: bool = False
    tail: int = 0  # lines taken since the title window closed
    idle: int = 0  # lines since this report last took one

    def take(self, raw: str, line: str, stripped: str, special: bool, limits: ScanLimits) -> None:
        """A later line of this report's own context, reliable (``raw`` as
        read, ``line`` normalised); ``special``: the line may hold one of
        :data:`~coreepi.parse.kernel.blocks.SPECIAL_LITERALS` (most lines hold none: not searched)."""
        self.text_lines += 1
        skip = self.skip_text
        if special:
            if "Disabling lock debugging due to kernel taint" in line:
                skip = True
            elif "Sending NMI from CPU" in line:
                # All-CPU backtraces come from other contexts; keep them.
                self.cpu_traceback = True
            elif ("Kernel panic - not syncing" in line
                  or "WARNING: possible circular locking dependency detected" in line) and \
                    self.text_lines > (16 if "BUG: KMSAN:" in self.oops_line else 22):
                # panic_on_warn's panic repeats the current stack, and oops
                # printing often provokes a lockdep splat: once the report has
                # enough lines, the rest is noise.
                self.skip_text = skip = True
        if skip:
            self.last_raw = None
            return
        self._append(raw, stripped, limits)

    def join_wrapped(self, raw: str, line: str) -> None:
        """A wrapped remainder of the line last taken: joined to it for facts."""
        if self.facts_lines and len(self.facts_lines) < FACT_LINES:
            assert self.last_raw is not None
            self.facts_lines[-1] += wrap_joiner(self.last_raw) + line.strip()
        self.last_raw = raw

    def _append(self, raw: str, stripped: str, limits: ScanLimits) -> None:
        self.last_raw, self.idle = raw, 0
        if len(self.facts_lines) < FACT_LINES:
            self.facts_lines.append(stripped)
        self.lines.append(stripped)
        self.chars += len(stripped) + 1
        if not self.next_report_seen or (self.context and self.context != CONSOLE):
            self.title_end = len(self.lines)
        else:
            # the title is fixed; the rest only serves the call-trace check
            self.tail += 1
            self.full = self.tail >= limits.tail_lines
        if len(self.lines) >= limits.max_report_lines or self.chars >= limits.max_report_chars:
            self.full = self.truncated = True


def _follow_up(open_reports: deque[ScannedReport], context: str, limits: ScanLimits) -> bool:
    """Whether an oops line continues the newest open report instead of
    starting a crash of its own: same printing context, within the first
    ``limits.follow_up_lines`` lines of that report (a Rust panic prints
    ``kernel BUG``, a NULL dereference may print a general protection
    fault). Counting those twice would inflate a crash rate."""
    if not open_reports or not context:
        return False
    newest = open_reports[-1]
    return newest.context == context and newest.text_lines <= limits.follow_up_lines


def _repeats_header(newest: ScannedReport, number: int, line: str, kind: OopsKind) -> bool:
    """Whether a header line restates the newest report's header on the
    next line: a symboliser expands ``BUG: KASAN: … in f+0x…`` into one
    line per inlined function (``… in g file.c:105 [inline]``, then
    ``… in f+0x…``); that is one report, not two."""
    if kind is not newest.kind or number != newest.line_number + 1:
        return False
    head = newest.oops_line[newest.oops_line.find(kind.header):].split(" in ", 1)[0]
    return " in " in line and line[line.find(kind.header):].split(" in ", 1)[0] == head


@dataclass(frozen=True)
class _Quiet:
    """Lines skipped in one step (``data``: whole lines joined by ``\\n``),
    kept as bytes until a report's prefix needs them: most never are."""

    data: bytes
    errors: str
    max_chars: int

    def lines(self) -> list[str]:
        return [line[: self.max_chars] for line in self.data.decode("utf-8", self.errors).split("\n")]


# The lines before a report, newest last: a line read one by one (raw, and
# its view when it was normalised) or a run of skipped ones.
_Recent = deque[tuple[str, _View | None] | _Quiet]
_QUIET_WINDOW: Final = 64 << 10  # bytes of a skipped run kept, when they hold prefix_lines lines


def _prefix(recent: _Recent, context: str, limit: int) -> list[str]:
    """Up to ``limit`` latest non-blank, reliable lines of ``context`` among
    the last ``recent.maxlen`` raw lines before a report (a line no open
    report looked at is normalised here, when a report starts, not for
    every line of the log; a skipped run is decoded here too)."""
    found: list[str] = []
    left = recent.maxlen or 0
    for entry in reversed(recent):
        pairs = ([(raw, None) for raw in reversed(entry.lines()[-left:])] if isinstance(entry, _Quiet)
                 else (entry,))
        for raw, view in pairs:
            left -= 1
            _line, line_context, stripped, questionable = view or _view(raw)
            if line_context == context and stripped and not questionable:
                found.append(stripped)
                if len(found) >= limit:
                    left = 0
            if left <= 0:
                found.reverse()
                return found
    found.reverse()
    return found


def scan_lines(lines: Iterable[str], limits: ScanLimits = ScanLimits()) -> Iterator[ScannedReport]:
    """:func:`scan_blocks` of lines given as ``str`` (without newlines)."""
    return scan_blocks(text_blocks(lines), limits)


@dataclass(slots=True)
class _Cursor:
    """Where the scan is: lines read so far (``number``), the line read but
    not yet handled (``held``: line number, raw text, marks; a printk replay
    mark on the next line drops it), whether any non-blank line was seen."""

    number: int = 0
    held: tuple[int, str, int] | None = None
    seen_text: bool = False


def scan_blocks(blocks: Iterable[Block], limits: ScanLimits = ScanLimits()) -> Iterator[ScannedReport]:
    """Yield the crash reports of a log given as marked blocks (see
    :mod:`coreepi.parse.kernel.blocks`), in order, with bounded memory.

    While no report is open, the lines up to the next one that may start a
    report are skipped in one step (:func:`_skip_quiet`: counted, the last
    ``limits.prefix_lines`` kept raw for a prefix); only marked lines and
    the lines of open reports are read one by one.
    """
    recent: _Recent = deque(maxlen=limits.prefix_lines)
    open_reports: deque[ScannedReport] = deque()
    cursor = _Cursor()
    max_chars, max_bytes = limits.max_line_chars, limits.max_line_chars * 4
    for block in blocks:
        data, marks, stops, errors = block.data, block.marks, block.stops, block.errors
        pos, size = 0, len(data)
        while pos < size:
            held = cursor.held
            if not open_reports and cursor.seen_text and (held is None or not held[2] & HEADER):
                index = bisect_left(stops, pos)
                stop = stops[index] if index < len(stops) else size
                if stop > pos:
                    _skip_quiet(block, pos, stop, cursor, recent, max_chars)
                    pos = stop
                    continue
            end = data.find(b"\n", pos)
            raw, mark = data[pos:end].decode("utf-8", errors)[:max_bytes], marks.get(pos, 0)
            pos = end + 1
            cursor.number += 1
            if mark & REPLAY and REPLAY_MARK in raw:
                cursor.held = None
                continue
            cursor.held = (cursor.number, raw, mark)
            if held is None:
                continue
            line_no, raw, mark = held
            if len(raw) > max_chars:
                raw = raw[:max_chars]
            if not open_reports and not mark & HEADER:
                recent.append((raw, None))
                cursor.seen_text = cursor.seen_text or bool(raw.strip())
                continue
            closed = _scan_line(line_no, raw.rstrip("\r"), mark, recent, open_reports, cursor.seen_text,
                                limits)
            if closed:
                yield from closed
            cursor.seen_text = cursor.seen_text or bool(raw.strip())
    if cursor.held is not None:
        line_no, raw, mark = cursor.held
        yield from _scan_line(line_no, raw[:max_chars].rstrip("\r"), mark, recent, open_reports,
                              cursor.seen_text, limits)
    yield from open_reports


def _skip_quiet(block: Block, pos: int, stop: int, cursor: _Cursor,
                recent: _Recent, max_chars: int) -> None:
    """The lines of ``block`` from byte ``pos`` to ``stop`` (both line
    starts), none of which may start a report, while no report is open:
    what reading them one by one would do (the held line and all but the
    last of them go to ``recent``, the last is held) without splitting or
    decoding them: ``recent`` gets the bytes of the last ``recent.maxlen``
    lines, decoded if a report's prefix asks for them. Only called once a
    non-blank line was seen (before, each line's blankness matters)."""
    data = block.data
    count = data.count(b"\n", pos, stop)
    last = data.rfind(b"\n", pos, stop - 1) + 1 or pos  # the last line's start
    if cursor.held is not None:
        recent.append((cursor.held[1][:max_chars], None))
    if last > pos:
        # the run's last recent.maxlen lines: a window of at most
        # _QUIET_WINDOW bytes cut at a line start, kept as bytes; when lines
        # are so long that it holds fewer, they are counted back and kept
        # decoded and cut, as lines read one by one are (memory stays
        # bounded by maxlen entries of at most _QUIET_WINDOW bytes or
        # max_chars characters each)
        need = recent.maxlen or 0
        first = max(pos, last - _QUIET_WINDOW)
        if first > pos:
            first = data.find(b"\n", first - 1, last) + 1
        if data.count(b"\n", first, last) >= need:
            recent.clear()  # this run alone fills the window: older entries are out of it
            recent.append(_Quiet(data[first:last - 1], block.errors, max_chars))
        elif first == pos:
            recent.append(_Quiet(data[first:last - 1], block.errors, max_chars))
        else:
            first = last_lines(data, pos, last, need)
            recent.extend((line[:max_chars], None) for line in block.text(first, last - 1).split("\n"))
    cursor.number += count
    # (a held line is only ever read cut to max_chars)
    cursor.held = (cursor.number, block.text(last, stop - 1)[:max_chars], block.marks.get(last, 0))


def _offer(open_reports: deque[ScannedReport], raw: str, line: str, context: str, stripped: str,
           questionable: bool, starts_next: bool, special: bool, limits: ScanLimits) -> None:
    """Offer a line to every open report's window that is not full: its own
    context's reports take it (and CPU contexts, in a report that asked for
    every CPU's backtrace), a console report joins an untimestamped line to
    the line it last took (a wrapped remainder); for the others the line is
    one more idle line. ``starts_next``: the line starts another report or
    prints a stack of its own (the title window of a console report ends)."""
    for rep in open_reports:
        if rep.full:
            continue
        if starts_next:
            rep.next_report_seen = True
        if not questionable and (context == rep.context or (
                rep.cpu_traceback and _CPU_CONTEXT_RE.search(context))):
            rep.take(raw, line, stripped, special, limits)
        elif not context and rep.context == CONSOLE and rep.last_raw is not None and line.strip():
            rep.join_wrapped(raw, line)
        else:
            rep.last_raw = None
            rep.idle += 1
            rep.full = rep.idle >= limits.idle_lines


def _scan_line(number: int, raw: str, mark: int, recent: _Recent,
               open_reports: deque[ScannedReport], seen_text: bool,
               limits: ScanLimits) -> list[ScannedReport]:
    """One line that may start a report (``mark`` has ``HEADER``: it may
    hold a header) or belongs to open ones; the reports it closes, if any."""
    view = _view(raw)
    line, context, stripped, questionable = view
    kind = _match_kind(line) if mark & HEADER else None
    ignored = kind is not None and any(r.search(line) for r in REPORT_START_IGNORES)
    if mark & HANGUP and GCE_HANGUP in line:
        for rep in open_reports:
            rep.console_hangup = True
    if kind is not None and open_reports and _repeats_header(open_reports[-1], number, line, kind):
        kind = None
    if open_reports:
        starts_next = (kind is not None and not ignored) or bool(
            mark & INFO and _INFO_WITH_STACK_RE.search(line) is not None)
        _offer(open_reports, raw, line, context, stripped, questionable, starts_next,
               bool(mark & SPECIAL), limits)
    if kind is not None and kind.header == "Booting the kernel." and not seen_text:
        kind = None  # a log that starts with a boot is not a reboot
    closed: list[ScannedReport] = []
    if kind is not None and (not open_reports or not ignored) and not _follow_up(open_reports, context, limits):
        prefix = _prefix(recent, context, 50 if _TASK_CONTEXT_RE.search(context) else 5)
        rep = ScannedReport(kind, context, number, line, prefix, raw_line=raw, text_lines=1)
        rep._append(raw, stripped, limits)
        open_reports.append(rep)
        if len(open_reports) > limits.max_open_reports:
            closed.append(open_reports.popleft())
    while open_reports and open_reports[0].full:
        closed.append(open_reports.popleft())
    recent.append((raw, view))
    return closed
