"""Kernel oops / panic logs into CrashReports (coreepi.parse.kernel.oops).

Ground truth: ``tests/data/vendored/kernel-oops-syzkaller/`` (syzkaller's
``pkg/report/testdata/linux/report``): the first report's title must equal
``TITLE:``; logs without one must give no crash; ``CORRUPTED: Y`` logs must
be flagged. Plus hand-written logs for formats the ground truth lacks
(journal, dmesg -T, several crashes, taints), property-based mutation tests
(never raises) and a bounded-memory test on a large generated log.
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import re
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import vendored

from coreepi.analyze import analyze
from coreepi.model.report import CrashReport, FrameTrust, Source
from coreepi.parse.kernel.oops import (
    ScanLimits,
    iter_kernel_log,
    looks_like_kernel_log,
    parse_kernel_log,
)

ROOT = Path(__file__).resolve().parents[1]
TESTDATA = vendored("kernel-oops-syzkaller")


def kernel_reports(source: Any, **kwargs: Any) -> list[CrashReport]:
    """parse_kernel_log, then the one analyze() every artifact goes through
    (phenotypes and signature are analysis, not parsing)."""
    return [analyze(report) for report in parse_kernel_log(source, **kwargs)]


def _agreement_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_oops_agreement", ROOT / "scripts" / "gen_oops_agreement.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_oops_agreement", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def agreement():  # type: ignore[no-untyped-def]
    module = _agreement_module()
    return module, module.evaluate(TESTDATA)


# --------------------------------------------------------------------------- ground truth


def test_title_agreement_with_syzkaller(agreement) -> None:  # type: ignore[no-untyped-def]
    _, result = agreement
    assert len(result.titled) >= 700
    misses = [(o.case.name, o.case.title, o.got_title) for o in result.titled if o.got_title != o.case.title]
    rate = result.title_agreement
    print(f"kernel oops title agreement: {rate:.2%} ({len(result.titled) - len(misses)}/{len(result.titled)})")
    assert rate >= 0.95, misses[:20]


def test_no_crash_in_logs_without_title(agreement) -> None:  # type: ignore[no-untyped-def]
    _, result = agreement
    false_crashes = [(o.case.name, o.got_title) for o in result.untitled if o.got_title is not None]
    assert result.untitled and not false_crashes


def test_corrupted_logs_are_flagged(agreement) -> None:  # type: ignore[no-untyped-def]
    _, result = agreement
    corrupted = [o for o in result.titled if o.case.corrupted]
    unflagged = [o.case.name for o in corrupted if not o.got_corrupted]
    assert corrupted and not unflagged


def test_no_placeholder_in_signatures(agreement) -> None:  # type: ignore[no-untyped-def]
    """Where syzbot titles a report "… in corrupted" (its stack rules found no
    guilty frame) or "INFO: corrupted" (a lost message), coreepi's signature
    names a frame its own trace reader finds, or leaves the frame out; the
    agreement above compares syzbot's title, kept as evidence."""
    module, result = agreement
    placeholder = [o for o in result.titled if o.case.title and re.search(r"\bin corrupted$|: corrupted$", o.case.title)]
    assert len(placeholder) >= 70
    named = 0
    for outcome in placeholder:
        (report, *_) = parse_kernel_log(module.load_case(TESTDATA / outcome.case.name).log)
        analyze(report)
        assert report.signature is not None
        signature = report.signature.signature
        assert not re.search(r"\bcorrupted\b", signature), (outcome.case.name, signature)
        assert report.artifact is not None and report.artifact.kernel is not None
        assert report.artifact.kernel.syzbot_title == outcome.case.title
        named += " in " in signature
    # a quarter of them get the frame syzbot's rules missed (19 of 76 today)
    assert named >= 15, named


def test_lost_frame_before_a_slash_keeps_the_title_words(agreement) -> None:  # type: ignore[no-untyped-def]
    """syzbot's "WARNING in corrupted/usb_submit_urb" (syz 500): with no
    frame found, coreepi's title drops the placeholder, not the " in "
    (it once read "WARNINGusb_submit_urb")."""
    module, result = agreement
    cases = [o.case for o in result.titled if o.case.title and "corrupted/" in o.case.title]
    assert [c.name for c in cases] == ["500"]
    (report,) = parse_kernel_log(module.load_case(TESTDATA / "500").log)
    assert report.artifact is not None and report.artifact.title == "WARNING in usb_submit_urb"


