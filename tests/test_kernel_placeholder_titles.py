"""syzbot's "… in corrupted" titles (its stack rules found no guilty frame,
usually because the call trace was cut off): coreepi's title never holds
the placeholder, and names the function the report's own first line blames
when neither the stack rules nor the trace reader found one. Real logs of
syzkaller's corpus (tests/data/vendored/kernel-oops-syzkaller)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

from coreepi.analyze import analyze
from coreepi.parse.kernel.formats import header_function
from coreepi.parse.kernel.oops import parse_kernel_log

SYZ: Final = Path(__file__).resolve().parent / "data" / "vendored" / "kernel-oops-syzkaller"


def _log(name: str) -> tuple[str, str]:
    """(syzbot's title or "", the log) of a case of syzkaller's corpus."""
    text = (SYZ / name).read_text(encoding="utf-8", errors="replace")
    header, _, log = text.partition("\n\n")
    title = re.search(r"^TITLE: (.*)$", header, re.M)
    return (title.group(1) if title is not None else ""), log


@pytest.mark.parametrize(
    ("case", "title"),
    [
        # "WARNING: CPU: 2 PID: 2636 at ipc/shm.c:162 shm_open.isra.5.part.6+0x74/0x80", then nothing
        ("22", "WARNING in shm_open"),
        # dev_watchdog's WARNING, its trace lost in interleaved output
        ("23", "WARNING in dev_watchdog"),
        # an arm 3.18 WARNING ("… locks_free_lock_context+0x118/0x180()"), trace cut
        ("24", "WARNING in locks_free_lock_context"),
    ],
)
def test_lost_trace_is_titled_by_the_function_the_header_blames(case: str, title: str) -> None:
    syzbot, log = _log(case)
    assert syzbot == "WARNING in corrupted"
    report = parse_kernel_log(log)[0]
    analyze(report)
    assert report.artifact is not None and report.artifact.kernel is not None
    assert report.artifact.title == title  # was "WARNING": every such crash in one bucket
    assert report.artifact.kernel.syzbot_title == "WARNING in corrupted"  # kept as evidence
    assert report.artifact.kernel.corrupted_reason  # still a damaged report
    assert report.signature is not None and report.signature.signature == title


def test_a_helper_on_the_header_is_not_the_guilty_frame() -> None:
    """KASAN's header names the accessing function; when it is a generic
    helper the format skips (copy_from_iter), the title names no function
    rather than the helper (syz 17: the two header lines and nothing else)."""
    syzbot, log = _log("17")
    assert syzbot == "KASAN: use-after-free Read in corrupted"
    report = parse_kernel_log(log)[0]
    assert report.artifact is not None and report.artifact.title == "KASAN: use-after-free Read"


def test_no_placeholder_and_more_named() -> None:
    """Across every "in corrupted" case of the corpus: no placeholder in a
    title, and at least 29 of them name a function (19 before the header's
    function was the last resort)."""
    named = total = 0
    for path in sorted(SYZ.iterdir()):
        if not path.name.isdigit():
            continue
        syzbot, log = _log(path.name)
        if not re.search(r"\bin corrupted", syzbot):
            continue
        total += 1
        report = parse_kernel_log(log)[0]
        assert report.artifact is not None
        assert not re.search(r"\bcorrupted\b", report.artifact.title), (path.name, report.artifact.title)
        named += " in " in report.artifact.title
    assert total >= 70 and named >= 29, (total, named)


def test_header_function() -> None:
    assert header_function("[  380.688570] BUG: KASAN: use-after-free in copy_from_iter+0xf30/0x15e0 at addr "
                           "ffff880033f4b02a") == "copy_from_iter"
    assert header_function("WARNING: CPU: 0 PID: 8775 at net/ipv6/xfrm6_tunnel.c:345 "
                           "xfrm6_tunnel_net_exit+0x84/0x104") == "xfrm6_tunnel_net_exit"
    assert header_function("BUG: soft lockup - CPU#0 stuck for 22s! [syz-executor:1234]") is None
