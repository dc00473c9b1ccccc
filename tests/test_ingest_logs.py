"""`coreepi ingest` of logs: ``--telemetry LOG --host H`` (hardware events and
kernel crashes of H), hs_err logs and kernel logs among a fleet's crashes,
sigbus_mce events from SIGBUS BUS_MCEERR crashes, and one crash from an
hs_err log plus the core of the same JVM process (both arrival orders).

Real inputs: tests/data/vendored (gpud kernel logs, syzkaller kernel logs,
krashpad hs_err logs), ../shared/testdata (elfutils cores; skipped where
absent) and, where java, javac and kernel cores are available, a real JVM
crash made here (hs_err + core).
"""

from __future__ import annotations

import bz2
import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from testdata import shared, shared_missing, vendored
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.ingest.artifacts import inspect_file
from coreepi.ingest.pairing import PAIR_WINDOW, pair_crash_id
from coreepi.ingest.run import ingest
from coreepi.model.report import CrashReport, SignalInfo, Source
from coreepi.store import DuckDBStore

GPUD = vendored("host-telemetry-gpud")
SYZ = vendored("kernel-oops-syzkaller")
HS_ERR = vendored("jvm-hs_err-krashpad")
ELFCORES = shared("elf-cores-elfutils")


def rows(store: DuckDBStore, sql: str) -> list[tuple]:
    return store._query(sql).fetchall()


def sidecar(path: Path, host: str, when: datetime | str, **extra: object) -> None:
    at = when.isoformat() if isinstance(when, datetime) else when
    path.write_text(json.dumps({"host_id": host, "captured_at": at, **extra}))


# --------------------------------------------------------------------------
# --telemetry LOG --host H


def test_telemetry_logs_become_events_and_kernel_crashes_of_the_host(tmp_path: Path) -> None:
    xid = GPUD / "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log"
    mem = GPUD / "components_memory_testdata_dmesg.decode.iso.log"
    pstore = GPUD / "pkg_pstore_testdata_7530486857247_dmesg.txt"
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([], store, telemetry_logs=[(xid, "gpu-7"), (mem, "h-2"), (pstore, "h-3")])
        by_host = dict(rows(store, "SELECT host_id, count(*) FROM telemetry GROUP BY host_id"))
        xids = rows(store, "SELECT detail FROM telemetry WHERE kind = 'xid' AND host_id = 'gpu-7'")
        crashes = rows(store, "SELECT host_id, source, captured_at, signature FROM crashes")
        n_events = sum(by_host.values())
        assert summary.events_added == n_events > 0
        assert by_host["gpu-7"] >= 1 and by_host["h-2"] >= 1
        assert {json.loads(d)["code"] for (d,) in xids} == {119}
        # the pstore dmesg holds a kernel panic: a crash of h-3, counted
        assert any(h == "h-3" and s == "kernel-oops" for h, s, _, _ in crashes)
        assert all(at is not None for _, _, at, _ in crashes)
        # idempotent: same files again (ledger) and the same file touched (event ids)
        again = ingest([], store, telemetry_logs=[(xid, "gpu-7"), (mem, "h-2"), (pstore, "h-3")])
        assert again.files_skipped == 3 and again.events_added == 0
        copy = tmp_path / "xid.log"
        shutil.copy(xid, copy)
        first = ingest([], store, telemetry_logs=[(copy, "gpu-7")])
        counts = store.counts()
        os.utime(copy, (1, 1))  # changed in the ledger's eyes: read again
        second = ingest([], store, telemetry_logs=[(copy, "gpu-7")])
        assert first.events_added > 0 and first.crashes_added == 1
        assert second.files_skipped == 0 and second.events_added == 0
        assert second.crashes_added == 0 and second.crashes_existing == 1
        assert store.counts() == counts