def test_agreement_page_is_current(agreement) -> None:  # type: ignore[no-untyped-def]
    module, result = agreement
    page = ROOT / "docs" / "parsers" / "kernel-oops-agreement.md"
    assert page.read_text(encoding="utf-8") == module.render(result), (
        "docs/parsers/kernel-oops-agreement.md is stale: run scripts/gen_oops_agreement.py"
    )


# --------------------------------------------------------------------------- hand-written logs

KASAN_THEN_GPF = """\
[   10.000000] Linux version 6.8.0-test (builder@host) #1 SMP PREEMPT_DYNAMIC
[  100.100000] ==================================================================
[  100.100001] BUG: KASAN: slab-use-after-free in ext4_fill_super+0x12/0x40 fs/ext4/super.c:5012
[  100.100002] Read of size 8 at addr ffff888012345678 by task mount/4242
[  100.100003]
[  100.100004] CPU: 3 PID: 4242 Comm: mount Tainted: G    B   W  O      6.8.0-test #1
[  100.100005] Hardware name: Dell Inc. PowerEdge R640/0W23H8, BIOS 2.11.2 004/21/2021
[  100.100006] Call Trace:
[  100.100007]  <TASK>
[  100.100008]  __dump_stack lib/dump_stack.c:88 [inline]
[  100.100009]  dump_stack_lvl+0x1a/0x30 lib/dump_stack.c:106
[  100.100010]  print_report+0x10/0x20 mm/kasan/report.c:377
[  100.100011]  kasan_report+0x10/0x20 mm/kasan/report.c:588
[  100.100012]  ext4_fill_super+0x12/0x40 fs/ext4/super.c:5012
[  100.100013]  mount_bdev+0x10/0x20 [ext4]
[  100.100014]  do_syscall_64+0x10/0x20
[  100.100015]  entry_SYSCALL_64_after_hwframe+0x6e/0x76
[  100.100016]  </TASK>
[  100.100017]
[  100.100018] Allocated by task 4242:
[  100.100019]  kmalloc+0x10/0x20
[  100.100020]  ext4_alloc_inode+0x10/0x20
[  100.100021] ==================================================================
[  200.000000] general protection fault, probably for non-canonical address 0xdffffc0000000001: 0000 [#1] SMP KASAN
[  200.000001] CPU: 1 PID: 77 Comm: kworker/1:2 Tainted: G    B   W  O      6.8.0-test #1
[  200.000002] Hardware name: Dell Inc. PowerEdge R640/0W23H8, BIOS 2.11.2 004/21/2021
[  200.000003] RIP: 0010:nf_tables_newrule+0x33/0x90
[  200.000004] RSP: 0018:ffffc90000a7f9b8 EFLAGS: 00010202
[  200.000005] RAX: dffffc0000000000 RBX: 0000000000000008 RCX: ffffffff88a3b2c1
[  200.000006] Call Trace:
[  200.000007]  <TASK>
[  200.000008]  nfnetlink_rcv_batch+0x10/0x20
[  200.000009]  netlink_unicast+0x10/0x20
[  200.000010]  do_syscall_64+0x10/0x20
[  200.000011]  </TASK>
[  200.000012] Modules linked in: nf_tables(E) nvidia(POE) [last unloaded: dummy]
[  200.000013] ---[ end trace 0000000000000000 ]---
[  200.000014] Kernel panic - not syncing: Fatal exception
"""

MCE_PANIC = """\
[ 5000.000001] mce: [Hardware Error]: CPU 2: Machine Check Exception: 5 Bank 4: be00000000800400
[ 5000.000002] mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff8104d3a5> {intel_idle+0x75/0xd0}
[ 5000.000003] Kernel panic - not syncing: Fatal machine check
[ 5000.000004] CPU: 2 PID: 0 Comm: swapper/2 Tainted: G   M       6.1.0 #1
[ 5000.000005] Hardware name: Supermicro SYS-1029P-WTR/X11DDW-L, BIOS 3.4 10/20/2020
"""


