#!/usr/bin/env python3
"""Benchmark ``coreepi report`` against a bare DuckDB aggregation, and ``ingest`` of
ready-made crash reports.

The issue's goal: on 1M crashes, 100k hosts and 10M exposure intervals, the
full report (``build_findings`` + JSON rendering, i.e. ``coreepi report
--format json``) within 3× the cost of a plain ``GROUP BY`` of the same
counts in DuckDB, and under 4 GB of memory.

1. Makes the fleet (``epi_fleet.py``: vectorized numpy + DuckDB SQL, written
   straight into a DuckDB store; about 1M crashes with known diseases).
2. ``--runs`` times each, alternating, every run in a fresh subprocess (so
   peak RSS is per run and caches do not carry over):

   bare    the counts the report is built on, in plain SQL: crashes per
           signature and per host, node-days per host and per attribute set
           (hosts.csv attributes × interval attributes), over the same window
   report  ``build_findings(store)`` + ``render(findings, "json")``

   and prints medians of wall and CPU (user + sys) time, their ratio, and the
   largest peak RSS (``ru_maxrss`` of the child).
3. Ingest: writes ``--ingest-reports`` CrashReport JSON files (plus hosts.csv
   and exposure.csv) into a fleet directory and times ``coreepi.ingest.run.ingest``
   on it once, in rows (crashes) per second.

Not a test. Run by hand::

    .venv/bin/python benchmarks/bench_epi.py [--hosts 100000] [--days 100] [--runs 3]
        [--ingest-reports 20000] [--workdir DIR] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

GOAL_RATIO = 3.0
GOAL_RSS_MIB = 4096.0

BARE = r"""
import duckdb, json, resource, sys, time
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("SET TimeZone = 'UTC'")
con.execute("SET enable_progress_bar = false")
w0 = time.perf_counter(); c0 = time.process_time()
lo, hi = con.execute("SELECT min(start_ts), max(end_ts) FROM exposure").fetchone()
n = 0
for sql, p in (
    ("SELECT signature, count(*) FROM crashes WHERE captured_at >= ? AND captured_at < ? "
     "GROUP BY signature", [lo, hi]),
    ("SELECT host_id, count(*) FROM crashes WHERE captured_at >= ? AND captured_at < ? "
     "GROUP BY host_id", [lo, hi]),
    ("SELECT host_id, sum(epoch(end_ts - start_ts)) FROM exposure "
     "WHERE end_ts > ? AND start_ts < ? GROUP BY host_id", [lo, hi]),
    ("SELECT h.attributes, e.attributes, sum(epoch(e.end_ts - e.start_ts)) FROM exposure e "
     "JOIN hosts h USING (host_id) WHERE e.end_ts > ? AND e.start_ts < ? GROUP BY ALL", [lo, hi]),
):
    n += len(con.execute(sql, p).fetchall())
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rows": n, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

