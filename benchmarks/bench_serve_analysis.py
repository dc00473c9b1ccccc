#!/usr/bin/env python3
"""CPU per core of ``coreepi serve``'s in-process analysis queue, cold (a new
Python per core, ``ServeConfig(warm_analysis=False)``) against warm (each
worker thread forks its children from a pre-imported zygote, the default).

The same N real cores of the test crasher (``tests/fleetfactory.py``), each
sent as a node agent sends it (``POST /api/v1/crashes`` without frames, then
``PUT …/core``) to a fresh embedded store served in-process (FastAPI's
TestClient), one analysis thread; the clock runs from the server's start to
its stop (zygote start and close included), after every job is done.
Measured: CPU seconds of this process (the server: uploads, the queue, the
writes) plus every descendant it waited for (the analysis children, the
zygote and its children), divided by N; cold and warm alternated ``--rounds``
times, medians. CPU time, so fair under load; the wall time printed beside it
is not.

Not a test. Run by hand::

    .venv/bin/python benchmarks/bench_serve_analysis.py [--cores 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fleetfactory import CoreSet  # noqa: E402 (tests/ on the path first)
from servekit import edge_report, wait_for_jobs, zstd_bytes  # noqa: E402

from coreepi.ingest.artifacts import inspect_file  # noqa: E402
from coreepi.model.report import CrashReport  # noqa: E402
from coreepi.serve import ServeConfig, create_app, create_token  # noqa: E402
from coreepi.store import DuckDBStore  # noqa: E402


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for descendants."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def serve_once(root: Path, sent: list[tuple[CrashReport, bytes]], warm: bool) -> tuple[float, float]:
    """CPU and wall seconds of one server that takes and analyses ``sent``."""
    from fastapi.testclient import TestClient

    with DuckDBStore(root) as store:
        token = create_token(store, ["ingest"], "bench")[1]
        auth = {"authorization": f"Bearer {token}"}
        config = ServeConfig(analysis_jobs=1, analysis_timeout_seconds=300, warm_analysis=warm)
        c0, w0 = _cpu(), time.perf_counter()
        with TestClient(create_app(store, config)) as client:
            for report, body in sent:
                r = client.post("/api/v1/crashes", content=report.model_dump_json(),
                                headers={**auth, "content-type": "application/json"})
                assert r.status_code == 201, r.text
                r = client.put(f"/api/v1/crashes/{report.crash_id}/core", content=body,
                               headers={**auth, "content-type": "application/zstd"})
                assert r.status_code == 201 and r.json()["queued"], r.text
            counts = wait_for_jobs(store.job_counts, timeout=1800)
        cpu, wall = _cpu() - c0, time.perf_counter() - w0
        assert counts["done"] == len(sent), counts
        assert store.count_crashes(core_status="stored") == len(sent)
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cores", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-analysis-") as tmp:
        cores = CoreSet(Path(tmp) / "cores", args.cores).cores
        sent = [(edge_report(inspect_file(core)[0], minutes=i), zstd_bytes(core))
                for i, core in enumerate(cores)]
        runs: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        for n in range(args.rounds):
            for label in ("cold", "warm"):
                runs[label].append(serve_once(Path(tmp) / f"{label}{n}", sent, label == "warm"))
    for label, got in runs.items():
        cpu = statistics.median(c for c, _ in got) / len(sent)
        wall = statistics.median(w for _, w in got)
        print(f"{label}: {cpu:.3f} s CPU per core (server + analysis children, zygote start "
              f"included), {len(sent)} cores, median of {len(got)}; wall {wall:.1f} s (under load)")


if __name__ == "__main__":
    main()