def test_block_prefilters_agree_with_per_line_search() -> None:
    """The speed-ups find in bulk what a regexp per line would: report
    headers by line (the block marks' one Aho-Corasick pass over the bytes),
    stack starts by line (matching_lines), title formats only where their
    kind's header is (title_search). On every syzkaller log and kernel-wild
    log, each must give exactly what the plain search gives."""
    from coreepi.parse.kernel.blocks import HEADER, mark_block
    from coreepi.parse.kernel.formats import OOPS_KINDS, title_search
    from coreepi.parse.kernel.frames import _ANY_STACK_START, STACK_START_LITERALS, find_all, matching_lines
    from coreepi.parse.kernel.scan import _ANY_HEADER_RE

    files = sorted(TESTDATA.iterdir()) + sorted((ROOT / "tests" / "data" / "kernel-wild").glob("*.log"))
    checked = 0
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        lines = text.split("\n")
        data = (text + "\n").encode()
        marked = {data.count(b"\n", 0, at) for at, bits in mark_block(data).marks.items() if bits & HEADER}
        assert marked == {i for i, ln in enumerate(lines) if _ANY_HEADER_RE.search(ln)}, path.name
        assert matching_lines(text, STACK_START_LITERALS, _ANY_STACK_START) == {
            i for i, ln in enumerate(lines) if _ANY_STACK_START.search(ln)}
        for kind in OOPS_KINDS:
            headers = find_all(text, kind.header)
            for fmt in kind.formats:
                fast, plain = title_search(fmt, kind.header, text, headers), fmt.title.search(text)
                assert (fast and (fast.span(), fast.groups())) == (plain and (plain.span(), plain.groups())), (
                    path.name, fmt.title.pattern)
                checked += plain is not None
    assert len(files) > 780 and checked > 900


def test_skipping_quiet_lines_changes_nothing() -> None:
    """The scanner skips the lines between reports in one step; reading
    every line one by one (a block whose every line is a stop) must give the
    same reports, prefixes (the lines before a report) and line numbers. The
    input: real syzkaller logs, each after 700 lines of another log's noise
    (more than the 200 kept for prefixes), one with a printk replay mark, one
    after lines too long for the bytes window of skipped lines."""
    from dataclasses import replace

    from coreepi.parse.kernel.blocks import mark_block
    from coreepi.parse.kernel.scan import scan_blocks

    logs = [(TESTDATA / n).read_bytes().partition(b"\n\n")[2] for n in ("0", "100", "317", "620", "1000")]
    noise = b"".join(b"[  %d.000001] noise line %d\n" % (i, i) for i in range(700))
    replay = b"[  9.1] half a li\n[  9.1] ** replaying previous printk message **\n"
    # 300 lines of 400 bytes: the 64 KiB window holds fewer than the 200 lines kept
    wide = b"".join(b"[  %d.000002] %s\n" % (i, b"w" * 380) for i in range(300))
    # a task's report whose prefix lines are 180 long lines of another task back
    task = b"".join(b"[  5.%06d][  T77] task line %d\n" % (i, i) for i in range(10))
    other = b"".join(b"[  6.%06d][    T1] %s\n" % (i, b"w" * 380) for i in range(180))
    oops = (b"[  7.000000][  T77] BUG: unable to handle kernel NULL pointer dereference at 0000000000000000\n"
            b"[  7.000001][  T77] Call Trace:\n[  7.000002][  T77]  foo+0x1/0x2\n")
    data = (b"".join(noise + log for log in logs) + replay + noise + logs[0] + wide + logs[2] + noise + task
            + other + oops)
    block = mark_block(data)
    every_line = replace(block, stops=[0] + [i + 1 for i, c in enumerate(data[:-1]) if c == 10])

    def shape(blocks: list) -> list[tuple]:  # type: ignore[type-arg]
        return [(r.line_number, r.oops_line, r.prefix, r.lines, r.facts_lines, r.title_end)
                for r in scan_blocks(blocks)]

    skipped, read = shape([block]), shape([every_line])
    assert len(skipped) == 7 and skipped == read  # log 620 holds no crash
    assert skipped[0][0] > 700 and len(skipped[0][2]) > 0
    assert skipped[-1][2] == [f"task line {i}" for i in range(10)]


