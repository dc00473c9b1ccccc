"""Title a scanned kernel crash report, syzbot's way, and judge it.

A :class:`~coreepi.parse.kernel.scan.ScannedReport` becomes a
:class:`TitleResult`: the earliest-matching title format of its kind
(:mod:`coreepi.parse.kernel.formats`), its guilty frame(s) by the stack
rules (:mod:`coreepi.parse.kernel.frames`), the title normalised as syzbot
does (addresses, numbers, line numbers masked), and why the report is
corrupted, if it is (truncated, interleaved, no call trace).

Source of the title and corruption rules: syzkaller's Linux reporter
(``google/syzkaller`` ``pkg/report/linux.go``, ``extractDescription`` /
``isCorrupted``, and the title normalisation of ``pkg/report/report.go``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from coreepi.parse.kernel.formats import (
    CORRUPTED_TITLES,
    OopsKind,
    TitleFormat,
    header_function,
    render,
    title_search,
)
from coreepi.parse.kernel.frames import (
    FRAME_LINE_RES,
    RISCV_STACK_START,
    STACK_START_LITERALS,
    STACK_START_RES,
    GuiltyFrame,
    StackFormat,
    extract_stack_frames,
    fallback_frame,
    find_all,
)
from coreepi.parse.kernel.scan import ScannedReport
from coreepi.parse.kernel.trace import read_frames

__all__ = ["TitleResult", "normalize_title", "title_report"]


@dataclass(frozen=True)
class TitleResult:
    """Title of a report and how it was obtained (for the signature trail).

    ``title`` is coreepi's: syzbot's title, except where syzbot writes the
    placeholder ``corrupted`` (no guilty frame by its stack rules, or a lost
    message): there coreepi names the frame its own trace reader finds, or
    leaves the frame out. ``syzbot_title`` is syzbot's, for agreement tests.
    """

    title: str
    raw_title: str
    corrupted_reason: str | None
    format: TitleFormat | None
    frames: tuple[str, ...]  # guilty frames as printed (raw names)
    syzbot_title: str = ""


@dataclass
class _Described:
    title: str = ""
    syzbot_title: str = ""
    corrupted: str = ""
    format: TitleFormat | None = None
    frames: tuple[str, ...] = ()


_LOST: Final = "\x00"  # stands for a guilty frame nobody could find


def _render(fmt: TitleFormat, args: list[str], guilty: list[GuiltyFrame],
            fallback: Callable[[StackFormat], GuiltyFrame | None]) -> tuple[str, str, tuple[str, ...]]:
    """(coreepi title, syzbot title, raw guilty frames) of one format."""
    ours, raw = [], []
    for frame in guilty:
        if not frame.canonical and fmt.stack is not None:
            frame = fallback(fmt.stack) or GuiltyFrame(_LOST, "")
        ours.append(frame.canonical)
        if frame.raw:
            raw.append(frame.raw)
    title = render(fmt.template, args + ours)
    # "X in {lost}" -> "X"; "X in {lost}/usb_submit_urb" -> "X in usb_submit_urb"
    title = re.sub(" in " + _LOST + "(?!/)|" + _LOST + "/?", "", title)
    syzbot = render(fmt.syzbot_template or fmt.template, args + [g.canonical or "corrupted" for g in guilty])
    return title, syzbot, tuple(raw)


def _describe(text: str, kind: OopsKind,
              fallback: Callable[[StackFormat], GuiltyFrame | None]) -> _Described:
    """Pick the earliest-matching title format."""
    start = len(text)
    out = _Described()
    matched_title = False
    headers = find_all(text, kind.header)
    for fmt in kind.formats:
        match = title_search(fmt, kind.header, text, headers)
        if match is None or match.start() > start or (match.start() == start and out.title):
            continue
        if match.start() < start:
            out, start = _Described(), match.start()
        matched_title = True
        if fmt.report is not None:
            match = fmt.report.search(text)
            if match is None:
                continue
        args = [g or "" for g in match.groups()]
        corrupted = ""
        guilty: list[GuiltyFrame] = []
        if fmt.stack is not None:
            guilty, ok = extract_stack_frames(fmt.stack, text[match.start():])
            if not ok:
                corrupted = "extracted no frames"
        title, syzbot, raw = _render(fmt, args, guilty, fallback)
        out = _Described(title, syzbot, corrupted, fmt, raw)
    if not out.title:
        if matched_title:
            out.corrupted = "matched title but not report regexp"
        pos = text.find(kind.header)
        if pos >= 0:
            end = text.find("\n", pos)
            out.title = out.syzbot_title = text[pos: end if end >= 0 else len(text)]
    if not out.corrupted and out.format is not None and out.format.corrupted:
        out.corrupted = "report format is marked as corrupted"
    return out


def _lacks_stack(text: str, fmt: TitleFormat | None, title: str) -> str:
    """Why a titled report is corrupted though its format matched, or ''."""
    if any(r.search(title) for r in CORRUPTED_TITLES):
        return "title matches corrupted regexp"
    if fmt is None or fmt.no_stack_trace:
        return ""
    has_stack = False
    for key, literal in zip(STACK_START_RES, STACK_START_LITERALS, strict=True):
        match = key.search(text) if literal in text else None
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
        # any remaining number, but not a slab cache's size ("BUG kmalloc-64: …")
        (r"(?<!kmalloc)(?<!kmalloc-cg)(?<!kmalloc-rcl)(\W)(\d+)(\W|\Z)", r"\1NUM\3"),
        (r"(\d+){7,}", "NUM"),
    )
)


_UNPRINTABLE: Final = re.compile(r"[^\x20-\x7e]+")
_SPACES: Final = re.compile(r" {2,}")


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
    # the first 120 bytes, one character per byte; a tab is a space
    text = title.encode("utf-8", "surrogateescape")[:120].decode("latin-1").replace("\t", " ")
    return _SPACES.sub(" ", _UNPRINTABLE.sub("", text)).strip()


def title_report(rep: ScannedReport) -> TitleResult:
    """Title a scanned report (syzbot conventions) and judge whether it is
    corrupted (truncated, interleaved, or missing its call trace)."""
    functions: list[str] | None = None

    def fallback(stack: StackFormat) -> GuiltyFrame | None:
        nonlocal functions
        if functions is None:
            functions = [f.function or "" for f in read_frames(rep.facts_lines)]
            functions.append(header_function(rep.oops_line) or "")  # the last resort
        return fallback_frame(stack, functions)

    text = "\n".join(rep.lines[: rep.title_end]) + "\n"
    out = _describe(text, rep.kind, fallback)
    full_text = "\n".join(rep.lines) + "\n"
    if not out.title:
        out = _describe(rep.oops_line + "\n" + full_text, rep.kind, fallback)
        out.title = out.title or rep.kind.header
        out.syzbot_title = out.syzbot_title or rep.kind.header
        out.corrupted = out.corrupted or "header not found in report text"
    corrupted = out.corrupted or _lacks_stack(full_text, out.format, out.syzbot_title)
    if not corrupted and rep.console_hangup:
        corrupted = "console connection lost"
    return TitleResult(normalize_title(out.title), out.title, corrupted or None, out.format, out.frames,
                       normalize_title(out.syzbot_title))