def test_telemetry_log_kernel_crash_gets_the_log_time_and_host(tmp_path: Path) -> None:
    """A kernel oops in a journal-style log: crash of --host at the oops line's time."""
    log = tmp_path / "kern.log"
    body = _syz_body(SYZ / "323")
    stamp = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    edac = (
        "2024-03-01T11:59:58+00:00 node-9 kernel: EDAC MC0: 1 UE memory read error on "
        "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1 offset:0x0 grain:32 "
        "syndrome:0x0 - area:DRAM err_code:0000:009f socket:0 ha:0 channel_mask:2 rank:0)"
    )
    lines = [edac]
    lines += [f"{stamp.isoformat()} node-9 kernel: {line}" for line in body.splitlines()]
    log.write_text("\n".join(lines) + "\n")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([], store, telemetry_logs=[(log, "node-9")])
        assert summary.events_added == 1
        got = rows(store, "SELECT host_id, captured_at, source FROM crashes")
        # one crash (syzkaller's truth for 323); its two later reports are follow-ons
        assert len(got) == 1 and {h for h, _, _ in got} == {"node-9"}
        assert summary.follow_ons == 2
        assert {at.astimezone(UTC) for _, at, _ in got} == {stamp}
        ev = rows(store, "SELECT kind, severity, host_id, ts FROM telemetry")
        assert ev[0][:3] == ("edac_ue", "uncorrected", "node-9")


def test_debug_refuses_a_crash_from_a_kernel_log(tmp_path: Path) -> None:
    """A kernel log's crash has no core: ``debug`` says so in one line (exit
    2) instead of starting gdb on the text file."""
    log = tmp_path / "kern.log"
    body = _syz_body(SYZ / "323")
    log.write_text("".join(f"2024-03-01T12:00:00+00:00 node-9 kernel: {line}\n"
                           for line in body.splitlines()))
    with DuckDBStore(tmp_path / "store") as store:
        ingest([], store, telemetry_logs=[(log, "node-9")])
        crash_id = rows(store, "SELECT crash_id FROM crashes ORDER BY crash_id")[0][0]
    result = CliRunner().invoke(app, ["debug", crash_id, "--data-dir", str(tmp_path / "store")])
    assert result.exit_code == 2, result.output
    assert result.output == (f"coreepi: error: crash {crash_id} came from a kernel log, not a "
                             f"core: nothing to debug in gdb (coreepi dump {crash_id} writes "
                             "the kernel log)\n")


def test_cli_ingest_telemetry(tmp_path: Path) -> None:
    xid = GPUD / "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log"
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "--data-dir", str(tmp_path / "d"),
                                 "--telemetry", str(xid), "--host", "gpu-1"])
    assert result.exit_code == 0, result.output
    assert "telemetry events:" in result.output
    bad = runner.invoke(app, ["ingest", "--data-dir", str(tmp_path / "d"), "--telemetry",
                              str(xid), "--telemetry", str(xid), "--host", "a", "--host", "b",
                              "--host", "c"])
    assert bad.exit_code == 2
    nothing = runner.invoke(app, ["ingest", "--data-dir", str(tmp_path / "d")])
    assert nothing.exit_code == 2


# --------------------------------------------------------------------------
# hs_err and kernel logs as artifacts of a fleet's crashes/


def _syz_body(path: Path) -> str:
    """A syzkaller test file without its header lines."""
    return path.read_text(errors="replace").split("\n\n", 1)[1]


