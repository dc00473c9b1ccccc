#!/usr/bin/env python3
"""What one group commit costs: the server's write functions
(:func:`coreepi.ingest.intake.accept_heartbeats` / ``accept_reports``, as
:class:`coreepi.serve.gateway.GroupCommit` calls them) on batches of 1 and of
``--batch`` items, on PostgreSQL (a throwaway cluster on 127.0.0.1 with fsync
and synchronous commit on) and on the DuckDB store (a data dir on the same disk).

Reported per store, kind and batch size: milliseconds per commit (wall and
this process's CPU; PostgreSQL's own CPU is in its processes, reported
apart) and the items per second one writer gets. A batch of 1 is what every
request would pay without group commit.

Usage::

    .venv/bin/python benchmarks/bench_commit.py [--batch 64] [--commits 40] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from bench_backend import cpu_seconds, postgres_pids  # noqa: E402
from pgcluster import PgCluster  # noqa: E402

from coreepi.ingest.intake import accept_heartbeats, accept_reports  # noqa: E402
from coreepi.model.heartbeat import Heartbeat  # noqa: E402
from coreepi.model.report import CrashReport  # noqa: E402

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Items:
    """Fresh heartbeats (each host's next minute) and crash reports."""

    def __init__(self) -> None:
        self.n = 0

    def heartbeats(self, k: int) -> list[Heartbeat]:
        out = []
        for _ in range(k):
            self.n += 1
            host, minute = f"node-{self.n % 500:04d}", self.n // 500
            start = T0 + timedelta(minutes=minute)
            out.append(Heartbeat(host_id=host, start=start, end=start + timedelta(minutes=1),
                                 load={"cpu": 0.5}))
        return out

    def reports(self, k: int) -> list[CrashReport]:
        out = []
        for _ in range(k):
            self.n += 1
            out.append(CrashReport.model_validate({
                "crash_id": f"{self.n:032x}", "host_id": f"node-{self.n % 500:04d}",
                "captured_at": T0 + timedelta(seconds=self.n), "source": "elf-core",
                "analysis": {"analyzer_version": "bench"},
                "signal": {"number": 11, "name": "SIGSEGV"}, "attributes": {"app_version": "1"}}))
        return out


def measure(store: Any, fn: Callable[[Any, list[Any]], Any], make: Callable[[int], list[Any]],
            batch: int, commits: int, server_pids: Callable[[], list[int]]) -> dict[str, float]:
    batches = [make(batch) for _ in range(commits)]
    fn(store, make(batch))  # warm: prepared plans, connections
    walls = []
    cpu0 = time.process_time()
    srv0 = sum(cpu_seconds(p) for p in server_pids())
    for items in batches:
        started = time.perf_counter()
        fn(store, items)
        walls.append(time.perf_counter() - started)
    cpu = (time.process_time() - cpu0) / commits
    srv = (sum(cpu_seconds(p) for p in server_pids()) - srv0) / commits
    return {"batch": batch, "ms_per_commit_median": round(1000 * statistics.median(walls), 2),
            "client_cpu_ms_per_commit": round(1000 * cpu, 2),
            "database_cpu_ms_per_commit": round(1000 * srv, 2),
            "items_per_s_one_writer": round(batch / statistics.median(walls), 0)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from coreepi.store import DirectoryBlobStore, DuckDBStore
    from coreepi.store.postgres_store import PostgresStore

    out: dict[str, Any] = {}
    tmp = Path(tempfile.mkdtemp(prefix="coreepi-bench-commit-"))
    cluster = PgCluster(durable=True)
    try:
        stores = {
            "postgresql": (PostgresStore(cluster.create_database("commit"),
                                         DirectoryBlobStore(tmp / "blobs")),
                           lambda: postgres_pids(cluster)),
            "duckdb": (DuckDBStore(tmp / "data"), lambda: []),
        }
        for name, (store, pids) in stores.items():
            items = Items()
            rows = []
            for kind, fn, make in (("heartbeat", accept_heartbeats, items.heartbeats),
                                   ("crash", accept_reports, items.reports)):
                for batch in (1, args.batch):
                    rows.append({"kind": kind, **measure(store, fn, make, batch, args.commits,
                                                          pids)})
            store.close()
            out[name] = rows
    finally:
        cluster.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--commits", type=int, default=40)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    text = json.dumps(run(args), indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")


if __name__ == "__main__":
    main()
