#!/usr/bin/env python3
"""Benchmark the scale-out paths (issue 18): the report's heavy part on each
engine against bare DuckDB GROUP BYs (same run), and batch re-analysis on Dask
against ``gdb -batch -ex 'thread apply all bt'``.

1. Makes the synthetic fleet of ``epi_fleet.py`` (``--hosts`` × ``--days``
   one-day intervals, about one crash per 10 node-days) in a DuckDB store.
2. Each in a fresh subprocess (peak RSS per run), ``--runs`` times, medians:

   bare          bench_epi's plain GROUP BYs of the same counts
   report-store  ``coreepi report -f json`` on the store's own DuckDB SQL
   report-ibis   the same through the Ibis layer on DuckDB (``--engine duckdb``)
   report-spark  the same on Spark local mode over a Parquet export (once;
                 JVM start-up included and reported apart)
   report-store-duckdb-SIZE  report-store with DuckDB's memory_limit at SIZE
                 (``--duckdb-memory-limit SIZE``)

   and checks that the findings agree (crash counts, verdicts of the known groups).
3. ``--cores N``: N real cores of the test crasher. What network isolation
   adds to a forked child (CPU and wall, ms). The analysis in this
   process with the CFI cache emptied before each core and kept (CPU per
   core, alternated, medians). Ingest's sandbox runner
   alone, cold (a new Python per core) and warm (forked from a pre-imported
   zygote, its CFI cache on and off, alternated): CPU per core. Then the
   cores in a store: ``coreepi reanalyze``
   warm with 1 and 2 Dask workers and cold with 1 (cores/s of wall, cluster
   start excluded; CPU per core of every process; the same command again
   with nothing left to do, for the CPU a core adds), and gdb's backtrace of
   each core, one process per core (cores/s, CPU per core). ``--cores-only``
   skips the report part.

Not a test. Run by hand::

    .venv/bin/python benchmarks/bench_scale.py [--hosts 100000] [--days 100] [--runs 1]
        [--cores 16] [--cores-only] [--no-spark] [--workdir DIR] [--json-out FILE]
        [--duckdb-memory-limit SIZE]
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
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_epi import BARE, child  # noqa: E402 (benchmarks/ on the path first)

REPORT = r"""
import json, os, resource, sys, time
w0 = time.perf_counter(); c0 = time.process_time()
from coreepi.cli.export import report_source
from coreepi.reporting import build_findings, render
from coreepi.store import open_store
engine = sys.argv[2] if sys.argv[2] != "store" else None
parquet = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
limit = sys.argv[4] if len(sys.argv) > 4 else None
with open_store(sys.argv[1], read_only=True) as store:
    if limit:  # DuckDB's buffer pool, database-wide (what the report's frames do not need)
        store._con.execute(f"SET memory_limit = '{limit}'")
    t = time.perf_counter()
    source = report_source(store, engine, parquet, None)
    started = time.perf_counter() - t
    findings = build_findings(source)
