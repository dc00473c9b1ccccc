"""Find crash reports in a stream of kernel log lines and title them.

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

Source of the report-window and title rules: syzkaller's Linux reporter
(``google/syzkaller`` ``pkg/report/linux.go``, ``findReport`` /
``extractDescription`` / ``isCorrupted``, and the title normalisation of
``pkg/report/report.go``), re-implemented in streaming form.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from coreepi.parse.kernel.formats import (
    CORRUPTED_TITLES,
    INFO_MESSAGES_WITH_STACK,
    OOPS_KINDS,
    REPORT_START_IGNORES,
    OopsKind,
    TitleFormat,
    render,
)
from coreepi.parse.kernel.frames import (
    FRAME_LINE_RES,
    RISCV_STACK_START,
    STACK_START_RES,
    extract_stack_frames,
)

__all__ = ["ScanLimits", "ScannedReport", "TitleResult", "normalize_line", "scan_lines", "title_report"]

CONSOLE: Final = "console"

# "[  123.456789] " or "[  123.456789][ T1234] " (CONFIG_PRINTK_CALLER), with
# optional "<4>" log level and debris a console may glue in front.
_CONSOLE_RE: Final = re.compile(
    r"^(?:\*\* [0-9]+ printk messages dropped \*\* )?(?:.* login: )?(?:<[0-9]+>)?"
    r"\[ *[0-9]+\.[0-9]+\](\[ *(?:C|T)[0-9]+\])? "
)
_CPU_CONTEXT_RE: Final = re.compile(r"\[ *C[0-9]+\]")
_TASK_CONTEXT_RE: Final = re.compile(r"\[ *T[0-9]+\]")
# x86 prints unreliable (scanned) frames as " ? func+0x1/0x2"; powerpc
# suffixes them with " (unreliable)". They are left out of the report.
_QUESTIONABLE_RE: Final = re.compile(r"(\[<[0-9a-f]+>\])? \? ")

# Prefixes added by log collectors, normalised to the console form.
_SYSLOG_RE: Final = re.compile(
    r"^(?:[A-Z][a-z]{2} [ 0-9]?[0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,]+(?:Z|[+-][0-9:]+)?) (\S+) kernel: "
)
_MONOTONIC_RE: Final = re.compile(r"^(\[ *[0-9]+\.[0-9]+\]) \S+ kernel: ")
_DMESG_T_RE: Final = re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]?[0-9] [0-9:]{8} [0-9]{4}\] ")
_DMESG_X_RE: Final = re.compile(r"^[a-z]+ *:[a-z]+ *: ")

# One alternation of every header: one regex search per line instead of one
# substring test per kind.
_ANY_HEADER_RE: Final = re.compile("|".join(re.escape(k.header) for k in OOPS_KINDS))
_GCE_HANGUP: Final = "serialport: VM disconnected."


def normalize_line(line: str) -> str:
    """Strip a syslog / journal / ``dmesg -x`` prefix; turn a ``dmesg -T``
    wall-clock prefix into a console-style one so report windows work."""
    if "kernel: " in line:
        match = _SYSLOG_RE.match(line)
        if match is not None:
            return line[match.end():]
        match = _MONOTONIC_RE.match(line)
        if match is not None:
            return match.group(1) + " " + line[match.end():]
    if line.startswith("["):
        match = _DMESG_T_RE.match(line)
        if match is not None:
            return "[    0.000000] " + line[match.end():]
    elif line[:1].islower():
        match = _DMESG_X_RE.match(line)
        if match is not None:
            return line[match.end():]
    return line


def _context(line: str) -> str:
    match = _CONSOLE_RE.match(line)
    if match is None:
        return ""
    return match.group(1) or CONSOLE


def _strip(line: str, context: str) -> tuple[str, bool]:
    """Line without its console prefix, and whether it is an unreliable frame."""
    if not context:
        return line, False
    line = line[line.find("] ") + 2:]
    if "<EOI>" not in line:
        if _QUESTIONABLE_RE.search(line):
            return line[line.find(" ? ") + 2:], True
        if line.endswith(" (unreliable)"):
            return line[:-13], True
    return line, False


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
    context belongs to that report."""

    max_report_lines: int = 3000
    max_report_chars: int = 1 << 20
    max_line_chars: int = 8192
    max_open_reports: int = 8
    prefix_lines: int = 200
    follow_up_lines: int = 10


