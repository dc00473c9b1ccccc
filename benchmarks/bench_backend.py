#!/usr/bin/env python3
"""Load and faults on the server backend: ``coreepi serve`` replicas and
``coreepi worker`` processes on one PostgreSQL (a throwaway cluster on
127.0.0.1 with its crash safety on: fsync and synchronous commit, so a 2xx
means on disk) and cores in an S3-compatible bucket (moto's server, in this
process), against simulated agents.

Each agent is a loop in a thread of the load generator (httpx, one
connection per agent, its replica chosen round robin; on a refused or failed
request it moves to the next replica). It sends a heartbeat (an interval
tiling its own timeline), a crash report with probability ``--crash-share``,
and for every ``--core-every``-th crash the crash's core (a real gcore core,
zstd-compressed); then sleeps ``--pause`` seconds (0: saturating). An item
that is not accepted (503/429 with Retry-After, a 5xx, a dead connection) is
kept and sent again, after Retry-After when the server gave one, as the real
agent does. Reported: accepted heartbeats/s and crash reports/s with p50/p99
latency of the accepted requests, refusals (load shed) and failures, cores
analysed per second by the workers, and CPU seconds of the load generator
versus the servers, workers and PostgreSQL (from /proc).

``--faults`` runs, during the load and in this order: kill -9 one replica
(a new one is started), kill -9 a worker while one of its analyses runs (a
new one is started; the job is taken over after ``--stale-after`` s),
restart PostgreSQL (immediate stop: like a crash), make the object store
refuse writes for ``--s3-outage`` seconds (its server stopped, then started
again on the same port). Then the load stops, every kept item is sent until
accepted, the queue drains, and the store is checked against what the agents
were told: every accepted crash stored exactly once, every accepted
heartbeat stored, every accepted core analysed exactly once (its job done,
the analysis merged once), nothing lost after a 2xx. Exit 1 when a check fails.

Usage::

    .venv/bin/python benchmarks/bench_backend.py [--replicas 2] [--workers 2]
        [--agents 200] [--seconds 30] [--pause 0] [--crash-share 0.2]
        [--core-every 20] [--max-write-backlog N] [--faults] [--json-out FILE]

Needs PostgreSQL's server binaries (Debian: postgresql), gcc and gdb (the
cores), moto. Wall-clock rates on a shared machine are floors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from backend_agents import Agent, Fleet, make_cores  # noqa: E402
from backend_checks import check_store  # noqa: E402
from pgcluster import PgCluster  # noqa: E402
from servekit import ServeProcess, free_port  # noqa: E402

COREEPI = Path(sys.executable).parent / "coreepi"


def cpu_seconds(pid: int) -> float:
    """user + system CPU of a process and its reaped children, seconds (0: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def postgres_pids(cluster: PgCluster) -> list[int]:
    """The postmaster and its backends (children)."""
    try:
        head = int((cluster.data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    kids = Path(f"/proc/{head}/task/{head}/children")
    return [head, *(int(p) for p in kids.read_text().split())] if kids.exists() else [head]


class S3:
    """moto's S3 server on one port of 127.0.0.1, in this process; :meth:`stop`
    and :meth:`start` again keep the objects (moto's state lives in the process)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = None
        self.start()

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


class Backend:
    """PostgreSQL, the bucket, the replicas and the workers of one run."""

    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        import httpx

        self.args = args
        self.tmp = tmp
        self.cluster = PgCluster(durable=True)
        self.s3 = S3()
        httpx.put(f"{self.s3.url}/bench", timeout=10).raise_for_status()
        os.environ.update({"AWS_ENDPOINT_URL": self.s3.url, "AWS_ACCESS_KEY_ID": "test",
                           "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"})
        self.blobs = "s3://bench/cores"
        self.url = self.cluster.create_database("bench")
        made = subprocess.run([str(COREEPI), "token", "create", "--scope", "ingest", "--store",
                               self.url], capture_output=True, text=True, check=True)
        self.token = made.stdout.strip()
        self.replicas: list[ServeProcess] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.cpu_of_gone = {"servers": 0.0, "workers": 0.0}
        self.started = 0

    def start_replica(self) -> ServeProcess:
        self.started += 1
        d = self.tmp / f"r{self.started}"
        d.mkdir()
        r = ServeProcess(["--store", self.url, "--blobs", self.blobs, "--jobs", "0"],
                         d / "serve.log")
        self.replicas.append(r)
        return r

    def start_worker(self) -> subprocess.Popen[bytes]:
        self.started += 1
        log = open(self.tmp / f"worker{self.started}.log", "wb")  # noqa: SIM115
        w = subprocess.Popen([str(COREEPI), "worker", "--store", self.url, "--blobs",
                              self.blobs, "--stale-after", str(self.args.stale_after),
                              "--analysis-timeout", "120"], stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.workers.append(w)
        return w

    def kill_replica(self, r: ServeProcess) -> None:
        self.cpu_of_gone["servers"] += cpu_seconds(r.proc.pid)
        r.kill()
        self.replicas.remove(r)

    def kill_worker(self, w: subprocess.Popen[bytes]) -> None:
        self.cpu_of_gone["workers"] += cpu_seconds(w.pid)
        os.kill(w.pid, 9)
        w.wait(60)
        self.workers.remove(w)

    def cpu(self) -> dict[str, float]:
        return {"servers": self.cpu_of_gone["servers"]
                + sum(cpu_seconds(r.proc.pid) for r in self.replicas),
                "workers": self.cpu_of_gone["workers"]
                + sum(cpu_seconds(w.pid) for w in self.workers),
                "postgres": sum(cpu_seconds(p) for p in postgres_pids(self.cluster))}

    def close(self) -> None:
        for r in list(self.replicas):
            r.kill()
        for w in list(self.workers):
            if w.poll() is None:
                os.kill(w.pid, 15)
                try:
                    w.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(w.pid, 9)
                    w.wait(30)
        self.s3.stop()
        self.cluster.stop()


def job_counts(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        return dict(con.execute("SELECT state, count(*) FROM analysis_jobs GROUP BY state"))


def run_faults(backend: Backend, fleet: Fleet, log: list[dict[str, object]], t0: float) -> None:
    """The fault sequence of the module docstring, logged with times since ``t0``."""
    import psycopg

    a = backend.args

    def note(what: str) -> None:
        log.append({"t": round(time.monotonic() - t0, 1), "fault": what})

    time.sleep(a.fault_gap)
    victim = backend.replicas[0]
    backend.kill_replica(victim)
    note(f"kill -9 replica {victim.url}")
    fleet.set_urls([r.url for r in backend.replicas])
    backend.start_replica()
    fleet.set_urls([r.url for r in backend.replicas])
    note("replica restarted")
    time.sleep(a.fault_gap)
    deadline = time.monotonic() + 120
    victim_w = None
    while victim_w is None and time.monotonic() < deadline:
        with psycopg.connect(backend.url, autocommit=True) as con:
            running = [r[0] for r in con.execute(
                "SELECT worker FROM analysis_jobs WHERE state = 'running'")]
        pids = {int(w.split(":")[1]) for w in running if w and w.count(":") >= 2}
        victim_w = next((w for w in backend.workers if w.pid in pids), None)
        time.sleep(0.05)
    if victim_w is not None:
        backend.kill_worker(victim_w)
        note(f"kill -9 worker pid {victim_w.pid} mid-analysis")
    else:
        note("no analysis ran within 120 s: no worker killed")
    backend.start_worker()
    time.sleep(a.fault_gap)
    note("PostgreSQL restart (immediate stop)")
    backend.cluster.restart()
    note("PostgreSQL up")
    time.sleep(a.fault_gap)
    backend.s3.stop()
    note(f"object store refusing writes for {a.s3_outage:g} s")
    time.sleep(a.s3_outage)
    backend.s3.start()
    note("object store back")
    time.sleep(a.fault_gap)


def drive(backend: Backend, fleet: Fleet, seconds: float, faults: bool) -> dict[str, object]:
    """Run the agents for ``seconds`` (with faults: until the fault sequence
    has run, at least ``seconds``); returns timings and the fault log."""
    t0 = time.monotonic()
    log: list[dict[str, object]] = []
    fault_thread = None
    if faults:
        fault_thread = threading.Thread(target=run_faults, args=(backend, fleet, log, t0))
        fault_thread.start()
    cpu0, self0 = backend.cpu(), time.process_time()
    jobs0 = job_counts(backend.url).get("done", 0)

    def keep_going() -> bool:
        running = fault_thread is not None and fault_thread.is_alive()
        return running or time.monotonic() - t0 < seconds

    with ThreadPoolExecutor(max_workers=len(fleet.agents)) as pool:
        list(pool.map(lambda agent: agent.run(keep_going), fleet.agents))
    wall = time.monotonic() - t0
    cpu1 = backend.cpu()
    load = time.process_time() - self0
    done = job_counts(backend.url).get("done", 0) - jobs0
    return {"wall": wall, "log": log, "analysed": done,
            "cpu": {"load_generator": round(load, 1),
                    **{k: round(cpu1[k] - cpu0.get(k, 0.0), 1) for k in cpu1}}}


def summary(fleet: Fleet, got: dict[str, object]) -> dict[str, object]:
    wall = float(got["wall"])  # type: ignore[arg-type]
    out: dict[str, object] = {"seconds": round(wall, 1), "cpu_seconds": got["cpu"],
                              "cores_analysed_per_s": round(int(got["analysed"]) / wall, 2)}  # type: ignore[call-overload]
    for kind in ("heartbeat", "crash", "core"):
        lat = sorted(x for a in fleet.agents for x in a.lat[kind])
        out[kind] = {"accepted": len(lat), "accepted_per_s": round(len(lat) / wall, 1),
                     "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
                     "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
                     "refused_503_429": sum(a.shed[kind] for a in fleet.agents),
                     "failed": sum(a.failed[kind] for a in fleet.agents)}
    return out


def run(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="coreepi-bench-backend-"))
    cores = make_cores(tmp / "cores", args.distinct_cores)
    backend = Backend(args, tmp)
    fleet = None
    try:
        for _ in range(args.replicas):
            backend.start_replica()
        for _ in range(args.workers):
            backend.start_worker()
        fleet = Fleet([Agent(i, backend.token, cores, args) for i in range(args.agents)],
                      [r.url for r in backend.replicas])
        got = drive(backend, fleet, args.seconds, args.faults)
        out: dict[str, object] = {"replicas": args.replicas, "workers": args.workers,
                                  "agents": args.agents, "pause_s": args.pause,
                                  "max_write_backlog": args.max_write_backlog,
                                  **summary(fleet, got)}
        if args.faults:
            out["faults"] = got["log"]
            out["unsent_after_drain"] = fleet.drain(seconds=180)
            out["checks"] = check_store(backend.url, fleet, job_timeout=args.stale_after * 4 + 240)
        return out
    finally:
        if fleet is not None:
            fleet.close()
        backend.close()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--pause", type=float, default=0.0,
                   help="seconds an agent sleeps between requests (0: saturating)")
    p.add_argument("--crash-share", type=float, default=0.2)
    p.add_argument("--core-every", type=int, default=20, help="a core with every Nth crash")
    p.add_argument("--distinct-cores", type=int, default=2)
    p.add_argument("--faults", action="store_true")
    p.add_argument("--fault-gap", type=float, default=3.0, help="seconds between faults")
    p.add_argument("--s3-outage", type=float, default=30.0)
    p.add_argument("--stale-after", type=float, default=10.0)
    p.add_argument("--max-write-backlog", type=int,
                   help="the replicas' COREEPI_MAX_WRITE_BACKLOG (default: theirs, 512)")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    if args.max_write_backlog is not None:  # the replicas inherit the environment
        os.environ["COREEPI_MAX_WRITE_BACKLOG"] = str(args.max_write_backlog)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    checks = result.get("checks")
    if isinstance(checks, dict) and not checks.get("ok", False):
        sys.exit(1)


if __name__ == "__main__":
    main()
