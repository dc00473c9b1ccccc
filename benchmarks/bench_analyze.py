#!/usr/bin/env python3
"""Benchmark ``coreepi.analyze.analyze()`` against parsing alone, per test core.

The issue's goal: analysis (stack scanning, phenotypes, signature) adds at
most 50 ms median per core on the test cores. This script makes the cores of
the test suite (``tests/crashers/`` through ``tests/corefactory.py``, and the
reference diseases of ``tests/crashers_reference/`` through
``tests/reference_cores.py``), then for each core, ``--runs`` times:

    parse    with open_core(core, exe=binary) as parsed: ...   (parse alone)
    analyze  analyze(report copy, parsed.memory)                (analysis alone)

in one process, after one untimed warm-up per core (which fills the
per-process caches every real worker also has: demangler, symbol tables,
compiled signature lists). It prints the median of each per core and the
median over all cores of the analysis time, and exits 1 when that exceeds
the goal. Timings are wall clock (``time.perf_counter``), in milliseconds.

Cores are made in a temporary directory (``--workdir`` to keep them);
kernel-made cores need root (set core_pattern for one run each, restored);
without it those cases are skipped. Not a test: run it by hand::

    .venv/bin/python benchmarks/bench_analyze.py --runs 7 [--json-out out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from corefactory import CASES, CoreFactory, CrasherUnavailable
from reference_cores import REFERENCE_CASES, ReferenceCoreFactory

from coreepi.analyze import analyze
from coreepi.parse import open_core

GOAL_MEDIAN_MS = 50.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def bench_core(core: Path, exe: Path, debug_dirs: list[Path], runs: int) -> dict[str, object]:
    """Median parse and analyze times (ms) of one core, plus its signature."""
    parse_times, analyze_times = [], []
    signature = None
    for i in range(runs + 1):  # the first run warms the caches and is not counted
        t0 = time.perf_counter()
        with open_core(core, exe=exe, debug_dirs=debug_dirs) as parsed:
            t1 = time.perf_counter()
            analyze(parsed.report, parsed.memory)
            t2 = time.perf_counter()
            signature = parsed.report.signature.signature if parsed.report.signature else None
        if i:
            parse_times.append(t1 - t0)
            analyze_times.append(t2 - t1)
    return {
        "parse_ms": _ms(statistics.median(parse_times)),
        "analyze_ms": _ms(statistics.median(analyze_times)),
        "analyze_max_ms": _ms(max(analyze_times)),
        "signature": signature,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--workdir", type=Path, help="keep binaries and cores here")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-analyze-"))
    (root / "crashers").mkdir(parents=True, exist_ok=True)
    (root / "reference").mkdir(parents=True, exist_ok=True)
    factories = [
        (CoreFactory(root / "crashers"), list(CASES)),
        (ReferenceCoreFactory(root / "reference"), list(REFERENCE_CASES)),
    ]
    results: dict[str, dict[str, object]] = {}
    print(f"{'core':34} {'parse ms':>9} {'analyze ms':>11} {'max':>7}  signature")
    for factory, names in factories:
        for name in names:
            try:
                crash = factory.crash(name)
            except (CrasherUnavailable, AssertionError) as exc:
                print(f"{name:34} skipped: {str(exc).splitlines()[0]}")
                continue
            debug = [crash.debug_dir] if crash.debug_dir else []
            r = bench_core(crash.core, crash.binary, debug, args.runs)
            results[name] = r
            print(
                f"{name:34} {r['parse_ms']:>9} {r['analyze_ms']:>11} {r['analyze_max_ms']:>7}"
                f"  {r['signature']}"
            )
    if not results:
        print("no core could be made")
        return 2
    overall = statistics.median(float(r["analyze_ms"]) for r in results.values())  # type: ignore[arg-type]
    parse = statistics.median(float(r["parse_ms"]) for r in results.values())  # type: ignore[arg-type]
    verdict = "OK" if overall <= GOAL_MEDIAN_MS else "OVER GOAL"
    print(
        f"\nmedian over {len(results)} cores: parse {parse:.2f} ms, analyze {overall:.2f} ms "
        f"(goal <= {GOAL_MEDIAN_MS} ms): {verdict}"
    )
    if args.json_out:
        args.json_out.write_text(
            json.dumps(
                {
                    "runs": args.runs,
                    "cores": results,
                    "median_analyze_ms": overall,
                    "median_parse_ms": parse,
                },
                indent=2,
            )
        )
    return 0 if overall <= GOAL_MEDIAN_MS else 1


if __name__ == "__main__":
    sys.exit(main())
