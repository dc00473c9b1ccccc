#!/usr/bin/env python3
"""Load on the server backend: ``coreepi serve`` replicas on one PostgreSQL
(a throwaway cluster on 127.0.0.1, tests/pgcluster.py) against simulated
agents.

Each agent is a loop in a thread pool of the load generator (httpx, one
connection per agent): it sends a heartbeat every ``--heartbeat-seconds``
seconds (an interval tiling its timeline) and a crash report with
probability ``--crash-share`` per request, spread over the replicas round
robin. Reported: accepted heartbeats/s and crash reports/s, p50/p99 latency
per kind, errors, and CPU seconds of the load generator versus the server
processes (from /proc), for ``--seconds`` of sustained load.

Usage::

    .venv/bin/python benchmarks/bench_backend.py [--replicas 2] [--agents 200]
        [--seconds 30] [--heartbeat-seconds 2] [--crash-share 0.2] [--json-out FILE]

Needs PostgreSQL's server binaries (Debian: postgresql). The fault runs of
issue 17 (kill -9 a replica / a worker, restart PostgreSQL, S3 refusing
writes) are not automated here yet.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pgcluster import PgCluster
from servekit import ServeProcess

COREEPI = Path(sys.executable).parent / "coreepi"


def _cpu_seconds(pid: int) -> float:
    """user + system CPU of a process and its reaped children, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _report(crash_id: str, host: str, at: datetime) -> dict[str, object]:
    return {"crash_id": crash_id, "host_id": host, "captured_at": at.isoformat(),
            "source": "elf-core", "analysis": {"analyzer_version": "bench"},
            "signal": {"number": 11, "name": "SIGSEGV"},
            "attributes": {"app_version": "1.0"}}


class Agent:
    """One simulated node: its timeline, its connection, its results."""

    def __init__(self, i: int, urls: list[str], token: str, args: argparse.Namespace) -> None:
        self.host = f"node-{i:05d}"
        self.client = httpx.Client(base_url=urls[i % len(urls)], timeout=30,
                                   headers={"authorization": f"Bearer {token}"})
        self.t = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=i % 7)
        self.seq = 0
        self.args = args
        self.lat: dict[str, list[float]] = {"heartbeat": [], "crash": []}
        self.errors = 0

    def step(self) -> None:
        self.seq += 1
        crash = (self.seq * 7919 % 1000) / 1000 < self.args.crash_share
        started = time.perf_counter()
        if crash:
            kind = "crash"
            cid = f"{abs(hash((self.host, self.seq))) % (1 << 64):016x}{self.seq:08x}"
            r = self.client.post("/api/v1/crashes", json=_report(cid, self.host, self.t))
        else:
            kind = "heartbeat"
            end = self.t + timedelta(seconds=60)
            r = self.client.post("/api/v1/heartbeats", json={
                "host_id": self.host, "start": self.t.isoformat(), "end": end.isoformat(),
                "load": {"cpu": 0.5}})
            self.t = end
        if r.status_code in (200, 201):
            self.lat[kind].append(time.perf_counter() - started)
        else:
            self.errors += 1


def run(args: argparse.Namespace) -> dict[str, object]:
    cluster = PgCluster()
    replicas: list[ServeProcess] = []
    try:
        url = cluster.create_database("bench")
        tmp = cluster.root / "bench"
        tmp.mkdir()
        made = subprocess.run([str(COREEPI), "token", "create", "--scope", "ingest", "--store",
                               url], capture_output=True, text=True, check=True)
        token = made.stdout.strip()
        for i in range(args.replicas):
            (tmp / f"r{i}").mkdir()
            replicas.append(ServeProcess(["--store", url, "--blobs", str(tmp / "blobs"),
                                          "--jobs", "0"], tmp / f"r{i}" / "serve.log"))
        agents = [Agent(i, [r.url for r in replicas], token, args) for i in range(args.agents)]
        stop = time.monotonic() + args.seconds
        server_cpu0 = sum(_cpu_seconds(r.proc.pid) for r in replicas)
        self_cpu0 = time.process_time()

        def drive(agent: Agent) -> None:
            while time.monotonic() < stop:
                agent.step()
                time.sleep(args.heartbeat_seconds * (0.5 + (agent.seq % 10) / 10))

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.agents) as pool:
            list(pool.map(drive, agents))
        wall = time.monotonic() - started
        server_cpu = sum(_cpu_seconds(r.proc.pid) for r in replicas) - server_cpu0
        load_cpu = time.process_time() - self_cpu0
        out: dict[str, object] = {"replicas": args.replicas, "agents": args.agents,
                                  "seconds": round(wall, 1),
                                  "errors": sum(a.errors for a in agents),
                                  "cpu_seconds": {"load_generator": round(load_cpu, 1),
                                                  "servers": round(server_cpu, 1)}}
        for kind in ("heartbeat", "crash"):
            lat = sorted(x for a in agents for x in a.lat[kind])
            out[kind] = {"accepted_per_s": round(len(lat) / wall, 1),
                         "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
                         "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None}
        for a in agents:
            a.client.close()
        return out
    finally:
        for r in replicas:
            r.kill()
        cluster.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--heartbeat-seconds", type=float, default=2.0)
    p.add_argument("--crash-share", type=float, default=0.2)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")


if __name__ == "__main__":
    main()
