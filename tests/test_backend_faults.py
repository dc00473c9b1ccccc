"""The fault run of ``benchmarks/bench_backend.py``, small: two replicas, two
workers, PostgreSQL (durable) and moto's S3 server, real processes on
127.0.0.1, agents posting heartbeats, crash reports and cores while a replica
and a worker (mid-analysis) are killed with SIGKILL, PostgreSQL is restarted
and the object store refuses writes. Then every acknowledged crash must be
stored once, every acknowledged heartbeat stored, every acknowledged core
analysed exactly once, and no job dead."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fleetfactory import tools_missing

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_fault_run_loses_nothing_and_analyses_each_core_once(tmp_path: Path) -> None:
    if reason := tools_missing():
        pytest.skip(reason)
    pytest.importorskip("pgcluster").find_pg_bin()
    out = tmp_path / "faults.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_backend.py"), "--agents", "8",
         "--seconds", "10", "--pause", "0.2", "--crash-share", "0.3", "--core-every", "12",
         "--faults", "--fault-gap", "2", "--s3-outage", "8", "--stale-after", "5",
         "--json-out", str(out)],
        capture_output=True, text=True, timeout=840, check=False)
    assert out.exists(), done.stderr[-3000:]
    result = json.loads(out.read_text())
    checks = result["checks"]
    faults = [f["fault"] for f in result["faults"]]
    assert any(f.startswith("kill -9 replica") for f in faults)
    assert any(f.startswith("kill -9 worker") and "mid-analysis" in f for f in faults), faults
    assert "PostgreSQL up" in faults and "object store back" in faults
    assert result["unsent_after_drain"] == 0
    assert checks["crashes_accepted"] > 0 and checks["cores_accepted"] > 0
    assert checks["crashes_lost"] == 0 and checks["heartbeats_lost"] == 0
    assert checks["crash_rows_duplicated"] == 0
    assert checks["cores_analysed_exactly_once"] == checks["cores_accepted"]
    assert checks["cores_job_not_done"] == 0 and not checks["job_counts"].get("dead")
    assert checks["rejected_4xx"] == 0, checks["rejected_examples"]
    assert checks["ok"] and done.returncode == 0, done.stderr[-3000:]
