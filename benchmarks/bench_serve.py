#!/usr/bin/env python3
"""Benchmark ``coreepi serve`` ingest: reports/s and latency with 50
concurrent agents on loopback.

What it does:

1. Makes one real core (``tests/fleetfactory.py``: gcc + gdb ``gcore``) and
   analyses it in-process, as an agent analysing at the edge would; that
   report is the template of every request (its JSON size is printed).
2. Creates an ingest token with ``coreepi token create`` in a fresh data dir
   and starts ``coreepi serve`` on 127.0.0.1 (a free port) as a subprocess
   (one uvicorn process: DuckDB admits one writer process).
3. Runs ``--clients`` agents (asyncio tasks, one HTTP connection each, like
   separate nodes; a minimal keep-alive HTTP/1.1 client over asyncio
   streams, so the load generator costs little CPU) that POST ``--reports`` distinct reports in total (fresh
   crash_id and captured_at per report), after ``--warmup`` untimed ones.
   Every answer must be 201. Then the same with heartbeats (``--heartbeats``).
4. Prints reports/s (wall clock over the timed requests) and the latency
   percentiles per request (p50, p90, p99, max, milliseconds), and checks
   the server's row count afterwards.

The load generator runs on the same machine as the server (loopback), so
they share the CPUs; ``os.cpu_count()`` is printed with the results. Not a
test: run it by hand::

    .venv/bin/python benchmarks/bench_serve.py [--clients 50] [--reports 5000]
        [--json-out out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from fleetfactory import build_crasher, make_core
from servekit import free_port

from coreepi.ingest.artifacts import inspect_file

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def start_server(data: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "coreepi", "serve", "--data-dir", str(data), "--port", str(port),
         "--log-level", "warning"], start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes,
                body: bytes) -> int:
    """One keep-alive HTTP/1.1 POST; returns the status (the answer is read whole)."""
    writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def run_load(port: int, token: str, bodies: list[bytes], path: str, clients: int,
                   warmup: int) -> dict[str, Any]:
    """``clients`` agents, one keep-alive connection each, POST ``bodies``.
    The client is a few lines over asyncio streams (not httpx) so that the
    load generator, which shares the CPUs, costs little."""
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: ").encode()
    queue: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()
    for i, b in enumerate(bodies):
        queue.put_nowait((i, b))
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    started: list[float] = []

    async def agent() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                try:
                    i, body = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                if i == warmup and not started:
                    started.append(time.perf_counter())
                t = time.perf_counter()
                status = await _post(reader, writer, head, body)
                dt = time.perf_counter() - t
                statuses[status] = statuses.get(status, 0) + 1
                if i >= warmup:
                    latencies.append(dt)
        finally:
            writer.close()

    await asyncio.gather(*(agent() for _ in range(clients)))
    wall = time.perf_counter() - started[0]
    ms = [x * 1000 for x in latencies]
    return {
        "requests": len(latencies), "clients": clients, "wall_seconds": round(wall, 3),
        "per_second": round(len(latencies) / wall, 1),
        "p50_ms": round(statistics.median(ms), 2), "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2), "max_ms": round(max(ms), 2),
        "statuses": statuses,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--reports", type=int, default=5000)
    ap.add_argument("--heartbeats", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="coreepi-bench-serve-"))
    work.mkdir(parents=True, exist_ok=True)
    binary = build_crasher(work / "bin")
    core = make_core(binary, 3, work / "core.3")
    template = inspect_file(core)[0]
    template.attributes = {"app_version": "1.2.3", "deployment": "prod"}
    size = len(template.model_dump_json())

    bodies = []
    for i in range(args.warmup + args.reports):
        r = template.model_copy(update={
            "crash_id": secrets.token_hex(16), "host_id": f"node-{i % 1000:04d}",
            "captured_at": T0 + timedelta(seconds=i)})
        bodies.append(r.model_dump_json().encode())
    beats = []
    for i in range(args.warmup + args.heartbeats):
        start = T0 + timedelta(minutes=5 * (i // 1000))
        beats.append(json.dumps({
            "host_id": f"node-{i % 1000:04d}", "boot_id": "b", "start": start.isoformat(),
            "end": (start + timedelta(minutes=5)).isoformat(), "facts": None,
            "load": {"loadavg_1m": (i % 17) / 4, "memory_pressure_some_avg10": 0.1,
                     "uptime_seconds": 3600 + i}}).encode())

    data = work / "data"
    # token create and serve open a store, they do not make one
    subprocess.run([sys.executable, "-m", "coreepi", "store", "init", str(data)],
                   capture_output=True, check=True)
    token = subprocess.run(
        [sys.executable, "-m", "coreepi", "token", "create", "--scope", "ingest", "--data-dir",
         str(data)], capture_output=True, text=True, check=True).stdout.strip()
    port = free_port()
    proc = start_server(data, port)
    try:
        reports = asyncio.run(run_load(port, token, bodies, "/api/v1/crashes", args.clients,
                                       args.warmup))
        hbs = asyncio.run(run_load(port, token, beats, "/api/v1/heartbeats", args.clients,
                                   args.warmup))
    finally:
        os.kill(proc.pid, signal.SIGTERM)  # our own child, by pid
        proc.wait(timeout=60)

    from coreepi.store import open_store

    with open_store(data, read_only=True) as store:
        counts = store.counts()
    result = {"cpus": os.cpu_count(), "report_json_bytes": size, "reports": reports,
              "heartbeats": hbs, "rows": counts}
    ok = (reports["statuses"] == {201: len(bodies)} and hbs["statuses"] == {201: len(beats)}
          and counts["crashes"] == len(bodies) and counts["exposure"] == len(beats))
    print(json.dumps(result, indent=2))
    print(f"\nreports: {reports['per_second']}/s with {args.clients} clients, "
          f"p50 {reports['p50_ms']} ms, p99 {reports['p99_ms']} ms "
          f"({size} bytes of JSON each, {os.cpu_count()} CPUs shared with the load generator)")
    print(f"heartbeats: {hbs['per_second']}/s, p50 {hbs['p50_ms']} ms, p99 {hbs['p99_ms']} ms")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    if not ok:
        print("FAILED: some request was not 201, or rows are missing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