def test_several_crashes_give_several_reports() -> None:
    reports = kernel_reports(KASAN_THEN_GPF, name="two-crashes")
    assert [r.signature.signature for r in reports if r.signature] == [
        "KASAN: slab-use-after-free Read in ext4_fill_super",
        "general protection fault in nf_tables_newrule",
    ]
    kasan, gpf = reports
    assert kasan.source is Source.KERNEL_OOPS
    assert kasan.phenotypes[0].name == "kernel-kasan"
    assert kasan.phenotypes[0].evidence["guilty_frame"] == "ext4_fill_super"
    assert kasan.phenotypes[0].evidence["corrupted"] is False
    assert kasan.host.kernel == "6.8.0-test"
    assert kasan.host.board == "Dell Inc. PowerEdge R640/0W23H8"
    assert kasan.host.bios_version == "2.11.2 004/21/2021"
    assert kasan.process.pid == 4242 and kasan.process.comm == "mount"
    assert kasan.phenotypes[0].evidence["cpu"] == 3
    frames = kasan.crashed_thread.frames if kasan.crashed_thread else []
    functions = [f.function for f in frames]
    assert functions[:4] == ["__dump_stack", "dump_stack_lvl", "print_report", "kasan_report"]
    assert frames[0].inlined and frames[0].file == "lib/dump_stack.c" and frames[0].line == 88
    assert next(f for f in frames if f.function == "mount_bdev").module == "ext4"
    assert kasan.signature is not None and frames[kasan.signature.frames_used[0]].function == "ext4_fill_super"
    assert gpf.phenotypes[0].name == "kernel-fault"
    gpf_frames = gpf.crashed_thread.frames if gpf.crashed_thread else []
    assert gpf_frames[0].function == "nf_tables_newrule"
    # the call trace's frames were read back from the log's text; the RIP line's frame is
    # the register dump's pc (context), which readers of the trace tell apart by it
    assert gpf_frames[0].trust is FrameTrust.CONTEXT
    assert {f.trust for f in frames + gpf_frames[1:]} == {FrameTrust.LOG}
    assert '"trust":"log"' in gpf.model_dump_json() and gpf.schema_version == "1.4.0"
    assert gpf.crashed_thread is not None and gpf.crashed_thread.registers["rax"] == 0xDFFFFC0000000000
    assert gpf.host.extra["modules_linked_in"] == "nf_tables nvidia"
    assert len({r.crash_id for r in reports}) == 2
    assert [r.crash_id for r in kernel_reports(KASAN_THEN_GPF, name="two-crashes")] == [
        r.crash_id for r in reports
    ]


def test_taint_flags_become_phenotypes() -> None:
    gpf = kernel_reports(KASAN_THEN_GPF)[1]
    names = {p.name for p in gpf.phenotypes}
    assert "kernel-taint-out-of-tree" in names and "kernel-taint-machine-check" not in names
    mce = kernel_reports(MCE_PANIC)
    assert len(mce) == 1
    assert mce[0].signature is not None and mce[0].signature.signature == "kernel panic: Fatal machine check"
    by_name = {p.name: p for p in mce[0].phenotypes}
    assert by_name["kernel-mce"].hardware_indicative
    assert by_name["kernel-taint-machine-check"].hardware_indicative
    assert mce[0].host.board == "Supermicro SYS-1029P-WTR/X11DDW-L"


def test_journal_and_dmesg_t_formats() -> None:
    journal = "\n".join(
        "Mar 19 10:32:12 node17 kernel: " + line.split("] ", 1)[1] if "] " in line else line
        for line in KASAN_THEN_GPF.splitlines()
    )
    titles = [r.signature.signature for r in kernel_reports(journal) if r.signature]
    assert titles[0] == "KASAN: slab-use-after-free Read in ext4_fill_super"
    dmesg_t = re.sub(r"(?m)^\[ *[0-9]+\.[0-9]+\]", "[Tue Mar 19 10:32:12 2024]", KASAN_THEN_GPF)
    reports = kernel_reports(dmesg_t)
    assert [r.signature.signature for r in reports if r.signature][:2] == [
        "KASAN: slab-use-after-free Read in ext4_fill_super",
        "general protection fault in nf_tables_newrule",
    ]
    thread = reports[0].crashed_thread
    assert thread is not None and "ext4_fill_super" in [f.function for f in thread.frames]


_BOOT: Final = datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
_STAMP: Final = re.compile(r"^\[ *([0-9]+)\.([0-9]{6})\] ")
# each collector's prefix of a line printed ``usec`` µs after _BOOT
_PREFIXES: Final = {
    "dmesg --time-format iso": lambda t, usec: f"{t:%Y-%m-%dT%H:%M:%S,%f+00:00} ",
    "dmesg -x --time-format iso": lambda t, usec: f"kern  :warn  : {t:%Y-%m-%dT%H:%M:%S,%f+00:00} ",
    "journal short-iso-precise": lambda t, usec: f"{t.isoformat()} node17 kernel: ",
    "/dev/kmsg": lambda t, usec: f"4,77,{usec},-;",
    "dmesg -T": lambda t, usec: f"[{t:%a %b %d %H:%M:%S %Y}] ",
}


