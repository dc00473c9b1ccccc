#!/usr/bin/env python3
"""The fault campaign of issue 15, rerun: crashes produced vs stored vs quarantined
through abrupt deaths, and the litter they leave.

What it does, on the embedded store (DuckDB), everything on 127.0.0.1:

1. Builds the crasher (gcc), makes ``--cores`` real cores (gdb ``gcore``).
2. Starts ``coreepi serve --jobs 1`` (central analysis in a sandboxed worker
   child) and ``--agents`` node agents (``coreepi agent``, each with its own
   spool, shipping continuously).
3. Load: ``--crashes`` crashes are collected into the agents' spools
   (``coreepi collect``, the core on its stdin as the kernel gives it; no edge
   analysis, so the server analyses every core). Meanwhile it SIGKILLs an
   agent ``--agent-kills`` times and the server ``--server-kills`` times (each
   restarted at once; a server kill lands while a core is being analysed when
   one is), and stops the server (SIGTERM, during an analysis too) for
   ``--outage`` seconds once.
4. Plants corrupt spool entries (no report.json; report.json not JSON; a
   report the server refuses; a stray file): they must be quarantined with a
   reason, never shipped, never lost silently.
5. Waits until every agent's queue is empty and no analysis job is queued or
   running (a killed server's job is taken over by the restarted server as
   soon as it starts: the holder's process is gone), then stops everything
   with SIGTERM.
6. ``coreepi ingest`` of a fleet directory of ``--cores`` cores into another
   data dir, SIGKILLed ``--ingest-kills`` times while a core is being
   analysed, then run to its end.

Prints one table: crashes produced, stored, quarantined, lost (produced and
neither stored nor quarantined), duplicated (a crash — host, pid, capture
time — stored more than once, or analysed centrally more than once), not
analysed; corrupt entries planted vs quarantined; and the litter: bytes
under each data dir's ``tmp/``, bytes under the campaign's ``$TMPDIR`` (every
child gets its own), orphan processes (any process still running with that
``$TMPDIR``). The goal: 0 lost, 0 duplicated, 0 not analysed, every corrupt
entry quarantined, 0 bytes, 0 orphans. Exit 1 when it is not met (the
campaign's directory is then kept, and named).

Wall-clock durations depend on the machine's load (the 2-CPU CI box is
shared); the counts do not. Not a test: run it by hand::

    .venv/bin/python benchmarks/bench_faults.py [--crashes 24] [--agents 3]
        [--json-out out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from capturekit import kernel_args, write_config  # noqa: E402
from fleetfactory import build_crasher, make_core  # noqa: E402
from prockit import alive, bytes_under, children  # noqa: E402
from servekit import ServeProcess, free_port  # noqa: E402

COREEPI = [sys.executable, "-m", "coreepi"]
CENTRAL = "analysed centrally by coreepi"


class Campaign:
    """The processes of one run, all with ``env`` (its own ``$TMPDIR``)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.tmpdir = work / "tmpdir"
        self.tmpdir.mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith("COREEPI_")}
        self.env = base | {"TMPDIR": str(self.tmpdir)}
        self.data = work / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: ServeProcess | None = None
        self.agents: dict[int, subprocess.Popen[bytes]] = {}
        self.configs: list[Path] = []
        self.log = open(work / "processes.log", "ab")  # noqa: SIM115

    def run(self, *args: str, stdin: Path | None = None) -> subprocess.CompletedProcess[str]:
        with open(stdin, "rb") if stdin else open(os.devnull, "rb") as fh:
            return subprocess.run([*COREEPI, *args], stdin=fh, capture_output=True, text=True,
                                  env=self.env, timeout=600, check=False)

    def start_server(self) -> None:
        self.server = ServeProcess(["--data-dir", str(self.data), "--jobs", "1"],
                                   self.work / "serve.log", port=self.port, env=self.env)

    def stop(self, proc: subprocess.Popen[bytes] | None, sig: int) -> None:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)  # our own child, by pid
            proc.wait(timeout=120)

    def kill_server_mid_analysis(self, sig: int = signal.SIGKILL, wait: float = 20.0) -> bool:
        """Send ``sig`` to the server (and wait for its end), while a core is
        analysed if one is within ``wait`` s; whether one was."""
        assert self.server is not None
        deadline = time.monotonic() + wait
        while not children(self.server.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        busy = bool(children(self.server.proc.pid))
        self.server.kill(sig)
        return busy

    def start_agent(self, i: int) -> None:
        self.agents[i] = subprocess.Popen([*COREEPI, "agent", "--config", str(self.configs[i])],
                                          env=self.env, stdout=self.log,
                                          stderr=subprocess.STDOUT)


def setup_agents(c: Campaign, n: int, token: str) -> None:
    token_file = c.work / "token"
    token_file.write_text(token + "\n")
    for i in range(n):
        node = c.work / f"node{i}"
        node.mkdir()
        c.configs.append(write_config(node, {"server_url": c.url, "token_file": str(token_file)},
                                      agent={"heartbeat_seconds": 5}))


def plant_corrupt(spool: Path, valid_report: dict[str, Any]) -> int:
    """Corrupt entries in ``spool``'s queue; returns how many."""
    queue = spool / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    (queue / "badc0de0000000000000000000000001").mkdir()
    (queue / "badc0de0000000000000000000000001" / "core.zst").write_bytes(b"(\xb5/\xfd" + bytes(9))
    (queue / "badc0de0000000000000000000000002").mkdir()
    (queue / "badc0de0000000000000000000000002" / "report.json").write_text("{not json")
    refused = dict(valid_report, crash_id="badc0de0000000000000000000000003",
                   captured_at="0001-01-01T00:00:00Z")  # the server refuses it (422)
    (queue / refused["crash_id"]).mkdir()
    (queue / refused["crash_id"] / "report.json").write_text(json.dumps(refused))
    (queue / "stray-file").write_bytes(b"x" * 100)
    return 4


PLANTED = ("badc0de", "stray-file")


def quarantined(spool: Path) -> list[str]:
    """Names of the quarantined entries (their REFUSED notes left out)."""
    root = spool / "quarantine"
    return sorted(p.name for p in root.iterdir()
                  if not p.name.endswith(".REFUSED")) if root.exists() else []


T_FIRST = 1_733_000_000  # capture time of crash 0 (epoch seconds); crash k is 60 k s later


def collect(c: Campaign, agent: int, k: int, core: Path) -> bool:
    """Crash ``k`` into agent ``agent``'s spool, as the kernel hands it over
    (pid 0: no /proc to read, so no unrelated process is looked at); whether
    it was collected. A crash is known by its capture time."""
    done = c.run("collect", "--config", str(c.configs[agent]), "--",
                 *kernel_args(pid=0, when=T_FIRST + 60 * k, comm="crasher"), stdin=core)
    return done.returncode == 0


def stored_crashes(data: Path) -> list[dict[str, Any]]:
    """pid, signature, central analyses and core status of every stored crash."""
    from coreepi.store import DuckDBStore

    with DuckDBStore(data, read_only=True) as store:
        rows = store._query("SELECT report, core_status FROM crashes").fetchall()
    out = []
    for report_json, core_status in rows:
        report = json.loads(report_json)
        when = datetime.fromisoformat(report["captured_at"].replace("Z", "+00:00"))
        out.append({"pid": report["process"].get("pid"), "captured_at": int(when.timestamp()),
                    "signature": (report.get("signature") or {}).get("signature"),
                    "central": sum(w.startswith(CENTRAL)
                                   for w in report["analysis"]["warnings"]),
                    "core_status": core_status})
    return out


def orphans(tmpdir: Path) -> list[int]:
    """Processes still running with ``TMPDIR=tmpdir`` (all ours have it)."""
    needle = f"TMPDIR={tmpdir}".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes().split(b"\0") and alive(int(env.parent.name)):
                found.append(int(env.parent.name))
        except OSError:
            continue
    return [p for p in found if p != os.getpid()]


def wait_drained(c: Campaign, token: str, timeout: float) -> None:
    """Until every agent's queue is empty and no analysis job is queued or running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queues = [cfg.parent / "spool" / "queue" for cfg in c.configs]
        left = sum(1 for q in queues if q.exists() for _ in q.iterdir())
        try:
            counts = httpx.get(f"{c.url}/api/v1/jobs", timeout=30,
                               headers={"Authorization": f"Bearer {token}"}).json()["counts"]
        except (httpx.HTTPError, KeyError):
            counts = {"queued": 1, "running": 0}
        if left == 0 and counts["queued"] == 0 and counts["running"] == 0:
            return
        time.sleep(1.0)
    print(f"warning: not drained after {timeout:.0f} s", file=sys.stderr)


def serve_campaign(c: Campaign, args: argparse.Namespace, cores: list[Path],
                   report_template: dict[str, Any]) -> dict[str, Any]:
    """Steps 2-5 of the module docstring; the counts."""
    c.run("store", "init", str(c.data))  # token create and serve open a store, never make one
    tokens = {s: c.run("token", "create", "--scope", s, "--data-dir",
                       str(c.data)).stdout.strip() for s in ("ingest", "admin")}
    setup_agents(c, args.agents, tokens["ingest"])
    c.start_server()
    for i in range(args.agents):
        c.start_agent(i)
    planted = plant_corrupt(c.configs[0].parent / "spool", report_template)
    produced, events = [], {"agent_kills": 0, "server_kills": 0, "server_kills_mid_analysis": 0,
                            "outages": 0, "outages_mid_analysis": 0}
    kill_agent_at = set(range(2, args.crashes, max(1, args.crashes // (args.agent_kills + 1))))
    kill_server_at = set(range(3, args.crashes, max(1, args.crashes // (args.server_kills + 1))))
    for k in range(args.crashes):
        agent = k % args.agents
        if collect(c, agent, k, cores[k % len(cores)]):
            produced.append(T_FIRST + 60 * k)
        if k in kill_agent_at and events["agent_kills"] < args.agent_kills:
            c.stop(c.agents[agent], signal.SIGKILL)
            c.start_agent(agent)
            events["agent_kills"] += 1
        if k in kill_server_at and events["server_kills"] < args.server_kills:
            events["server_kills_mid_analysis"] += c.kill_server_mid_analysis()
            events["server_kills"] += 1
            c.start_server()
        if k == args.crashes // 2 and args.outage > 0:
            events["outages_mid_analysis"] += c.kill_server_mid_analysis(signal.SIGTERM)
            time.sleep(args.outage)
            c.start_server()
            events["outages"] += 1
    wait_drained(c, tokens["admin"], args.drain_timeout)
    for proc in c.agents.values():
        c.stop(proc, signal.SIGTERM)
    c.server.kill(signal.SIGTERM)
    rows = stored_crashes(c.data)
    quarantine = [name for cfg in c.configs for name in quarantined(cfg.parent / "spool")]
    return {"produced": produced, "rows": rows, "planted": planted,
            "quarantined": quarantine, "events": events}


def ingest_campaign(c: Campaign, args: argparse.Namespace, cores: list[Path]) -> dict[str, Any]:
    """Step 6: a fleet directory ingested through ``--ingest-kills`` SIGKILLs."""
    fleet = c.work / "fleet"
    (fleet / "crashes").mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id\nh1\n")
    for i, core in enumerate(cores):
        shutil.copy(core, fleet / "crashes" / f"core.{i}")
        (fleet / "crashes" / f"core.{i}.json").write_text(json.dumps(
            {"host_id": "h1", "captured_at": f"2024-01-02T10:{i:02d}:00Z"}))
    data = c.work / "data-ingest"
    argv = [*COREEPI, "ingest", str(fleet), "--data-dir", str(data), "--jobs", "1"]
    kills = 0
    for _ in range(args.ingest_kills):
        proc = subprocess.Popen(argv, env=c.env, stdout=c.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not children(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    done = subprocess.run(argv, env=c.env, stdout=c.log, stderr=subprocess.STDOUT,
                          timeout=1200, check=False)
    produced = [int(datetime.fromisoformat(f"2024-01-02T10:{i:02d}:00+00:00").timestamp())
                for i in range(len(cores))]
    return {"produced": produced, "rows": stored_crashes(data), "kills": kills,
            "exit": done.returncode, "data": data}


def tally(produced: list[int], rows: list[dict[str, Any]], key: str,
          quarantined_ids: int = 0) -> dict[str, int]:
    """produced / stored / quarantined / lost / duplicated / not analysed, by ``key``."""
    from collections import Counter

    seen = Counter(r[key] for r in rows)
    stored = sum(1 for p in set(produced) if seen[p])
    return {"produced": len(produced), "stored": stored, "quarantined": quarantined_ids,
            "lost": len(set(produced)) - stored - quarantined_ids,
            "duplicated": sum(n - 1 for n in seen.values() if n > 1)
            + sum(1 for r in rows if r["central"] > 1),
            "not_analysed": sum(1 for r in rows if not r["signature"])}


def litter(c: Campaign, data_dirs: list[Path]) -> dict[str, int]:
    return {"data_tmp_bytes": sum(bytes_under(d / "tmp") for d in data_dirs),
            "tmpdir_bytes": bytes_under(c.tmpdir),
            "tmpdir_entries": sum(1 for _ in c.tmpdir.iterdir()),
            "orphan_processes": len(orphans(c.tmpdir))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crashes", type=int, default=24)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--cores", type=int, default=4)
    ap.add_argument("--agent-kills", type=int, default=4)
    ap.add_argument("--server-kills", type=int, default=3)
    ap.add_argument("--outage", type=float, default=5.0)
    ap.add_argument("--ingest-kills", type=int, default=3)
    ap.add_argument("--drain-timeout", type=float, default=600.0)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    from coreepi.ingest.artifacts import inspect_file

    work = args.workdir or Path(tempfile.mkdtemp(prefix="coreepi-bench-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    binary = build_crasher(work / "bin")
    cores = [make_core(binary, n % 8, work / f"core.{n}") for n in range(args.cores)]
    template = inspect_file(cores[0])[0].model_dump(mode="json")
    c = Campaign(work)
    try:
        served = serve_campaign(c, args, cores, template)
        ingested = ingest_campaign(c, args, cores)
    finally:
        for proc in c.agents.values():
            c.stop(proc, signal.SIGKILL)
        if c.server is not None:
            c.server.kill(signal.SIGKILL)
    corrupt_quarantined = sum(1 for name in served["quarantined"] if name.startswith(PLANTED))
    crashes_quarantined = len(served["quarantined"]) - corrupt_quarantined
    result = {
        "serve": {**tally(served["produced"], served["rows"], "captured_at",
                          crashes_quarantined),
                  **served["events"], "corrupt_planted": served["planted"],
                  "corrupt_quarantined": corrupt_quarantined},
        "ingest": {**tally(ingested["produced"], ingested["rows"], "captured_at"),
                   "ingest_kills": ingested["kills"], "final_exit": ingested["exit"]},
        "litter": litter(c, [c.data, ingested["data"]]),
        "wall_seconds": round(time.monotonic() - started),
        "cpus": os.cpu_count(),
    }
    c.log.close()
    print(json.dumps(result, indent=2))
    print_table(result)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    ok = all(result[part]["lost"] == 0 and result[part]["duplicated"] == 0
             and result[part]["not_analysed"] == 0
             for part in ("serve", "ingest")) and not any(result["litter"].values()) \
        and result["serve"]["corrupt_quarantined"] == result["serve"]["corrupt_planted"]
    if ok and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    elif not ok:
        print(f"FAILED: goal not met; the campaign is kept in {work}", file=sys.stderr)
    return 0 if ok else 1


def print_table(r: dict[str, Any]) -> None:
    s, i, lit = r["serve"], r["ingest"], r["litter"]
    print("\n| campaign | produced | stored | quarantined | lost | duplicated | not analysed |")
    print("|---|---|---|---|---|---|---|")
    print(f"| serve + {s['agent_kills']} agent kill -9s, {s['server_kills']} server kill -9s "
          f"({s['server_kills_mid_analysis']} mid-analysis), {s['outages']} outage "
          f"({s['outages_mid_analysis']} mid-analysis) | "
          f"{s['produced']} | {s['stored']} | {s['quarantined']} | {s['lost']} | "
          f"{s['duplicated']} | {s['not_analysed']} |")
    print(f"| corrupt spool entries | {s['corrupt_planted']} | — | {s['corrupt_quarantined']} | "
          f"{s['corrupt_planted'] - s['corrupt_quarantined']} | — | — |")
    print(f"| ingest + {i['ingest_kills']} kill -9s mid-analysis | {i['produced']} | "
          f"{i['stored']} | {i['quarantined']} | {i['lost']} | {i['duplicated']} | "
          f"{i['not_analysed']} |")
    print(f"\nlitter: {lit['data_tmp_bytes']} bytes under data/tmp, {lit['tmpdir_bytes']} "
          f"bytes ({lit['tmpdir_entries']} entries) under $TMPDIR, "
          f"{lit['orphan_processes']} orphan processes; {r['wall_seconds']} s wall on "
          f"{r['cpus']} shared CPUs")


if __name__ == "__main__":
    sys.exit(main())