@dataclass
class ScannedReport:
    """One crash report as found in the log, before titling.

    ``lines`` are the report's lines without console prefixes (the oops line
    first); ``title_end`` is how many of them belong to this report for
    titling (a console log without caller context ends a report where the
    next one starts). ``prefix`` holds up to 50 earlier lines of the same
    context. ``line_number`` is the 1-based line of the oops header.
    """

    kind: OopsKind
    context: str
    line_number: int
    oops_line: str
    prefix: list[str]
    lines: list[str] = field(default_factory=list)
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

    def feed(self, line: str, context: str, stripped: str, questionable: bool,
             kind: OopsKind | None, limits: ScanLimits) -> None:
        """Offer one later log line to this report's window."""
        if self.full:
            return
        if not self.next_report_seen and (
            (kind is not None and not any(r.search(line) for r in REPORT_START_IGNORES))
            or any(m in line for m in INFO_MESSAGES_WITH_STACK)
        ):
            self.next_report_seen = True
        if questionable or (context != self.context and not (
                self.cpu_traceback and _CPU_CONTEXT_RE.search(context))):
            return
        self.text_lines += 1
        skip = self.skip_text
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
            return
        self._append(stripped, limits)

    def _append(self, stripped: str, limits: ScanLimits) -> None:
        self.lines.append(stripped)
        self.chars += len(stripped) + 1
        if not self.next_report_seen or (self.context and self.context != CONSOLE):
            self.title_end = len(self.lines)
        if len(self.lines) >= limits.max_report_lines or self.chars >= limits.max_report_chars:
            self.full = self.truncated = True


_REPLAY_MARK: Final = "** replaying previous printk message **"


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