def _reprefixed(log: str, prefix: Callable[[datetime, int], str]) -> str:
    out = []
    for line in log.split("\n"):
        match = _STAMP.match(line)
        if match is not None:
            usec = int(match.group(1)) * 1_000_000 + int(match.group(2))
            line = prefix(_BOOT + timedelta(microseconds=usec), usec) + line[match.end():]
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("collector", sorted(_PREFIXES))
def test_collector_prefixes_read_like_the_console(collector: str) -> None:
    """A real console log (syz 113) as each collector writes it: the same
    title, frames and verdict as the console log; the oops line as printed;
    uptime only where the prefix has one (no made-up 0.0 for dmesg -T),
    the wall clock as captured_at where it has one."""
    log = _agreement_module().load_case(TESTDATA / "113").log
    console = parse_kernel_log(log)[0]
    got = parse_kernel_log(_reprefixed(log, _PREFIXES[collector]))[0]
    assert console.artifact.title == got.artifact.title == "kernel BUG in esp6_gro_receive"
    assert [f.function for f in got.threads[0].frames] == [f.function for f in console.threads[0].frames]
    assert len(console.threads[0].frames) >= 4
    kernel = got.artifact.kernel
    assert kernel is not None and kernel.corrupted_reason is None
    oops = "kernel BUG at ./include/linux/skbuff.h:2069!"
    prefix = _PREFIXES[collector](_BOOT + timedelta(seconds=292.658378), 292658378)
    assert got.artifact.text == prefix + oops
    if collector == "/dev/kmsg":
        assert kernel.uptime_seconds == pytest.approx(292.658378) and got.captured_at is None
    else:
        wall = _BOOT + timedelta(seconds=292.658378)
        if collector == "dmesg -T":
            wall = wall.replace(microsecond=0)
        assert kernel.uptime_seconds is None and got.captured_at == wall


@pytest.mark.parametrize("name", ["components_memory_testdata_dmesg.decode.iso.log",
                                  "pkg_kmsg_testdata_kmsg.1.log"])
def test_iso_and_kmsg_logs_are_kernel_logs(name: str) -> None:
    assert looks_like_kernel_log((vendored("host-telemetry-gpud") / name).read_bytes()[:65536])


def test_hard_lockup_extension() -> None:
    log = (
        "[  300.000001] NMI watchdog: Watchdog detected hard LOCKUP on cpu 5\n"
        "[  300.000002] CPU: 5 PID: 1234 Comm: stress Not tainted 5.15.0 #1\n"
        "[  300.000003] RIP: 0010:native_queued_spin_lock_slowpath+0x40/0x60\n"
        "[  300.000004] Call Trace:\n"
        "[  300.000005]  <NMI>\n"
        "[  300.000006]  </NMI>\n"
        "[  300.000007]  _raw_spin_lock+0x10/0x20\n"
        "[  300.000008]  mydrv_poll+0x10/0x20 [mydrv]\n"
        "[  300.000009]  process_one_work+0x10/0x20\n"
        "[  300.000010]  worker_thread+0x10/0x20\n"
    )
    (report,) = kernel_reports(log)
    assert report.signature is not None and report.signature.signature == "BUG: hard lockup in mydrv_poll"
    assert report.phenotypes[0].name == "kernel-lockup"
    assert report.signature.trail[0].rule.startswith("coreepi-title:")


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "hello world\n", "[    0.000000] Linux version 6.1.0 #1\n[    1.0] ok\n",
     "BUG", "WARNING: /etc/ssh/moduli does not exist, using fixed modulus\n", "\x00\xff\ufffd" * 100],
)
def test_no_crash_found(text: str) -> None:
    assert kernel_reports(text) == []


def test_partial_report_is_kept_and_marked() -> None:
    truncated = "[  1.0] BUG: unable to handle kernel NULL pointer dereference at 0000000000000008\n[  1.1] IP:"
    (report,) = kernel_reports(truncated)
    assert report.phenotypes[0].evidence["corrupted"] is True
    assert any(w.startswith("corrupted report: ") for w in report.analysis.warnings)