REPORT = r"""
import json, resource, sys, time
w0 = time.perf_counter(); c0 = time.process_time()
from coreepi.reporting import build_findings, render
from coreepi.store import open_store
with open_store(sys.argv[1], read_only=True) as store:
    findings = build_findings(store)
text = render(findings, "json")
hosts = [h.host_id for h in findings.hosts if h.attribution.verdict == "hardware-suspect"]
verdicts = {g.key: g.attribution.verdict for g in findings.groups if g.kind == "signature"}
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "bytes": len(text), "crashes": findings.window.crashes,
                  "hardware_suspect_hosts": hosts,
                  "verdicts": {k: verdicts.get(k) for k in (
                      "_Unwind_RaiseException | __cxa_throw", "io_uring_submit | Ring::flush",
                      "Pool::grow | Arena::alloc", "Parser::parse | Config::load")},
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(code: str, *args: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    line = [x for x in proc.stdout.splitlines() if x.startswith("{")][-1]
    return json.loads(line)


def make_report_fleet(root: Path, n: int) -> Path:
    """A fleet directory of ``n`` ready-made CrashReport JSON files on 1,000 hosts."""
    import numpy as np

    from coreepi.model.report import (
        AnalysisInfo,
        CrashReport,
        Phenotype,
        SignalInfo,
        Signature,
        Source,
    )

    fleet = root / "reports-fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    hosts = 1000
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    (fleet / "hosts.csv").write_text(
        "host_id,cpu_model,kernel\n"
        + "".join(f"h-{i:04d},{['EPYC', 'Xeon'][i % 2]},{['5.15', '6.1'][i % 3 == 0]}\n"
                  for i in range(hosts)))
    (fleet / "exposure.csv").write_text(
        "host_id,start,end\n"
        + "".join(f"h-{i:04d},2024-01-01T00:00:00Z,2024-03-01T00:00:00Z\n" for i in range(hosts)))
    rng = np.random.default_rng(1)
    for i in range(n):
        report = CrashReport(
            crash_id=f"r{i:07d}", host_id=f"h-{int(rng.integers(hosts)):04d}",
            captured_at=t0 + timedelta(seconds=int(rng.integers(59 * 86400))),
            source=Source.ELF_CORE,
            signal=SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR"),
            phenotypes=[Phenotype(name="null-deref")],
            signature=Signature(signature=f"Tail{int(rng.zipf(1.5)) % 500}::run"),
            analysis=AnalysisInfo(analyzer_version="bench"),
        )
        (crashes / f"r{i:07d}.json").write_text(report.model_dump_json())
    return fleet


def bench_ingest(root: Path, n: int) -> dict[str, float]:
    from coreepi.ingest.run import ingest
    from coreepi.store import open_store

    t = time.perf_counter()
    fleet = make_report_fleet(root, n)
    made = time.perf_counter() - t
    with open_store(root / "ingest-data") as store:
        t = time.perf_counter()
        c0 = resource.getrusage(resource.RUSAGE_SELF)
        summary = ingest([fleet], store, store_cores=False)
        wall = time.perf_counter() - t
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        stored = store.counts()["crashes"]
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return {"reports": n, "stored": stored, "make_s": round(made, 2), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "rows_per_s": round(stored / wall, 1),
            "summary": str(summary)}  # type: ignore[dict-item]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ingest-reports", type=int, default=20_000)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    from epi_fleet import FleetSize, generate

    from coreepi.store import DuckDBStore

    tmp = tempfile.TemporaryDirectory(prefix="bench_epi.") if args.workdir is None else None
    root = Path(tmp.name) if tmp else args.workdir
    root.mkdir(parents=True, exist_ok=True)
    data = root / "store"
    results: dict[str, object] = {"cpus": os.cpu_count(),
                                  "load_avg_start": os.getloadavg()[0]}
    if not (data / "coreepi.duckdb").exists():
        size = FleetSize(hosts=args.hosts, days=args.days,
                         tail_signatures=min(20_000, max(100, args.hosts // 5)))
        t = time.perf_counter()
        store = DuckDBStore(data)
        made = generate(store, size)
        store.close()
        made["seconds"] = round(time.perf_counter() - t, 1)
        results["fleet"] = made
        print(f"fleet: {made}", flush=True)
    db = str(data / "coreepi.duckdb")
    bare, report = [], []
    for i in range(args.runs):
        bare.append(child(BARE, db))
        report.append(child(REPORT, str(data)))
        print(f"run {i + 1}: bare {bare[-1]['wall']:.2f}s wall {bare[-1]['cpu']:.2f}s cpu; "
              f"report {report[-1]['wall']:.2f}s wall {report[-1]['cpu']:.2f}s cpu "
              f"{report[-1]['rss_mib']:.0f} MiB", flush=True)

    def med(runs: list[dict[str, object]], key: str) -> float:
        return statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]

    summary = {
        "bare_wall_s": med(bare, "wall"), "bare_cpu_s": med(bare, "cpu"),
        "report_wall_s": med(report, "wall"), "report_cpu_s": med(report, "cpu"),
        "bare_rss_mib": max(float(r["rss_mib"]) for r in bare),  # type: ignore[arg-type]
        "report_rss_mib": max(float(r["rss_mib"]) for r in report),  # type: ignore[arg-type]
        "crashes": report[-1]["crashes"], "json_bytes": report[-1]["bytes"],
        "hardware_suspect_hosts": report[-1]["hardware_suspect_hosts"],
        "verdicts": report[-1]["verdicts"],
    }
    summary["ratio_wall"] = summary["report_wall_s"] / summary["bare_wall_s"]  # type: ignore[operator]
    summary["ratio_cpu"] = summary["report_cpu_s"] / summary["bare_cpu_s"]  # type: ignore[operator]
    results["report"] = summary
    print(json.dumps(summary, indent=2), flush=True)
    if args.ingest_reports:
        results["ingest"] = bench_ingest(root, args.ingest_reports)
        print(f"ingest: {results['ingest']}", flush=True)
    results["load_avg_end"] = os.getloadavg()[0]
    met_time = summary["ratio_wall"] <= GOAL_RATIO  # type: ignore[operator]
    met_rss = summary["report_rss_mib"] <= GOAL_RSS_MIB  # type: ignore[operator]
    print(f"goal: report within {GOAL_RATIO}x bare: {'met' if met_time else 'NOT met'} "
          f"(x{summary['ratio_wall']:.2f} wall, x{summary['ratio_cpu']:.2f} CPU); "
          f"peak RSS under {GOAL_RSS_MIB:.0f} MiB: {'met' if met_rss else 'NOT met'} "
          f"({summary['report_rss_mib']:.0f} MiB)")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2, default=str))
    if tmp:
        tmp.cleanup()
    return 0 if met_time and met_rss else 1


if __name__ == "__main__":
    sys.exit(main())
