"""Spool invariants and logs with stray bytes (issue 15, holes 5 and 6): a queued
entry without its report is quarantined with a reason and shown by ``agent status``;
edge-analysis scratch counts against the quota before it is written; a NUL byte in
the first KiB does not make a kernel or hs_err log "not a log". Each failed before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from capturekit import kernel_args, queued, report_of, run_collect, write_config
from fakeserver import TOKEN, FakeServer
from servekit import free_port

from coreepi.capture.agent import spool_status
from coreepi.capture.config import load_config
from coreepi.capture.spool import Spool
from coreepi.ingest.artifacts import ArtifactKind, inspect_file, sniff
from coreepi.parse.sniff import text_head

DATA = Path(__file__).parent / "data"
KERNEL_LOG = DATA / "kernel-wild" / "030-x86_64-gpf-untimestamped.log"
HS_ERR = DATA / "vendored" / "jvm-hs_err-krashpad" / "dataset1.txt"


def _config(tmp_path: Path, port: int, **tables: dict[str, object]) -> Path:
    (tmp_path / "token").write_text(TOKEN + "\n")
    return write_config(tmp_path, {"server_url": f"http://127.0.0.1:{port}",
                                   "token_file": str(tmp_path / "token")}, **tables)


def test_entry_without_report_is_quarantined_with_a_reason_and_shown(tmp_path: Path) -> None:
    port = free_port()
    config = _config(tmp_path, port)
    for i in range(2):
        done = run_collect(config, kernel_args(when=1_700_000_000 + i, comm=f"app{i}"),
                           data=b"\x7fELF" + bytes(50_000))
        assert done.returncode == 0, done.stderr
    spool = tmp_path / "spool"
    broken, good = queued(spool)
    (broken / "report.json").unlink()
    status = spool_status(load_config(config))
    assert status["queued"] == 1 and status["stuck"] == [broken.name], status
    with FakeServer(port) as server:
        run = subprocess.run([sys.executable, "-m", "coreepi", "agent", "--config", str(config),
                              "--once"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert list(server.created) == [good.name]
    refused = spool / "quarantine" / broken.name / "REFUSED"
    assert refused.read_text() == "unshippable: a directory without report.json in the queue\n"
    status = spool_status(load_config(config))
    assert (status["queued"], status["quarantined"], status["stuck"]) == (0, 1, [])
    assert status["spool_bytes"] == 0
    assert f"quarantined {broken.name}: unshippable" in (spool / "agent.log").read_text()


def test_reserved_scratch_counts_before_it_is_written(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    with spool.reserve("analysis", 5_000_000, quota=6_000_000) as scratch:
        assert scratch is not None and scratch.is_dir()
        assert spool.usage_bytes() == 5_000_000  # nothing written yet
        with spool.reserve("other", 2_000_000, quota=6_000_000) as second:
            assert second is None  # 5 MB + 2 MB > 6 MB
        (scratch / "core").write_bytes(bytes(6_000_000))
        assert spool.usage_bytes() == 6_000_000 + len("5000000")
    assert spool.usage_bytes() == 0 and list(spool.tmp.iterdir()) == []


def test_edge_analysis_scratch_beyond_the_quota_is_not_written(tmp_path: Path) -> None:
    # a 25 MB core of zeros compresses to a few KB: it fits a 3 MB quota as core.zst,
    # but its decompressed copy for edge analysis would not
    config = _config(tmp_path, free_port(), spool={"max_bytes": 3_000_000},
                     collect={"edge_analysis_seconds": 30, "edge_analysis_detach": False})
    done = run_collect(config, kernel_args(), data=b"\x7fELF" + bytes(25_000_000))
    assert done.returncode == 0, done.stderr
    (entry,) = queued(tmp_path / "spool")
    warnings = report_of(entry)["analysis"]["warnings"]
    assert any(w.startswith("edge analysis skipped: its 25000004 bytes of scratch do not fit "
                            "the spool quota (3000000 bytes)") for w in warnings), warnings


@pytest.mark.parametrize("where", [0, 100, 3000])
def test_nul_byte_in_a_kernel_log_keeps_it_a_kernel_log(tmp_path: Path, where: int) -> None:
    clean = inspect_file(KERNEL_LOG)
    data = KERNEL_LOG.read_bytes()
    log = tmp_path / "nul.log"
    log.write_bytes(data[:where] + b"\x00\x00\x01" + data[where:])
    assert sniff(log) == (ArtifactKind.KERNEL_LOG, None)
    reports = inspect_file(log)
    assert [r.signature.signature for r in reports if r.signature] == \
        [r.signature.signature for r in clean if r.signature]


def test_nul_byte_in_an_hs_err_log_keeps_it_an_hs_err_log(tmp_path: Path) -> None:
    data = HS_ERR.read_bytes()
    log = tmp_path / "hs_err_pid1.log"
    log.write_bytes(data[:200] + b"\x00" + data[200:])
    assert sniff(log) == (ArtifactKind.HS_ERR, None)
    (report,) = inspect_file(log)
    (clean,) = inspect_file(HS_ERR)
    assert report.signal is not None and clean.signal is not None
    assert report.signal.name == clean.signal.name


def test_binary_heads_are_still_not_text() -> None:
    assert text_head(b"\x7fELF\x02\x01\x01" + b"Call Trace:\n" * 10) is None
    assert text_head(bytes(4096)) is None  # nothing but NUL bytes
    assert text_head(bytes(range(1, 32)) * 20 + b"Kernel panic") is None
    assert text_head(b"[ 1.0] BUG: x\x00\n") == b"[ 1.0] BUG: x\n"