def test_input_kinds(tmp_path: Path) -> None:
    expected = [r.signature.signature for r in kernel_reports(KASAN_THEN_GPF) if r.signature]
    raw = KASAN_THEN_GPF.encode()
    plain, gz = tmp_path / "console.log", tmp_path / "console.log.gz"
    plain.write_bytes(raw.replace(b"\n", b"\r\n"))
    gz.write_bytes(gzip.compress(raw))
    for source in (plain, gz, raw, KASAN_THEN_GPF.splitlines(), KASAN_THEN_GPF.splitlines(keepends=True),
                   [line.encode() for line in KASAN_THEN_GPF.splitlines()]):
        got = [r.signature.signature for r in kernel_reports(source) if r.signature]  # type: ignore[arg-type]
        assert got == expected, type(source)
    with plain.open("rb") as handle:
        assert [r.signature.signature for r in kernel_reports(handle) if r.signature] == expected
    assert kernel_reports(plain)[0].crash_id == kernel_reports(plain)[0].crash_id


def test_looks_like_kernel_log() -> None:
    assert looks_like_kernel_log(KASAN_THEN_GPF.encode())
    assert looks_like_kernel_log(b"Mar 19 10:32:12 h kernel: a\nMar 19 10:32:13 h kernel: b\n")
    assert not looks_like_kernel_log(b"")
    assert not looks_like_kernel_log(b"\x7fELF\x02\x01\x01\x00" + bytes(100))
    assert not looks_like_kernel_log(b"# hs_err_pid123.log\nA fatal error has been detected by the JRE\n")