def _drop_replayed(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """Number the lines (1-based) and drop a line the console cut short when
    printk replays it in full (the marker follows the partial line), and
    the marker itself."""
    held: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        if _REPLAY_MARK in line:
            held = None
            continue
        if held is not None:
            yield held
        held = (number, line)
    if held is not None:
        yield held


def scan_lines(lines: Iterable[str], limits: ScanLimits = ScanLimits()) -> Iterator[ScannedReport]:
    """Yield the crash reports of a log, in order, with bounded memory."""
    recent: deque[tuple[str, str]] = deque(maxlen=limits.prefix_lines)
    open_reports: deque[ScannedReport] = deque()
    seen_text = False
    for number, raw in _drop_replayed(lines):
        if len(raw) > limits.max_line_chars:
            raw = raw[: limits.max_line_chars]
        line = normalize_line(raw.rstrip("\r"))
        context = _context(line)
        stripped, questionable = _strip(line, context)
        kind = _match_kind(line)
        if _GCE_HANGUP in line:
            for rep in open_reports:
                rep.console_hangup = True
        for rep in open_reports:
            rep.feed(line, context, stripped, questionable, kind, limits)
        if kind is not None and kind.header == "Booting the kernel." and not seen_text:
            kind = None  # a log that starts with a boot is not a reboot
        if kind is not None and (
            not open_reports or not any(r.search(line) for r in REPORT_START_IGNORES)
        ) and not _follow_up(open_reports, context, limits):
            prefix_max = 50 if _TASK_CONTEXT_RE.search(context) else 5
            prefix = [s for c, s in recent if c == context and s][-prefix_max:]
            rep = ScannedReport(kind, context, number, line, prefix, text_lines=1)
            rep._append(stripped, limits)
            open_reports.append(rep)
            if len(open_reports) > limits.max_open_reports:
                yield open_reports.popleft()
        while open_reports and open_reports[0].full:
            yield open_reports.popleft()
        if not questionable:
            recent.append((context, stripped))
        seen_text = seen_text or bool(line.strip())
    yield from open_reports


@dataclass(frozen=True)
class TitleResult:
    """Title of a report and how it was obtained (for the signature trail)."""

    title: str
    raw_title: str
    corrupted_reason: str | None
    format: TitleFormat | None
    frames: tuple[str, ...]  # guilty frames as printed (raw names)


def _describe(text: str, kind: OopsKind) -> tuple[str, str, TitleFormat | None, tuple[str, ...]]:
    """Pick the earliest-matching title format; returns (title, corrupted
    reason, format, raw guilty frames)."""
    start = len(text)
    title, corrupted, chosen, raw_frames = "", "", None, ()
    matched_title = False
    for fmt in kind.formats:
        match = fmt.title.search(text)
        if match is None or match.start() > start or (match.start() == start and title):
            continue
        if match.start() < start:
            title, chosen, start = "", None, match.start()
        matched_title = True
        if fmt.report is not None:
            match = fmt.report.search(text)
            if match is None:
                continue
        args = [g or "" for g in match.groups()]
        corrupted = ""
        frames: list[str] = []
        if fmt.stack is not None:
            guilty, ok = extract_stack_frames(fmt.stack, text[match.start():])
            if not ok:
                corrupted = "extracted no frames"
            args += [g.canonical for g in guilty]
            frames = [g.raw for g in guilty]
        title, chosen, raw_frames = render(fmt.template, args), fmt, tuple(frames)
    if not title:
        if matched_title:
            corrupted = "matched title but not report regexp"
        pos = text.find(kind.header)
        if pos >= 0:
            end = text.find("\n", pos)
            title = text[pos: end if end >= 0 else len(text)]
    if not corrupted and chosen is not None and chosen.corrupted:
        corrupted = "report format is marked as corrupted"
    return title, corrupted, chosen, raw_frames


def _lacks_stack(text: str, fmt: TitleFormat | None, title: str) -> str:
    """Why a titled report is corrupted though its format matched, or ''."""
    if any(r.search(title) for r in CORRUPTED_TITLES):
        return "title matches corrupted regexp"
    if fmt is None or fmt.no_stack_trace:
        return ""
    has_stack = False
    for key in STACK_START_RES:
        match = key.search(text)
        if match is None:
            continue
        following = text[match.start():].split("\n", 17)
        if len(following) < 4:
            return "call trace is missed"
        found = False
        for line in following[1:16]:
            if any(k.search(line) for k in STACK_START_RES):
                break
            if "(stack is not available)" in line or any(r.search(line) for r in FRAME_LINE_RES):
                found = has_stack = True
                break
        if key is not RISCV_STACK_START and not found:
            return "no frames in a stack trace"
    return "" if has_stack else "no stack trace in report"


_TITLE_REPLACEMENTS: Final = tuple(
    (re.compile(p, re.ASCII), r)
    for p, r in (
        (r"syz-executor\.?[0-9]+((/|:)[0-9]+)?", "syz-executor"),  # fuzzer process ids
        (r"syzkaller[0-9]+((/|:)[0-9]+)?", "syzkaller"),
        (r"([^a-zA-Z0-9])(?:0x)?[0-9a-f]{6,}", r"\1ADDR"),  # addresses differ per boot
        (r"([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})", "IP"),
        (r"(\.\w+)(:[0-9]+)+", r"\1:LINE"),  # line numbers differ per build
        (r"([a-zA-Z][a-zA-Z0-9_.]+)\+0x[0-9a-z]+/0x[0-9a-z]+", r"\1"),  # offsets differ per build
        (r"CPU#[0-9]+", "CPU"),
        (r"(\W)(\d+)(\W|\Z)", r"\1NUM\3"),  # any remaining number
        (r"(\d+){7,}", "NUM"),
    )
)


def normalize_title(title: str) -> str:
    """Make a title stable across boots and builds (addresses, numbers,
    line numbers become ADDR/NUM/LINE), then keep at most 120 printable
    ASCII bytes with single spaces, as syzbot does."""
    for pattern, replacement in _TITLE_REPLACEMENTS:
        while True:
            new = pattern.sub(replacement, title)
            if new == title:
                break
            title = new
    out: list[str] = []
    prev = " "
    for byte in title.encode("utf-8", "surrogateescape")[:120]:
        ch = " " if byte == 9 else chr(byte)
        if byte != 9 and (byte < 0x20 or byte >= 0x7F):
            continue
        if ch == " " and prev == " ":
            continue
        out.append(ch)
        prev = ch
    return "".join(out).strip()


def title_report(rep: ScannedReport) -> TitleResult:
    """Title a scanned report (syzbot conventions) and judge whether it is
    corrupted (truncated, interleaved, or missing its call trace)."""
    text = "\n".join(rep.lines[: rep.title_end]) + "\n"
    title, corrupted, fmt, frames = _describe(text, rep.kind)
    full_text = "\n".join(rep.lines) + "\n"
    if not title:
        title, corrupted, fmt, frames = _describe(rep.oops_line + "\n" + full_text, rep.kind)
        title = title or rep.kind.header
        corrupted = corrupted or "header not found in report text"
    if not corrupted:
        corrupted = _lacks_stack(full_text, fmt, title)
    if not corrupted and rep.console_hangup:
        corrupted = "console connection lost"
    return TitleResult(normalize_title(title), title, corrupted or None, fmt, frames)
