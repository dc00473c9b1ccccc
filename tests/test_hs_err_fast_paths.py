"""The hs_err parser's fast paths against their plain definitions.

* The scanner's block path (``HsErrScanner.feed_text``) against its line
  path (``feed`` on each line): the block path skips, in C, the lines that
  cannot do anything outside a block; it must read exactly the same facts
  as feeding every line, on real logs and on hostile ones.
* Frame-line grammars rewritten for speed against the regexps they
  replaced (kept here as the definition): the lazy ``.*?`` tails tried the
  rest of the pattern at every character.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from testdata import vendored

from coreepi.parse.jvm.facts import HsErrFacts, HsErrLimits
from coreepi.parse.jvm.hs_err import parse_hs_err
from coreepi.parse.jvm.lines import (
    _BARE_FRAME,
    _NATIVE_FRAME,
    _THREAD_ID,
    RawFrame,
    _split_symbol,
)
from coreepi.parse.jvm.scan import HsErrScanner

LOGS = [
    f.read_bytes().decode("utf-8", "replace")
    for folder in ("jvm-hs_err-krashpad", "jvm-hs_err-krashpad-windows")
    for f in sorted(vendored(folder).iterdir())
]
LIMITS = HsErrLimits(max_line_chars=120, max_frames=7, max_mappings=9, max_threads=5)


def by_lines(text: str, limits: HsErrLimits) -> tuple[HsErrFacts, bool]:
    scanner = HsErrScanner(limits)
    for line in text.split("\n"):
        scanner.feed(line)
        if scanner.done:
            break
    return scanner.facts, scanner.done


def by_blocks(blocks: list[str], limits: HsErrLimits) -> tuple[HsErrFacts, bool]:
    scanner = HsErrScanner(limits)
    for block in blocks:
        scanner.feed_text(block)
        if scanner.done:
            break
    return scanner.facts, scanner.done


def _cut(text: str, at: list[int]) -> list[str]:
    """``text`` as blocks cut at the newlines nearest to ``at`` (as the
    reader gives them: whole lines, the newline between blocks dropped)."""
    lines = text.split("\n")
    bounds = sorted({min(i, len(lines) - 1) for i in at} | {0, len(lines)})
    return ["\n".join(lines[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def test_real_logs_give_the_same_facts_both_ways() -> None:
    compared = 0
    for text in LOGS:
        for limits in (HsErrLimits(), LIMITS):
            want = by_lines(text, limits)
            assert by_blocks([text], limits) == want
            assert by_blocks(_cut(text, [7, 40, 41, 300]), limits) == want
            assert by_blocks([text + "\n" + text], limits) == by_lines(text + "\n" + text, limits)
            compared += 1
    assert compared == 2 * len(LOGS) >= 120
    # the logs do reach the facts a skipped line would have hidden
    facts, _ = by_blocks([LOGS[0]], HsErrLimits())
    assert facts.lines == LOGS[0].count("\n") + 1 and facts.evidence > 0


_PIECES = (
    "#  SIGSEGV (0xb) at pc=0x0, pid=1, tid=2", "# Problematic frame:", "# C  [a+0x1]  f+0x2",
    "# A fatal error has been detected by the Java Runtime Environment:", "#", "",
    "# There is insufficient memory for the Java Runtime Environment to continue.",
    "# Native memory allocation (mmap) failed to map 1 bytes", "#  Internal Error (a.cpp:1)",
    "---------------  T H R E A D  ---------------", "-----", "Registers:", "RAX=0x1, RBX=0x2",
    "Native frames:", "V  [libjvm.so+0x1]  f+0x1", "j  a.b()V+1", "Java frames:",
    "Dynamic libraries:", "0-1 r-xp 0 0:0 0 /x", "0x1 - 0x2 C:\\x.dll", "0x10 /lib/y.so",
    "OS:", "uname:Linux 5 x86_64", "CPU:total 1", "[Global flags]", "  bool UseG1GC = true {p}",
    "container (cgroup) information:", "x: y", "/proc/cpuinfo:", "model name : X",
    "processor : 1", "Java Threads: ( => current thread )", "=>0x1 JavaThread \"x\" [id=3]",
    "  0x2 VMThread \"v\" [id=4]", "Instructions: (pc=0x10)", "0x10:   00 01 02",
    "Current CompileTask:", "C2: 1 a.b()V", "Current thread (0x1):  JavaThread \"m\" [id=5]",
    "Stack: [0x1,0x2],  sp=0x1", "siginfo: si_signo: 11 (SIGSEGV), si_code: 1, si_addr: 0x8",
    "JavaThread 0x1 (nid = 7) was being processed", "...<more frames>...", "END.",
    "elapsed time: 1 seconds", "vm_info: x for linux-amd64 JRE (1) built on y", "Memory: 4k",
    "KVM virtualization detected", "  VMWare virtualization detected \r", "Event: 1 x",
    "[error occurred during error reporting (a), id 0x1]", "[timeout occurred during error reporting (b)]",
    "load average:1", "Heap:", " garbage-first heap   total 1K", "\r", "\x00", "#  ",
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(_PIECES) | st.text(max_size=30) | st.just("y" * 130) | st.just("z" * 121),
        max_size=60,
    ),
    st.lists(st.integers(0, 60), max_size=4),
)
def test_any_lines_give_the_same_facts_both_ways(lines: list[str], cuts: list[int]) -> None:
    text = "\n".join(lines)
    want = by_lines(text, LIMITS)
    assert by_blocks([text], LIMITS) == want
    assert by_blocks(_cut(text, cuts), LIMITS) == want


def test_an_over_long_line_is_counted_whatever_the_source() -> None:
    # Text sources cut a long line at max_line_chars already while reading
    # it, so it was never counted: "over-long lines were cut" was missing.
    log = LOGS[0].replace("\n", "\n" + "x" * 5000 + "\n", 1)
    warnings = [
        parse_hs_err(source).analysis.warnings  # type: ignore[union-attr]
        for source in (log, log.encode(), log.splitlines())
    ]
    assert all("1 over-long lines were cut" in w for w in warnings), warnings


# --- frame grammars: the same groups as the regexps they replaced ---------------------------

_LAZY_SYMBOL = re.compile(
    r"^(?P<func>.*?)(?:\+0x(?P<off>[0-9a-fA-F]{1,16}))?"
    r"(?:\s+\((?P<file>[^():\s]+):(?P<line>\d+)\))?\s*$"
)
_LAZY_NATIVE = re.compile(
    r"^(?P<kind>[CV])\s+\[(?P<module>.+?)\+0x(?P<off>[0-9a-fA-F]{1,16})\]"
    r"(?:\s+(?P<symbol>.*?))?\s*$"
)
_LAZY_BARE = re.compile(r"^C\s+0x(?P<pc>[0-9a-fA-F]{1,16})(?:\s+(?P<symbol>.*?))?\s*$")
_WORD_ID = re.compile(r"\bid=(\d+)")
_FRAME_TEXT = st.lists(
    st.sampled_from(
        [*"CV[]+0x1aF9( ):\t\n.z\u00a0\u2003\u0663", "+0x", "0x", " (", ".cpp:", "C  [",
         "V  [lib+0x1f]", "C  0x12", "0123456789abcdef0", "pid=", "id=", "_id=7"]
    ),
    max_size=25,
).map("".join)  # fmt: skip


def _lazy_split(symbol: str) -> tuple[Any, ...]:
    match = _LAZY_SYMBOL.match(symbol)
    if match is None or not match["func"]:
        return symbol, None, None, None
    offset = int(match["off"], 16) if match["off"] else None
    line = int(match["line"]) if match["file"] else None
    return match["func"].strip(), offset, match["file"], line


def _groups(match: re.Match[str] | None) -> dict[str, str | None] | None:
    # an empty symbol and none are the same to the parser (it splits neither)
    return None if match is None else {**match.groupdict(), "symbol": match["symbol"] or None}


@settings(max_examples=3000, deadline=None)
@given(_FRAME_TEXT)
def test_frame_grammars_split_as_the_lazy_regexps_did(text: str) -> None:
    symbol = text.replace("\n", " ")  # a symbol is part of one line
    if symbol:
        frame = RawFrame(kind="V", text="")
        _split_symbol(frame, symbol)
        got = (frame.symbol, frame.symbol_offset, frame.source_file, frame.source_line)
        assert got == _lazy_split(symbol)
    assert _groups(_NATIVE_FRAME.match(text)) == _groups(_LAZY_NATIVE.match(text))
    assert _groups(_BARE_FRAME.match(text)) == _groups(_LAZY_BARE.match(text))
    found, want = _THREAD_ID.search(text), _WORD_ID.search(text)
    assert (found and found.span(1)) == (want and want.span(1))


def test_frame_symbols_of_every_shape() -> None:
    for symbol, want in {
        "oopDesc::size_given_klass(Klass*)+0x1": ("oopDesc::size_given_klass(Klass*)", 1, None),
        "f+0x1a (os_linux.cpp:12)": ("f", 0x1A, "os_linux.cpp"),
        "f  (a.cpp:7)": ("f", None, "a.cpp"),
        "x+0x1+0x2": ("x+0x1", 2, None),
        "f+0x1 (a+0x2:3)": ("f", 1, "a+0x2"),
        "g+0x12345678901234567": ("g+0x12345678901234567", None, None),
        "+0x12": ("+0x12", None, None),
    }.items():
        frame = RawFrame(kind="V", text="")
        _split_symbol(frame, symbol)
        assert (frame.symbol, frame.symbol_offset, frame.source_file) == want, symbol
