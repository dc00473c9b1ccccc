"""``coreepi inspect``'s text mode on big logs (issue 15, hole 7): the fast paths of
reporting/fast_text.py print byte for byte what Rich prints, and a repeated stack is
laid out once."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from coreepi.ingest.artifacts import ArtifactKind, inspect_file, sniff
from coreepi.reporting import fast_text
from coreepi.reporting.crash_text import render_report

DATA = Path(__file__).parent / "data"
LOGS = sorted((DATA / "kernel-wild").glob("*.log"))[:24] + sorted(
    (DATA / "vendored" / "jvm-hs_err-krashpad").glob("dataset*.txt"))[:6]


@pytest.mark.parametrize("width", [80, 132])
def test_fast_text_prints_what_rich_prints(width: int) -> None:
    reports = [r for log in LOGS if sniff(log)[0] is not ArtifactKind.UNKNOWN
               for r in inspect_file(log)]
    assert len(reports) >= 25
    fast = Console(file=io.StringIO(), width=width)
    rich = Console(file=io.StringIO(), width=width, record=True)  # recording: Rich all the way
    for console in (fast, rich):
        for i, report in enumerate(reports):
            if i:
                fast_text.print_rule(console)
            render_report(report, console, all_threads=True, registers=True)
    assert fast.file.getvalue() == rich.file.getvalue()  # type: ignore[attr-defined]


def test_a_repeated_stack_is_laid_out_once(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes((DATA / "kernel-wild" / "021-x86_64-slub.log").read_bytes() * 50)
    reports = inspect_file(log)
    assert len(reports) == 50
    fast_text._RENDERED.clear()
    console = Console(file=io.StringIO(), width=80)
    for report in reports:
        render_report(report, console)
    assert len(fast_text._RENDERED) == 1  # one frames table (the log has no modules)
