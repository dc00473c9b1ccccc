"""`coreepi collect` as a real process fed a real core (gdb gcore) through a
real pipe: edge analysis, /proc context, truncation, rate limits, quota,
policy, atomic spool under kill -9, and never failing the kernel's pipe."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard
from capturekit import (
    collect_cmd,
    kernel_args,
    queued,
    report_of,
    run_collect,
    wait_ready,
    write_config,
)
from corefactory import Crash

from coreepi.capture.spool import Spool
from coreepi.model.report import CrashReport


def _decompressed(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return zstandard.ZstdDecompressor().stream_reader(fh).read()


@pytest.fixture()
def live_process() -> subprocess.Popen[bytes]:
    """A real process whose /proc the collector reads (stands in for the
    crashed one, which the kernel keeps alive while it dumps)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "APP_VERSION": "2.4.1",
           "SECRET_TOKEN": "hunter2"}
    proc = subprocess.Popen(["sleep", "300"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_real_core_through_pipe_with_edge_analysis(
    tmp_path: Path, get_crash: Callable[[str], Crash], live_process: subprocess.Popen[bytes]
) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, collect={"edge_analysis_seconds": 120})
    done = run_collect(config, kernel_args(pid=live_process.pid, comm="null_deref"), crash.core)
    assert done.returncode == 0, done.stderr
    [entry] = queued(tmp_path / "spool")
    report = CrashReport.model_validate(report_of(entry))
    # the core, whole, zstd-compressed
    assert report.core.stored and not report.core.truncated
    assert report.core.size_bytes == crash.core.stat().st_size
    assert _decompressed(entry / "core.zst") == crash.core.read_bytes()
    assert report.core.compressed_size_bytes == (entry / "core.zst").stat().st_size
    # edge analysis: the same analyzer as inspect
    assert report.signal is not None and report.signal.name == "SIGSEGV"
    assert report.signal.si_code_name == "SEGV_MAPERR"
    assert report.signature is not None and report.signature.signature
    assert report.crashed_thread is not None and report.crashed_thread.frames
    assert report.analysis.duration_seconds is not None
    # context from /proc/<pid> and the kernel's arguments
    assert report.process.pid == live_process.pid
    assert report.process.cmdline == ["sleep", "300"]
    assert report.attributes["env.APP_VERSION"] == "2.4.1"
    assert not any("SECRET" in k for k in report.attributes)
    assert report.captured_at is not None and int(report.captured_at.timestamp()) == 1_700_000_000
    # host facts
    assert report.host_id and report.boot_id
    assert report.host.kernel == os.uname().release
    assert report.host.extra.get("machine_id") or report.host_id
    assert not list((tmp_path / "spool" / "tmp").iterdir())


def test_detached_edge_analysis_releases_the_pipe_first(
    tmp_path: Path, get_crash: Callable[[str], Crash]
) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, collect={"edge_analysis_seconds": 120,
                                             "edge_analysis_detach": True})
    started = time.monotonic()
    done = run_collect(config, kernel_args(comm="null_deref"), crash.core)
    assert done.returncode == 0
    [entry] = queued(tmp_path / "spool")
    returned = time.monotonic() - started
    [entry] = wait_ready(tmp_path / "spool", 1)
    report = report_of(entry)
    assert report["signature"]["signature"], report["analysis"]
    assert returned < 30


def test_edge_analysis_timeout_ships_core_for_central_analysis(
    tmp_path: Path, get_crash: Callable[[str], Crash]
) -> None:
    crash = get_crash("threads50")
    config = write_config(tmp_path, collect={"edge_analysis_seconds": 0.01})
    assert run_collect(config, kernel_args(comm="threads50"), crash.core).returncode == 0
    [entry] = queued(tmp_path / "spool")
    report = report_of(entry)
    assert report["core"]["stored"] and (entry / "core.zst").exists()
    assert report["signature"] is None and report["threads"] == []
    assert any("edge analysis timeout" in w and "central analysis" in w
               for w in report["analysis"]["warnings"])


def test_truncated_core_keeps_prefix_and_counts_all(
    tmp_path: Path, get_crash: Callable[[str], Crash]
) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, collect={"max_core_bytes": 100_000})
    run_collect(config, kernel_args(), crash.core)
    [entry] = queued(tmp_path / "spool")
    core = report_of(entry)["core"]
    assert core["truncated"] is True and core["stored"] is True
    assert core["size_bytes"] == crash.core.stat().st_size
    assert _decompressed(entry / "core.zst") == crash.core.read_bytes()[:100_000]


def test_rate_limit_drops_core_keeps_report(
    tmp_path: Path, get_crash: Callable[[str], Crash]
) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, rate_limit={"executable_burst": 2,
                                                "executable_per_hour": 0.001})
    for i in range(3):
        run_collect(config, kernel_args(pid=0, when=1_700_000_000 + i, comm="flappy"), crash.core)
    other = kernel_args(pid=0, when=1_700_000_100, comm="steady")
    run_collect(config, other, crash.core)
    reports = [report_of(e) for e in queued(tmp_path / "spool")]
    assert len(reports) == 4  # every crash counted
    by_exe: dict[str, list[dict[str, object]]] = {}
    for r in reports:
        by_exe.setdefault(r["process"]["comm"], []).append(r["core"])
    flappy = by_exe["flappy"]
    assert sum(c["stored"] for c in flappy) == 2
    [dropped] = [c for c in flappy if not c["stored"]]
    assert dropped["dropped_reason"].startswith("rate-limit: executable flappy")
    assert dropped["size_bytes"] == crash.core.stat().st_size  # drained and counted
    assert by_exe["steady"][0]["stored"]