text = render(findings, "json")
verdicts = {g.key: g.attribution.verdict for g in findings.groups if g.kind == "signature"}
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "engine_start": started, "crashes": findings.window.crashes,
                  "groups": len(findings.groups), "verdicts": verdicts,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_report(data: Path, runs: int, spark: bool, root: Path,
                 duckdb_memory: str | None = None) -> dict[str, object]:
    db = str(data / "coreepi.duckdb")
    out: dict[str, list[dict[str, object]]] = {"bare": [], "report-store": [], "report-ibis": []}
    limited = f"report-store-duckdb-{duckdb_memory}"
    if duckdb_memory:
        out[limited] = []
    for i in range(runs):
        out["bare"].append(child(BARE, db))
        out["report-store"].append(child(REPORT, str(data), "store"))
        out["report-ibis"].append(child(REPORT, str(data), "duckdb"))
        if duckdb_memory:
            out[limited].append(child(REPORT, str(data), "store", "", duckdb_memory))
        print(f"run {i + 1}: " + "; ".join(f"{k} {v[-1]['wall']:.2f}s" for k, v in out.items()),
              flush=True)
    if spark:
        from coreepi.store import open_store
        from coreepi.store.analytics import export_parquet, store_tables

        t = time.perf_counter()
        with open_store(data, read_only=True) as store:
            et = store_tables(store, "duckdb")
            rows = export_parquet(et, root / "parquet").rows
            et.close()
        print(f"export parquet: {rows} in {time.perf_counter() - t:.1f}s", flush=True)
        out["report-spark"] = [child(REPORT, str(data), "spark", str(root / "parquet"))]
        out["export_seconds"] = [{"wall": time.perf_counter() - t}]
    summary: dict[str, object] = {}
    for name, results in out.items():
        walls = [float(r["wall"]) for r in results]  # type: ignore[arg-type]
        summary[name] = {"wall_s": round(statistics.median(walls), 2),
                         **{k: (round(v, 2) if isinstance(v, float) else v)
                            for k, v in results[-1].items() if k in (
                                "engine_start", "crashes", "groups")}}
        # every run's CPU and peak, not only the last one's: the median CPU, the largest peak
        if all("cpu" in r for r in results):
            cpus = [round(float(r["cpu"]), 2) for r in results]  # type: ignore[arg-type]
            summary[name].update(cpu=round(statistics.median(cpus), 2), cpu_runs=cpus)
        if all("rss_mib" in r for r in results):
            summary[name]["rss_mib"] = round(max(  # type: ignore[index]
                float(r["rss_mib"]) for r in results), 1)  # type: ignore[arg-type]
    bare = summary["bare"]["wall_s"]  # type: ignore[index]
    for name in ("report-store", "report-ibis", "report-spark", limited):
        if name in summary:
            summary[name]["x_bare"] = round(summary[name]["wall_s"] / bare, 2)  # type: ignore[index]
            # CPU: the fair ratio on a shared machine (DuckDB's threads are the process's)
            summary[name]["x_bare_cpu"] = round(  # type: ignore[index]
                summary[name]["cpu"] / summary["bare"]["cpu"], 2)  # type: ignore[index]
            if len(out[name]) == len(out["bare"]):  # each run against the bare run beside it
                summary[name]["x_bare_cpu_runs"] = [  # type: ignore[index]
                    round(float(r["cpu"]) / float(b["cpu"]), 2)  # type: ignore[arg-type]
                    for r, b in zip(out[name], out["bare"], strict=True)]
    verdicts = [r[-1]["verdicts"] for k, r in out.items() if k.startswith("report")]
    crashes = [r[-1]["crashes"] for k, r in out.items() if k.startswith("report")]
    summary["same_findings"] = all(v == verdicts[0] for v in verdicts) and len(set(crashes)) == 1
    return summary


def _children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for descendants."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu_and_wall(run: Callable[[], object]) -> tuple[float, float]:
    """CPU seconds (this process and every descendant it waited for) and wall seconds of ``run``."""
    c0, p0, w0 = _children_cpu(), time.process_time(), time.perf_counter()
    run()
    return _children_cpu() - c0 + time.process_time() - p0, time.perf_counter() - w0


def bench_sandbox(cores: list[Path], rounds: int = 3) -> dict[str, object]:
    """CPU per core of ingest's Sandbox runner, cold (a new Python per core)
    and warm (forked from a zygote; its start-up measured apart and
    subtracted), no Dask; warm with the zygote's CFI cache on and off
    (``COREEPI_CFI_CACHE_FILES=0``), alternated ``rounds`` times, medians."""
    from coreepi.ingest.sandbox import Sandbox, SandboxLimits
    from coreepi.parse.elf.cfi_cache import SIZE_ENV
    from coreepi.reanalysis.warm import WarmLauncher

    out: dict[str, object] = {}
    limits = SandboxLimits(300, 4096)
    cpu, wall = _cpu_and_wall(lambda: [Sandbox(limits).run(c) for c in cores])
    out["cold_cpu_s_per_core"] = round(cpu / len(cores), 3)
    launcher = WarmLauncher()
    start, _ = _cpu_and_wall(lambda: (launcher.start(), launcher.close()))

    def warm(cache_files: str | None) -> float:
        if cache_files is not None:  # read by the zygote at its start
            os.environ[SIZE_ENV] = cache_files
        try:
            launcher = WarmLauncher()
            launcher.start()
        finally:
            os.environ.pop(SIZE_ENV, None)
        sandbox = Sandbox(limits, launcher=launcher)
        cpu, _ = _cpu_and_wall(lambda: ([sandbox.run(c) for c in cores], launcher.close()))
        return (cpu - start) / len(cores)

    on, off = [], []
    for _ in range(rounds):
        on.append(warm(None))
        off.append(warm("0"))
    out["warm_zygote_start_cpu_s"] = round(start, 3)
    out["warm_cpu_s_per_core"] = round(statistics.median(on), 4)
    out["warm_no_cfi_cache_cpu_s_per_core"] = round(statistics.median(off), 4)
    print(f"sandbox: cold {out['cold_cpu_s_per_core']} s CPU/core; warm "
          f"{out['warm_cpu_s_per_core']} s CPU/core after a zygote start of {start:.2f} s CPU "
          f"({out['warm_no_cfi_cache_cpu_s_per_core']} without the CFI cache)", flush=True)
    return out


