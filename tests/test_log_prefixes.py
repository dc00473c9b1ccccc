"""Collectors' prefixes of kernel log lines: one reader
(coreepi.parse.kernel.prefixes) for the kernel parser and the telemetry
parsers, stacked prefixes (a collector's wall clock over the printk stamp)
read and stripped, and both views of a line agreeing."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import pytest

from coreepi.parse.kernel.oops import parse_kernel_log
from coreepi.parse.kernel.prefixes import NO_UPTIME, normalize_line, split_prefix
from coreepi.parse.telemetry.logs import parse_telemetry

ROOT: Final = Path(__file__).resolve().parent.parent
SRC: Final = ROOT / "src" / "coreepi" / "parse"
SYZ_113: Final = ROOT / "tests" / "data" / "vendored" / "kernel-oops-syzkaller" / "113"

_BOOT: Final = datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
_STAMP: Final = re.compile(r"^(\[ *([0-9]+)\.([0-9]{6})\]) ")
# A collector's wall clock over the kernel's printk stamp, each as written by
# the tool named: (prefix before the stamp, whether its time has a year).
_STACKED: Final[dict[str, tuple[Callable[[datetime], str], bool]]] = {
    # journalctl -o short-iso-precise of a kernel printing its own time
    "journal short-iso-precise": (lambda t: f"{t:%Y-%m-%dT%H:%M:%S.%f}+0000 node17 kernel: ", True),
    # journalctl -o short-precise (no year: uptime only, syslog time kept as text)
    "journal short-precise": (lambda t: f"{t:%b %d %H:%M:%S.%f} node17 kernel: ", False),
    # dmesg -T over a console capture that kept the stamps (serial logger)
    "dmesg -T over console": (lambda t: f"[{t:%a %b %d %H:%M:%S %Y}] ", True),
    # a console server's ISO stamp (conserver, ts "%FT%.T%z") over the console
    "console server ISO": (lambda t: f"{t:%Y-%m-%dT%H:%M:%S.%f}+00:00 ", True),
    # rsyslog RFC 3339 with the kernel's stamp
    "rsyslog RFC 3339": (lambda t: f"{t:%Y-%m-%dT%H:%M:%S.%f}+00:00 node17 kernel: ", True),
    # the journal of a service relaying dmesg (dmesg -w | logger -t dmesg), -o short-precise
    "journal over a dmesg relay": (lambda t: f"{t:%b %d %H:%M:%S.%f} node17 dmesg[812]: ", False),
    # ... and -o short-iso-precise
    "journal ISO over a dmesg relay": (lambda t: f"{t:%Y-%m-%dT%H:%M:%S.%f}+0000 node17 dmesg[812]: ", True),
}


def _syz_113() -> str:
    text = SYZ_113.read_text(encoding="utf-8")
    return text.split("\n\n", 1)[1]  # the TITLE/TYPE header of syzkaller's test file


def _stacked(log: str, prefix: Callable[[datetime], str]) -> str:
    out = []
    for line in log.split("\n"):
        match = _STAMP.match(line)
        if match is not None:
            usec = int(match.group(2)) * 1_000_000 + int(match.group(3))
            line = prefix(_BOOT + timedelta(microseconds=usec)) + line
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("collector", sorted(_STACKED))
def test_stacked_prefixes_keep_the_report(collector: str) -> None:
    """A real console log (syz 113) behind a collector's wall clock: the
    same title and frames as the console log, the outer wall clock as
    captured_at (when it has a year) and the printk stamp as the uptime.
    Before, ``dmesg -T`` and a bare ISO stamp over the console left a second
    stamp in the line and the report lost its title and every frame."""
    prefix, has_year = _STACKED[collector]
    console = parse_kernel_log(_syz_113())[0]
    (got,) = parse_kernel_log(_stacked(_syz_113(), prefix))
    assert got.artifact is not None and got.artifact.kernel is not None
    assert console.artifact is not None
    assert got.artifact.title == console.artifact.title == "kernel BUG in esp6_gro_receive"
    assert [f.function for f in got.threads[0].frames] == [f.function for f in console.threads[0].frames]
    assert len(got.threads[0].frames) >= 4
    assert got.artifact.kernel.corrupted_reason is None
    assert got.artifact.kernel.uptime_seconds == pytest.approx(292.658378)
    wall = _BOOT + timedelta(seconds=292.658378)
    if collector == "dmesg -T over console":
        wall = wall.replace(microsecond=0)  # dmesg -T prints whole seconds
    assert got.captured_at == (wall if has_year else None)


@pytest.mark.parametrize(
    ("raw", "message", "ts", "uptime", "console"),
    [
        # journalctl -o short-iso-precise, kernel with printk time
        ("2024-05-16T15:23:24.137781+0000 node17 kernel: [ 4275.616012] mce: [Hardware Error]: Machine check events logged",
         "mce: [Hardware Error]: Machine check events logged", datetime(2024, 5, 16, 15, 23, 24, 137781, tzinfo=UTC),
         4275.616012, "[ 4275.616012] mce: [Hardware Error]: Machine check events logged"),
        # journalctl -o short-precise: no year, so no ts
        ("May 16 15:23:24.137781 node17 kernel: [ 4275.616012] EDAC MC0: 1 CE memory read error on DIMM_A1",
         "EDAC MC0: 1 CE memory read error on DIMM_A1", None, 4275.616012,
         "[ 4275.616012] EDAC MC0: 1 CE memory read error on DIMM_A1"),
        # dmesg -T over a console capture
        ("[Sun Feb 23 16:24:18 2025] [  292.658378] kernel BUG at ./include/linux/skbuff.h:2069!",
         "kernel BUG at ./include/linux/skbuff.h:2069!", datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC), 292.658378,
         "[  292.658378] kernel BUG at ./include/linux/skbuff.h:2069!"),
        # a paste's indentation before the stamp
        ("    [  292.658378] kernel BUG at ./include/linux/skbuff.h:2069!",
         "kernel BUG at ./include/linux/skbuff.h:2069!", None, 292.658378,
         "[  292.658378] kernel BUG at ./include/linux/skbuff.h:2069!"),
        # a syslog time without a printk stamp: the kernel view marks it NO_UPTIME
        ("2024-03-19T10:40:00+02:00 node kernel: EDAC MC0: 1 CE x", "EDAC MC0: 1 CE x",
         datetime(2024, 3, 19, 8, 40, tzinfo=UTC), None, NO_UPTIME + "EDAC MC0: 1 CE x"),
        # /dev/kmsg
        ("6,4004,9184121699,-;perf: w", "perf: w", None, 9184.121699, " 9184.121699] perf: w"),
    ],
)
def test_both_views_of_a_line_agree(raw: str, message: str, ts: datetime | None, uptime: float | None,
                                    console: str) -> None:
    """The telemetry view (message, times) and the kernel view (console
    form) of one line come from one reader, so they strip the same prefix."""
    line = split_prefix(3, raw)
    assert line.message == message and line.ts == ts
    assert line.uptime == (pytest.approx(uptime) if uptime is not None else None)
    assert normalize_line(raw).endswith(console)
    assert normalize_line(raw).split("] ", 1)[1] == message


def test_stacked_prefix_gives_telemetry_both_times() -> None:
    """An Xid line behind ``dmesg -T`` over the console, and an indented
    paste: the events get the wall clock and the uptime (the indented line
    had no time before: its stamp stayed in the message)."""
    text = "\n".join([
        "[Sun Feb 23 16:24:18 2025] [ 8105.206520] NVRM: Xid (PCI:0000:9b:00): 79, pid=0, GPU has fallen off the bus.",
        "   [ 8205.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=777, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU",
    ])
    fell, dbe = parse_telemetry(text, host_id="h")
    assert fell.ts == datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC) and fell.uptime_seconds == pytest.approx(8105.20652)
    assert fell.detail["message"] == "GPU has fallen off the bus."
    assert dbe.ts is None and dbe.uptime_seconds == pytest.approx(8205.0)
    assert dbe.detail["process"] == "python3"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_one_owner_of_the_prefix_grammar() -> None:
    """The prefixes are known in one module: the kernel parser does not
    reach into telemetry (telemetry imports kernel, never the reverse), and
    no telemetry module compiles a prefix pattern of its own."""
    for path in sorted((SRC / "kernel").glob("*.py")):
        assert not any(m.startswith("coreepi.parse.telemetry") for m in _imports(path)), path.name
    prefix_patterns = ("[A-Z][a-z]{2} +", r"\d{4})-(\d{2})", "[ *(\\d{1,10}", ",[^;]{0,16};")
    for path in sorted((SRC / "telemetry").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert not any(p in text for p in prefix_patterns), path.name


def test_analyze_does_not_reach_into_the_kernel_parser() -> None:
    """The taint vocabulary both sides need lives in ``model`` (both may
    import it); analyze's phenotypes once imported ``parse.kernel.facts``."""
    from coreepi.model.taint import OUT_OF_TREE_TAINTS, TAINT_FLAGS

    analyze = ROOT / "src" / "coreepi" / "analyze"
    for path in sorted(analyze.rglob("*.py")):
        assert not any(m.startswith("coreepi.parse.kernel") for m in _imports(path)), path.relative_to(ROOT)
    assert TAINT_FLAGS["M"] == "machine check exception" and OUT_OF_TREE_TAINTS == frozenset("POE")