def test_fleet_crashes_take_hs_err_and_kernel_logs(tmp_path: Path) -> None:
    hs = HS_ERR / "dataset23.txt"
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    (tmp_path / "fleet" / "hosts.csv").write_text("host_id\nh1\nh2\n")
    shutil.copy(hs, crashes / "hs_err_pid25779.log")
    sidecar(crashes / "hs_err_pid25779.log.json", "h1", "2024-01-02T00:00:00Z")
    (crashes / "console.log").write_text(_syz_body(SYZ / "323"))
    sidecar(crashes / "console.log.json", "h2", "2024-01-03T00:00:00Z", rack="r7")
    (crashes / "quiet.log").write_text(_syz_body(SYZ / "647"))  # a kernel log, no crash
    sidecar(crashes / "quiet.log.json", "h2", "2024-01-03T00:00:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, jobs=2, store_cores=False)
        got = rows(store, "SELECT host_id, source, captured_at, signature, attributes, artifact "
                   "FROM crashes ORDER BY source, signature")
        by_source = {}
        for host, source, at, sig, attrs, artifact in got:
            by_source.setdefault(source, []).append((host, at, sig, json.loads(attrs), artifact))
        assert [h for h, *_ in by_source["hs_err"]] == ["h1"]
        # the sidecar's time wins over the log's own (2020-12-01 05:30:22 UTC), noted (#22)
        assert by_source["hs_err"][0][1].astimezone(UTC) == datetime(2024, 1, 2, tzinfo=UTC)
        assert [r.reason.split(":")[0] for r in summary.rejections
                if r.category == "time-mismatch"] == [
            "the log's own time 2020-12-01T05"]
        kernel = by_source["kernel-oops"]
        assert len(kernel) == 1 and {h for h, *_ in kernel} == {"h2"}  # 2 follow-ons
        assert all(a.get("rack") == "r7" for *_, a, _ in kernel)
        assert {at.astimezone(UTC) for _, at, *_ in kernel} == {datetime(2024, 1, 3, tzinfo=UTC)}
        assert summary.crashes_added == 2 and summary.follow_ons == 2
        assert any(r.category == "no-crash-found" for r in summary.rejections)
        expected = {inspect_file(crashes / "console.log")[0].signature.signature}
        assert {s for _, _, s, *_ in kernel} == expected


def test_hs_err_takes_the_sidecar_time_and_notes_a_far_log_time(tmp_path: Path) -> None:
    """#22: krashpad's dataset59 (``time: Mon Mar 29 13:26:46 2021``, ``timezone:
    CEST``) collected with a sidecar of 2024-05-28: the crash is at the
    sidecar's time, inside the exposure it was written for; the log's far
    time is one kept note. A log time within the skew limit is silent."""
    fleet = tmp_path / "fleet"
    (fleet / "crashes").mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id\njvm-04\njvm-05\n")
    (fleet / "exposure.csv").write_text(
        "host_id,start,end\njvm-04,2024-05-01T00:00:00Z,2024-06-01T00:00:00Z\n"
        "jvm-05,2021-03-01T00:00:00Z,2021-04-01T00:00:00Z\n")
    shutil.copy(HS_ERR / "dataset59.txt", fleet / "crashes" / "far.txt")
    sidecar(fleet / "crashes" / "far.txt.json", "jvm-04", "2024-05-28T07:55:00Z")
    shutil.copy(HS_ERR / "dataset59.txt", fleet / "crashes" / "near.txt")
    sidecar(fleet / "crashes" / "near.txt.json", "jvm-05", "2021-03-29T11:30:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([fleet], store, store_cores=False)
        got = dict(rows(store, "SELECT host_id, captured_at FROM crashes"))
    assert {h: at.astimezone(UTC) for h, at in got.items()} == {
        "jvm-04": datetime(2024, 5, 28, 7, 55, tzinfo=UTC),
        "jvm-05": datetime(2021, 3, 29, 11, 30, tzinfo=UTC)}
    notes = [(Path(r.file).name, r.reason, r.action) for r in summary.rejections
             if r.category == "time-mismatch"]
    assert notes == [("far.txt", "the log's own time 2021-03-29T11:26:46+00:00 is "
                      "1,156 days (3.2 years) away from the sidecar's captured_at "
                      "2024-05-28T07:55:00+00:00: the sidecar's is kept", "kept")]
    assert not [r for r in summary.rejections if r.category == "outside-exposure"]


def test_kernel_log_keeps_its_own_far_time_and_says_so(tmp_path: Path) -> None:
    """breaker4 #29: gpud's dmesg (its WARNING stamped 2025-02-23 16:24)
    picked up with a sidecar of 2024-05-22 keeps its own time, as a kernel
    log's reports do, and says how far it lies from the sidecar's (in days,
    not a Python timedelta): the crash may fall outside the host's exposure."""
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    (tmp_path / "fleet" / "hosts.csv").write_text("host_id\ng-01\n")
    shutil.copy(GPUD / "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log",
                crashes / "dmesg.log")
    sidecar(crashes / "dmesg.log.json", "g-01", "2024-05-22T00:00:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, store_cores=False)
        (own,) = [at.astimezone(UTC) for (at,) in rows(store, "SELECT captured_at FROM crashes")]
    assert own.date().isoformat() == "2025-02-23"
    notes = [(Path(r.file).name, r.reason, r.action) for r in summary.rejections
             if r.category == "time-mismatch"]
    days = (own - datetime(2024, 5, 22, tzinfo=UTC)).total_seconds() / 86400
    assert notes == [("dmesg.log", f"the log's own time {own.isoformat()} is {days:,.1f} days "
                      "away from the sidecar's captured_at 2024-05-22T00:00:00+00:00: "
                      "the log's own is kept", "kept")]


def test_sigbus_mceerr_crash_becomes_a_telemetry_event(tmp_path: Path) -> None:
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    report = CrashReport(
        crash_id="c0ffee", captured_at=datetime(2024, 5, 1, 3, 0, tzinfo=UTC), host_id="h-mce",
        source=Source.ELF_CORE,
        signal=SignalInfo(number=7, name="SIGBUS", si_code=4, si_code_name="BUS_MCEERR_AR",
                          fault_address=0x7F0000001000),
        analysis={"analyzer_version": "test"},
    )
    report.process.pid, report.process.comm = 4242, "svc"
    (crashes / "r.json").write_text(report.model_dump_json())
    plain = report.model_copy(update={"crash_id": "plain"})
    plain.signal = SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR")
    (crashes / "p.json").write_text(plain.model_dump_json())
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([crashes], store)
        ev = rows(store, "SELECT kind, host_id, ts, severity, hardware_indicative FROM telemetry")
        assert summary.events_added == 1
        assert ev == [("sigbus_mce", "h-mce", ev[0][2], "uncorrected", True)]
        assert ev[0][2].astimezone(UTC) == report.captured_at
        assert ingest([crashes], store).events_added == 0


# --------------------------------------------------------------------------
# an hs_err log and a core of the same pid: one crash


def _elfutils_core(tmp: Path) -> Path:
    if ELFCORES is None:
        pytest.skip(shared_missing("elf-cores-elfutils"))
    core = tmp / "backtrace.core"
    with bz2.open(ELFCORES / "backtrace.x86_64.core.bz2") as src, open(core, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return core


def test_core_and_hs_err_of_the_same_pid_are_one_crash(tmp_path: Path) -> None:
    """A real core (elfutils) + a real hs_err log (krashpad) given the core's pid."""
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    core = _elfutils_core(crashes)
    (pid,) = {r.process.pid for r in inspect_file(core)}
    text = (HS_ERR / "dataset26.txt").read_text(errors="replace")
    hs = crashes / f"hs_err_pid{pid}.log"
    hs.write_text(re.sub(r"\b92333\b", str(pid), text))
    (hs_report,) = inspect_file(hs)
    assert hs_report.process.pid == pid and hs_report.captured_at is not None
    core_time = hs_report.captured_at + timedelta(minutes=3)
    sidecar(crashes / "backtrace.core.json", "h1", core_time, app_version="9.1")
    sidecar(crashes / f"{hs.name}.json", "h1", core_time)
    # another process of the same host: not paired
    other = crashes / "other_hs_err.log"
    other.write_text(text)
    sidecar(crashes / "other_hs_err.log.json", "h1", core_time)
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([crashes], store, jobs=3, store_cores=False)
        assert store.counts()["crashes"] == 2
        assert summary.crashes_paired == 1
        (merged,) = [store.get_report(c) for (c,) in rows(
            store, "SELECT crash_id FROM crashes WHERE source = 'elf-core'")]
        assert merged is not None
        assert merged.runtime.kind == "jvm" and merged.runtime.version == hs_report.runtime.version
        assert merged.runtime.frames
        assert merged.attributes["artifacts"] == "elf-core+hs_err"
        names = {p.name for p in merged.phenotypes}
        assert {p.name for p in hs_report.phenotypes} <= names
        assert "jvm-crash-in-native-library" in names
        assert merged.threads and merged.modules  # the core's native analysis is kept
        assert any("two artifacts" in w for w in merged.analysis.warnings)
        (attrs,) = rows(store, "SELECT attributes FROM crashes WHERE source = 'elf-core'")[0]
        assert json.loads(attrs)["app_version"] == "9.1"
        # re-ingest: nothing new, nothing duplicated
        again = ingest([crashes], store, jobs=3, store_cores=False)
        assert again.crashes_added == 0 and store.counts()["crashes"] == 2
    # outside the window: two crashes
    sidecar(crashes / "backtrace.core.json", "h1", core_time + PAIR_WINDOW + timedelta(minutes=5))
    other.unlink()
    (crashes / "other_hs_err.log.json").unlink()
    with DuckDBStore(tmp_path / "store2") as store:
        ingest([crashes], store, jobs=3, store_cores=False)
        assert store.counts()["crashes"] == 2


# --- a real JVM crash: hs_err_pid<PID>.log and core.<PID> of the same process

CRASH_JAVA = """
public class Crash {
  public static void main(String[] a) throws Exception {
    java.lang.reflect.Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
    f.setAccessible(true);
    ((sun.misc.Unsafe) f.get(null)).putAddress(0L, 42L);
  }
}
"""


@pytest.fixture(scope="module")
def jvm_crash(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from corefactory import (
        CrasherUnavailable,
        core_pattern_override,
        kernel_cores_unavailable_reason,
    )

    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("java/javac not installed: no real JVM crash to make")
    reason = kernel_cores_unavailable_reason()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("jvm")
    (d / "Crash.java").write_text(CRASH_JAVA)
    subprocess.run([javac, "-XDignore.symbol.file", "-nowarn", "Crash.java"], cwd=d, check=True,
                   capture_output=True, timeout=120)
    try:
        with core_pattern_override(f"{d}/core.%p"):
            subprocess.run(
                ["sh", "-c", (f"ulimit -c unlimited; exec {java} -Xmx16m -Xms16m -Xint "
                              "-XX:+UseSerialGC -XX:-UsePerfData -Xshare:off "
                              f"-XX:+CreateCoredumpOnCrash -XX:ErrorFile={d}/hs_err_pid%p.log "
                              "Crash")],
                cwd=d, capture_output=True, timeout=120, check=False)  # the JVM dies: rc != 0
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))
    cores, logs = sorted(d.glob("core.*")), sorted(d.glob("hs_err_pid*.log"))
    if not cores or not logs:
        pytest.skip(f"the JVM left no core or no hs_err log in {d}")
    return cores[0], logs[0]


@pytest.mark.parametrize("core_first", [True, False])
def test_real_jvm_crash_hs_err_and_core_one_crash_either_order(
    tmp_path: Path, jvm_crash: tuple[Path, Path], core_first: bool
) -> None:
    core, log = jvm_crash
    pid = int(core.name.split(".")[1])
    (hs_report,) = inspect_file(log)
    when = hs_report.captured_at or datetime(2024, 6, 1, 8, 0, 1, tzinfo=UTC)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    first, second = (a, b) if core_first else (b, a)
    try:  # a hard link (a symlink out of the directory would be refused unread)
        os.link(core, first / core.name)
    except OSError:  # another file system
        shutil.copy(core, first / core.name)
    sidecar(first / f"{core.name}.json", "jvm-host", when + timedelta(seconds=2))
    shutil.copy(log, second / log.name)
    sidecar(second / f"{log.name}.json", "jvm-host", when)
    with DuckDBStore(tmp_path / "store") as store:
        ingest([a], store, jobs=1, store_cores=False)  # one run per artifact
        ingest([b], store, jobs=1, store_cores=False)
        (crash_id,) = {c for (c,) in rows(store, "SELECT crash_id FROM crashes")}
        report = store.get_report(crash_id)
    assert report is not None
    assert report.process.pid == pid
    # the pair id (host + pid + 10-minute bucket) of the first artifact ingested:
    # the same whichever came first unless the two times straddle a bucket
    # boundary (test_real_jvm_crash_straddling_a_bucket_boundary_is_one_crash);
    # before, this compared with the bucket of the merged (earliest) time and
    # failed when `when` and `when + 2 s` fell into two buckets
    first_at = when + timedelta(seconds=2) if core_first else when
    probe = report.model_copy(update={"source": Source.HS_ERR, "captured_at": first_at})
    assert crash_id == pair_crash_id(probe)
    assert report.source is Source.ELF_CORE and report.modules and report.threads
    assert report.runtime.kind == "jvm" and report.runtime.vendor
    assert report.runtime.frames and report.runtime.version and "17" in report.runtime.version
    # the JVM aborts after writing hs_err: the pair has the fatal signal and the
    # problematic frame, not the abort
    assert report.signal is not None and report.signal.name == "SIGSEGV"
    assert report.signature is not None and report.signature.signature.startswith("Unsafe_PutLong")
    assert "null-deref" in {p.name for p in report.phenotypes}
    assert report.attributes["artifacts"] == "elf-core+hs_err"


def _straddling_pair(tmp_path: Path, core: Path, log: Path, core_side: int,
                     runs: str) -> tuple[CrashReport, datetime, datetime]:
    """Ingest ``core`` and ``log`` with sidecar times 1 s either side of a
    10-minute bucket boundary of :func:`pair_crash_id` (the core's on side
    ``core_side``), in the order ``runs`` names; the one crash stored, and
    the two times."""
    boundary = datetime(2024, 6, 1, 8, 10, 0, tzinfo=UTC)
    assert int(boundary.timestamp()) % int(PAIR_WINDOW.total_seconds()) == 0
    core_at = boundary + timedelta(seconds=core_side)
    log_at = boundary - timedelta(seconds=core_side)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(core, a / core.name)
    sidecar(a / f"{core.name}.json", "jvm-host", core_at)
    shutil.copy(log, b / log.name)
    sidecar(b / f"{log.name}.json", "jvm-host", log_at)
    order = {"one run": [[a, b]], "core first": [[a], [b]], "hs_err first": [[b], [a]]}[runs]
    with DuckDBStore(tmp_path / "store") as store:
        summaries = [ingest(paths, store, jobs=2, store_cores=False) for paths in order]
        ids = [c for (c,) in rows(store, "SELECT crash_id FROM crashes")]
        assert len(ids) == 1, ids
        report = store.get_report(ids[0])
        # idempotent: both artifacts again (new paths, same content): nothing added
        for d in (a, b):
            for f in list(d.iterdir()):
                shutil.copy(f, d / f"again-{f.name}")
        ingest([a, b], store, jobs=2, store_cores=False)
        assert [c for (c,) in rows(store, "SELECT crash_id FROM crashes")] == ids
    assert sum(s.crashes_paired for s in summaries) == 1
    assert report is not None and report.attributes["artifacts"] == "elf-core+hs_err"
    assert report.captured_at == min(core_at, log_at)
    return report, core_at, log_at


RUNS = ["one run", "core first", "hs_err first"]


@pytest.mark.parametrize("core_side", [-1, 1])
@pytest.mark.parametrize("runs", RUNS)
def test_real_jvm_crash_straddling_a_bucket_boundary_is_one_crash(
    tmp_path: Path, jvm_crash: tuple[Path, Path], core_side: int, runs: str
) -> None:
    """Pairing is by time window, not by the id's bucket: the two times 1 s
    either side of a bucket boundary are one crash in every arrival order,
    with the pair id of the first artifact stored (pairing.py: an id cannot
    know the time of an artifact not yet seen)."""
    core, log = jvm_crash
    report, core_at, log_at = _straddling_pair(tmp_path, core, log, core_side, runs)
    if runs != "one run":
        first = Source.ELF_CORE if runs == "core first" else Source.HS_ERR
        at = core_at if first is Source.ELF_CORE else log_at
        probe = report.model_copy(update={"source": Source.HS_ERR, "captured_at": at})
        assert report.crash_id == pair_crash_id(probe)


@pytest.mark.parametrize("core_side", [-1, 1])
@pytest.mark.parametrize("runs", RUNS)
def test_core_and_hs_err_straddling_a_bucket_boundary_are_one_crash(
    tmp_path: Path, core_side: int, runs: str
) -> None:
    """As above with a core that is no JVM's (elfutils) and a real hs_err log
    given its pid: runs wherever the shared test data is, no java needed."""
    crashes = tmp_path / "in"
    crashes.mkdir()
    core = _elfutils_core(crashes)
    (pid,) = {r.process.pid for r in inspect_file(core)}
    log = crashes / f"hs_err_pid{pid}.log"
    text = (HS_ERR / "dataset26.txt").read_text(errors="replace")
    log.write_text(re.sub(r"\b92333\b", str(pid), text))
    report, _, _ = _straddling_pair(tmp_path, core, log, core_side, runs)
    assert report.process.pid == pid and report.runtime.kind == "jvm"


def test_sigbus_mceerr_crash_sent_over_the_api_is_a_telemetry_event_too(tmp_path: Path) -> None:
    """One ingest path: a report received by the server's intake gives the
    same sigbus_mce event as the same report in a fleet directory."""
    from coreepi.ingest.intake import Outcome, accept_reports

    report = CrashReport(
        crash_id="c0ffee", captured_at=datetime(2024, 5, 1, 3, 0, tzinfo=UTC), host_id="h-mce",
        source=Source.ELF_CORE,
        signal=SignalInfo(number=7, name="SIGBUS", si_code=4, si_code_name="BUS_MCEERR_AR"),
        analysis={"analyzer_version": "test"},
    )
    with DuckDBStore(tmp_path / "store") as store:
        assert accept_reports(store, [report]) == [Outcome.CREATED]
        assert rows(store, "SELECT kind, host_id FROM telemetry") == [("sigbus_mce", "h-mce")]
        assert accept_reports(store, [report]) == [Outcome.DUPLICATE]
        assert rows(store, "SELECT count(*) FROM telemetry") == [(1,)]


def test_a_binary_telemetry_file_is_refused_and_the_rest_ingested(tmp_path: Path) -> None:
    """Before: ``--telemetry`` took a binary file (an executable, a core) as a
    log, found nothing in it and exited 0."""
    import sys

    xid = GPUD / "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log"
    binary = tmp_path / "bash.bin"
    shutil.copyfile(sys.executable, binary)
    noise = tmp_path / "noise.log"
    noise.write_bytes(bytes(range(256)) * 64)
    data = tmp_path / "d"
    done = subprocess.run(
        [sys.executable, "-m", "coreepi", "ingest", "--data-dir", str(data), "--telemetry",
         str(binary), "--telemetry", str(xid), "--telemetry", str(noise), "--host", "gpu-1",
         "--host", "gpu-1", "--host", "gpu-2"], capture_output=True, text=True, timeout=300,
        check=False)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "not a text log" in line]
    assert lines == [
        f"coreepi: {binary}: not a text log: an ELF file (a core? coreepi inspect reads "
        "cores); not ingested",
        f"coreepi: {noise}: not a text log: binary content; not ingested"]
    assert "telemetry events:" in done.stdout
    with DuckDBStore(data, read_only=True) as store:  # the readable log is in
        assert rows(store, "SELECT DISTINCT host_id FROM telemetry") == [("gpu-1",)]
        rejected = rows(store, "SELECT file, category FROM ingest_rejections "
                        "WHERE category = 'not-a-log' ORDER BY file")
    assert rejected == sorted([(str(binary), "not-a-log"), (str(noise), "not-a-log")])