def test_sniff_recognizes_every_syzkaller_crash(agreement, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What inspect and ingest decide a file is (``sniff``) on every
    ground-truth log: a log with a crash is a kernel log (kmemleak reports,
    one-line WARNINGs, a six-byte ``INFO:`` once were "not a kernel log"),
    a log without one is nothing else (no hs_err, no core)."""
    from coreepi.ingest.artifacts import ArtifactKind, sniff

    refused, misread = [], []
    for outcome in agreement[1].outcomes:
        path = tmp_path / outcome.case.name
        path.write_bytes(outcome.case.log.encode())
        kind, _ = sniff(path)
        if outcome.case.title is not None and kind is not ArtifactKind.KERNEL_LOG:
            refused.append((outcome.case.name, kind))
        if outcome.case.title is None and kind not in (ArtifactKind.KERNEL_LOG, ArtifactKind.UNKNOWN):
            misread.append((outcome.case.name, kind))
    assert len(agreement[1].titled) >= 700
    assert not refused and not misread


# The one no-crash syzkaller log that is not read as a kernel log: Android
# debuggerd's tombstone lines (userspace) with two unstamped driver lines.
_NOT_KERNEL_NO_CRASH: Final = {"262"}


def test_no_crash_syzkaller_logs_are_kernel_logs() -> None:
    """Breaker #15: the 34 corpus logs without a crash (no ``TITLE:``) are
    console output; 16 were refused "not a kernel log" (one stamped line,
    ``INFO: NMI handler`` / ``EXT4-fs`` / Spectre lines without stamps, a
    syslog line with console lines glued mid-line). Every one but the
    Android tombstone fragment is now a kernel log."""
    from coreepi.ingest.artifacts import ArtifactKind, sniff

    no_crash = [f for f in TESTDATA.iterdir() if b"TITLE:" not in f.read_bytes().partition(b"\n\n")[0]]
    assert len(no_crash) == 34
    kinds = {f.name: sniff(f)[0] for f in no_crash}
    assert {n for n, k in kinds.items() if k is not ArtifactKind.KERNEL_LOG} == _NOT_KERNEL_NO_CRASH
    assert all(kinds[n] is ArtifactKind.UNKNOWN for n in _NOT_KERNEL_NO_CRASH)


@pytest.mark.parametrize("name", ["1", "728", "706"])
def test_inspect_says_no_crash_for_a_quiet_kernel_log(name: str) -> None:
    from clikit import cli

    got = cli("inspect", str(TESTDATA / name))
    assert (got.returncode, got.stdout) == (0, ""), got.stderr
    assert got.stderr.strip().endswith(f"{TESTDATA / name}: no crash found")


def test_sniff_still_refuses_text_that_is_no_kernel_log() -> None:
    """The kernel-only line forms need the kernel's spelling at a line's start."""
    for text in (b"hello world\n", b"VFS is a word\n", b"x86/fpu is fine\n", b'{"a": 1}\n',
                 b"my EXT4-fs notes\n", b"[ 1.5] a bracket\n"):
        assert not looks_like_kernel_log(text), text


def test_inspect_reads_a_kmsan_log_without_timestamps(tmp_path: Path) -> None:
    from clikit import cli

    path = tmp_path / "751.log"
    path.write_text(_agreement_module().load_case(TESTDATA / "751").log)
    got = cli("inspect", str(path))
    assert got.returncode == 0, got.stderr
    assert "KMSAN: uninit-value in alg_setkey" in got.stdout


# --------------------------------------------------------------------------- robustness


def _sample_logs() -> list[str]:
    logs = [KASAN_THEN_GPF, MCE_PANIC]
    module = _agreement_module()
    for name in ("0", "100", "317", "620", "748", "1000", "1002"):
        if (TESTDATA / name).exists():
            logs.append(module.load_case(TESTDATA / name).log)
    return logs


SAMPLES = _sample_logs()


def _mutate(text: str, seed: int, ops: int) -> str:
    rng = random.Random(seed)
    lines = text.split("\n")
    for _ in range(ops):
        op = rng.randrange(7)
        i = rng.randrange(len(lines)) if lines else 0
        if op == 0 and lines:
            del lines[i]
        elif op == 1 and lines:
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
        elif op == 2 and lines:
            cut = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:cut]
        elif op == 3 and lines:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 4:
            junk = "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(40)))
            lines.insert(i, junk)
        elif op == 5 and lines and len(lines[i]) < 4096:
            # bounded: repeated on the same line, 49x again and again ran out of memory
            lines[i] = lines[i] * rng.randrange(2, 50)
        elif op == 6:
            lines = lines[: rng.randrange(len(lines) + 1)]
    return "\n".join(lines)


def _check(reports: list[CrashReport]) -> None:
    for report in reports:
        assert report.signature is not None and report.signature.signature
        assert len(report.signature.signature) <= 120
        CrashReport.model_validate_json(report.model_dump_json())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sample=st.sampled_from(range(len(SAMPLES))), seed=st.integers(0, 2**32), ops=st.integers(1, 40))
def test_mutated_real_logs_never_raise(sample: int, seed: int, ops: int) -> None:
    _check(kernel_reports(_mutate(SAMPLES[sample], seed, ops)))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    _check(kernel_reports(data))


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("BUG:WARNINGKernel panic[] 0123.\n\t?+x/<>CPUTrace")), max_size=2000))
def test_kernel_flavoured_text_never_raises(text: str) -> None:
    _check(kernel_reports(text))


def _huge_log(lines: int) -> Iterator[str]:
    """A generated console log, never held in memory: benign noise with a
    crash every few thousand lines and some absurdly long lines."""
    crash = KASAN_THEN_GPF.splitlines()
    for i in range(lines):
        if i % 5000 == 0:
            yield from crash
        elif i % 7919 == 0:
            yield "[ 1.0] " + "x" * 200_000
        else:
            yield f"[{i // 1000:6d}.{i % 1000:06d}] eth0: link up, 10Gbps full duplex, flow control rx/tx {i}"


def test_streaming_memory_is_bounded() -> None:
    limits = ScanLimits()
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_kernel_log(_huge_log(60_000), limits=limits))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 2 * 12
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_one_giant_line_file_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "giant.log"
    with path.open("wb") as handle:
        handle.write(b"[ 1.0] BUG: soft lockup - CPU#0 stuck for 22s! [a:1]\n")
        chunk = b"A" * (1 << 20)
        for _ in range(64):  # a 64 MiB line with no newline
            handle.write(chunk)
    tracemalloc.start()
    try:
        reports = parse_kernel_log(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    reports = [analyze(report) for report in reports]
    assert len(reports) == 1 and reports[0].phenotypes[0].evidence["corrupted"] is True
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_report_count_is_capped() -> None:
    log = "".join(f"[{i}.0] WARNING: CPU: 0 PID: 1 at kernel/foo.c:{i} foo+0x1/0x2\n" for i in range(1, 60))
    reports = kernel_reports(log, max_reports=5)
    assert len(reports) == 5 and "more than 5" in reports[-1].analysis.warnings[-1]