def test_host_rate_limit(tmp_path: Path, get_crash: Callable[[str], Crash]) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, rate_limit={"host_burst": 1, "host_per_hour": 0.001})
    for i in range(2):
        run_collect(config, kernel_args(when=1_700_000_000 + i, comm=f"exe{i}"), crash.core)
    cores = sorted((report_of(e)["core"] for e in queued(tmp_path / "spool")),
                   key=lambda c: c["stored"])
    assert cores[0]["dropped_reason"].startswith("rate-limit: host")
    assert cores[1]["stored"]


def test_spool_quota(tmp_path: Path, get_crash: Callable[[str], Crash]) -> None:
    crash = get_crash("null_deref")
    full = write_config(tmp_path / "a" if (tmp_path / "a").mkdir() is None else tmp_path,
                        spool={"max_bytes": 1})
    Spool(tmp_path / "a" / "spool")
    (tmp_path / "a" / "spool" / "queue" / "x").mkdir()
    (tmp_path / "a" / "spool" / "queue" / "x" / "filler").write_bytes(b"12")
    run_collect(full, kernel_args(), crash.core)
    [entry] = queued(tmp_path / "a" / "spool")
    assert report_of(entry)["core"]["dropped_reason"].startswith("spool-quota: spool holds")
    # the quota runs out while the core is being written
    (tmp_path / "b").mkdir()
    tight = write_config(tmp_path / "b", spool={"max_bytes": 20_000})
    run_collect(tight, kernel_args(), crash.core)
    [entry] = queued(tmp_path / "b" / "spool")
    core = report_of(entry)["core"]
    assert core["dropped_reason"].startswith("spool-quota: compressed core passed")
    assert not (entry / "core.zst").exists() and core["stored"] is False


def test_policy_excludes_signal_and_executable(
    tmp_path: Path, get_crash: Callable[[str], Crash]
) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, collect={"exclude_signals": ["SIGABRT"],
                                             "exclude_executables": ["noisy*"]})
    run_collect(config, kernel_args(signal=6, comm="a", when=1), crash.core)
    run_collect(config, kernel_args(signal=11, comm="noisy-daemon", when=2), crash.core)
    run_collect(config, kernel_args(signal=11, comm="ok", when=3), crash.core)
    reasons = sorted(str(report_of(e)["core"]["dropped_reason"]) for e in queued(tmp_path / "spool"))
    assert reasons == ["None", "policy: executable noisy-daemon in exclude_executables",
                       "policy: signal SIGABRT in exclude_signals"]


def test_signature_budget_keeps_first_n_cores(
    tmp_path: Path, get_crash: Callable[[str], Crash]
) -> None:
    crash = get_crash("null_deref")
    config = write_config(tmp_path, collect={"edge_analysis_seconds": 120,
                                             "cores_per_signature_per_day": 1,
                                             "max_frames_per_thread": 2})
    for i in range(2):
        run_collect(config, kernel_args(when=1_700_000_000 + i), crash.core)
    reports = [report_of(e) for e in queued(tmp_path / "spool")]
    assert len(reports) == 2
    assert all(r["signature"] for r in reports)
    assert sorted(r["core"]["stored"] for r in reports) == [False, True]
    [dropped] = [r for r in reports if not r["core"]["stored"]]
    assert dropped["core"]["dropped_reason"].startswith("signature-budget: 1 cores")
    assert all(len(t["frames"]) <= 2 for r in reports for t in r["threads"])


def test_kill_9_mid_write_leaves_nothing_to_ship(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    proc = subprocess.Popen(collect_cmd(config, kernel_args()), stdin=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.write(b"\x7fELF" + os.urandom(4 << 20))
    proc.stdin.flush()
    spool = tmp_path / "spool"
    deadline = time.monotonic() + 30
    while not any((spool / "tmp").glob("*/core.zst")) if (spool / "tmp").exists() else True:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    with pytest.raises(BrokenPipeError):
        proc.stdin.write(b"x" * (1 << 20))
        proc.stdin.flush()
    assert queued(spool) == []
    leftovers = list((spool / "tmp").iterdir())
    assert leftovers
    removed = Spool(spool).clean_tmp()
    assert sorted(removed) == sorted(p.name for p in leftovers)


def test_never_fails_the_pipe(tmp_path: Path) -> None:
    """Broken spool, garbage arguments: stdin is still read to the end, exit 0."""
    bad = tmp_path / "bad.toml"
    bad.write_text('spool_dir = "/proc/self/no-such-dir"\n')
    data = os.urandom(3 << 20)
    done = run_collect(bad, ["x", "y"], data=data)  # BrokenPipeError here if not drained
    assert done.returncode == 0
    assert b"collect failed" in done.stderr
    config = write_config(tmp_path)
    done = run_collect(config, ["not-a-pid", "-1"], data=b"not a core")
    assert done.returncode == 0
    [entry] = queued(tmp_path / "spool")
    report = report_of(entry)
    assert any("expected 10 arguments" in w for w in report["analysis"]["warnings"])
    # a comm that looks like an option is still an argument after `--`
    done = run_collect(config, kernel_args(comm="--help", when=5), data=b"x" * 1000)
    assert done.returncode == 0 and b"Usage" not in done.stdout
    assert len(queued(tmp_path / "spool")) == 2