def bench_cfi_cache(cores: list[Path], rounds: int = 3) -> dict[str, object]:
    """CPU per core of the analysis itself (``inspect_file``, in this
    process, imports done), the CFI cache (:mod:`coreepi.parse.elf.cfi_cache`)
    emptied before each core (as every core was before the cache) against
    kept (as in a warm zygote's children after the first core); the two
    passes alternate, ``rounds`` times, medians."""
    from coreepi.ingest.artifacts import inspect_file
    from coreepi.parse.elf.cfi_cache import CACHE

    inspect_file(cores[0])  # the lazy imports of a process's first core

    def per_core(clear: bool) -> float:
        c0 = time.process_time()
        for core in cores:
            if clear:
                CACHE.clear()
            inspect_file(core)
        return (time.process_time() - c0) / len(cores)

    cleared, kept = [], []
    for _ in range(rounds):
        cleared.append(per_core(True))
        kept.append(per_core(False))
    out = {"cpu_s_per_core_cache_emptied": round(statistics.median(cleared), 4),
           "cpu_s_per_core_cache_kept": round(statistics.median(kept), 4)}
    out["gain_ms_per_core"] = round(1000 * (out["cpu_s_per_core_cache_emptied"]
                                            - out["cpu_s_per_core_cache_kept"]), 1)
    print(f"CFI cache: {out}", flush=True)
    CACHE.clear()
    return out


def bench_netns(n: int = 100) -> dict[str, object]:
    """What leaving the network costs an analysis child: ``n`` forked
    children that call ``isolate_network()`` then exit, against ``n`` that
    only exit (CPU of the children, ms each; wall per child, ms). The
    kernel tears a namespace down later, in its own threads: not counted."""
    from coreepi.ingest.worker import isolate_network

    def children(isolate: bool) -> tuple[float, float]:
        c0, w0 = _children_cpu(), time.perf_counter()
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                os._exit(1 if isolate and isolate_network() else 0)
            os.waitpid(pid, 0)
        return ((_children_cpu() - c0) / n * 1000, (time.perf_counter() - w0) / n * 1000)

    (plain_cpu, plain_wall), (iso_cpu, iso_wall) = children(False), children(True)
    out = {"cpu_ms_per_child": round(iso_cpu - plain_cpu, 2),
           "wall_ms_per_child": round(iso_wall - plain_wall, 2)}
    print(f"network isolation: {out}", flush=True)
    return out


