"""The hs_err scanner's block path (``HsErrScanner.feed_text``) against its
line path (``feed`` on each line): the block path skips, in C, the lines
that cannot do anything outside a block; it must read exactly the same
facts as feeding every line, on real logs and on hostile ones."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from testdata import vendored

from coreepi.parse.jvm.facts import HsErrFacts, HsErrLimits
from coreepi.parse.jvm.hs_err import parse_hs_err
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