def bench_reanalyze(root: Path, n: int) -> dict[str, object]:
    """``coreepi reanalyze`` (warm, and cold at 1 worker) at 1 and 2 Dask
    workers, and gdb's backtrace of the same cores: cores/s of wall (the
    CLI's figure, cluster start excluded) and CPU seconds per core (every
    process: the CLI, Dask, the analysis children)."""
    from fleetfactory import CoreSet
    from test_ingest import sidecar

    cores = CoreSet(root / "cores", n)
    fleet = root / "rfleet"
    (fleet / "crashes").mkdir(parents=True, exist_ok=True)
    (fleet / "hosts.csv").write_text("host_id,kernel\nh1,6.1\n")
    for i, core in enumerate(cores.cores):
        (fleet / "crashes" / f"core.{i}").write_bytes(core.read_bytes())
        # one second apart: a second crash of h1 at the same time would be the same crash
        sidecar(fleet / "crashes" / f"core.{i}.json", "h1",
                f"2024-01-02T{10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
                exe=str(cores.binary))
    coreepi = str(Path(sys.executable).parent / "coreepi")
    data = root / "rdata"
    subprocess.run([coreepi, "ingest", str(fleet), "--data-dir", str(data)], check=True,
                   capture_output=True)
    out: dict[str, object] = {"cores": n, "netns": bench_netns(),
                              "cfi_cache": bench_cfi_cache(cores.cores),
                              "sandbox": bench_sandbox(cores.cores)}
    for label, workers, extra in (("warm", 1, []), ("warm", 2, []), ("cold", 1, ["--cold"])):
        # a rule "change": clear the markers so that every core is selected again
        import duckdb

        with duckdb.connect(str(data / "coreepi.duckdb")) as con:
            con.execute("UPDATE crashes SET report = replace(report, 're-analysed by', 'was')")
        done: list[str] = []

        def run(workers: int = workers, extra: list[str] = extra) -> None:
            proc = subprocess.run([coreepi, "reanalyze", "--data-dir", str(data), "--workers",
                                   str(workers), *extra], check=True, capture_output=True,
                                  text=True)
            done.append(proc.stdout.strip().splitlines()[-1])

        cpu, _ = _cpu_and_wall(run)
        rate = float(done[0].split("(")[1].split(" cores/s")[0])
        if not done[0].startswith(f"{n} written, 0 failed"):
            raise SystemExit(f"reanalyze did not analyse the {n} cores: {done[0]}")
        key = f"{label}_{workers}_workers"
        # the same command with nothing left to do (every marker current): the
        # CLI's start, the cluster's start and stop, the selection; what the
        # cores add is the difference
        fixed, _ = _cpu_and_wall(run)
        out[key] = {"cores_per_s_wall": rate, "cpu_s_per_core": round(cpu / n, 3),
                    "fixed_cpu_s": round(fixed, 2),
                    "marginal_cpu_s_per_core": round((cpu - fixed) / n, 3), "line": done[0]}
        print(f"reanalyze {key}: {done[0]}; {cpu / n:.3f} s CPU/core (all processes), "
              f"{fixed:.2f} s CPU with nothing to do, so {(cpu - fixed) / n:.3f} s CPU per "
              "core added", flush=True)

    def gdb() -> None:
        for core in cores.cores:
            subprocess.run(["gdb", "-batch", "-nx", "-ex", "thread apply all bt",
                            str(cores.binary), str(core)], check=False, capture_output=True)

    cpu, wall = _cpu_and_wall(gdb)
    out["gdb"] = {"cores_per_s_wall": round(n / wall, 2), "cpu_s_per_core": round(cpu / n, 3)}
    print(f"gdb: {n / wall:.2f} cores/s wall, {cpu / n:.3f} s CPU/core", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--cores-only", action="store_true")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--duckdb-memory-limit", metavar="SIZE",
                    help="Also run the store's report with DuckDB's memory_limit at SIZE "
                    "(e.g. 512MB): how much of the peak is DuckDB's buffer pool.")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    from epi_fleet import FleetSize, generate

    from coreepi.store import DuckDBStore

    tmp = tempfile.TemporaryDirectory(prefix="bench_scale.") if args.workdir is None else None
    root = Path(tmp.name) if tmp else args.workdir
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0],
                                  "hosts": args.hosts, "days": args.days}
    data = root / "store"
    if not args.cores_only and not (data / "coreepi.duckdb").exists():
        store = DuckDBStore(data)
        size = FleetSize(hosts=args.hosts, days=args.days,
                         tail_signatures=min(20_000, max(100, args.hosts // 5)))
        results["fleet"] = generate(store, size)
        store.close()
        print(f"fleet: {results['fleet']}", flush=True)
    if not args.cores_only:
        results["report"] = bench_report(data, args.runs, not args.no_spark, root,
                                         args.duckdb_memory_limit)
    if args.cores:
        results["reanalyze"] = bench_reanalyze(root, args.cores)
    results["load_avg_end"] = os.getloadavg()[0]
    text = json.dumps(results, indent=1)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
