#!/usr/bin/env python3
"""Benchmark ``coreepi ci run``: the overhead on a crash-free suite, and the
time per crash to core + analysis.

The crash-free suite is real CI work: ``--rounds`` rounds of compiling
tests/ci_suite/ok.c and thread_abort.cpp with gcc/g++ (many processes:
driver, cc1, as, collect2, ld) and running ``ok``. It is timed bare, under
``coreepi ci run --capture ptrace``, and under ``--capture kernel`` when
core_pattern writes files (core_pattern is only read). The ``ci run`` wall
time includes coreepi's own start-up (Python imports), reported apart.

Per crash: the small suite of tests/ci_suite/ under the ptrace mode, through
the library (``coreepi.cirun.ci_run``): seconds to write each core
(supervisor) and to analyse it (``inspect_file``).

Usage::

    .venv/bin/python benchmarks/bench_ci.py [--rounds 10] [--runs 3] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cikit import build_suite  # noqa: E402

from coreepi.capture.supervise.kernelfiles import kernel_unavailable  # noqa: E402
from coreepi.cirun.run import ci_run  # noqa: E402


def _suite_script(root: Path, rounds: int) -> Path:
    script = root / "crash_free.sh"
    script.write_text(f"""#!/bin/sh
set -e
cd "{root}"
for i in $(seq {rounds}); do
  gcc -O1 -g -o ok_$i ok.c
  g++ -O1 -g -pthread -c -o t_$i.o thread_abort.cpp
  ./ok_$i > /dev/null
done
""")
    return script


def _timed(argv: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    coreepi = [sys.executable, "-m", "coreepi"]
    with tempfile.TemporaryDirectory(prefix="bench-ci-") as tmp:
        suite = build_suite(Path(tmp) / "suite")
        script = _suite_script(suite.root, args.rounds)
        variants = {"bare": ["sh", str(script)],
                    "ci run (ptrace)": [*coreepi, "ci", "run", "--capture", "ptrace", "--",
                                        "sh", str(script)],
                    "coreepi start-up": [*coreepi, "ci", "run", "--capture", "ptrace", "--",
                                         "true"]}
        if kernel_unavailable() is None:
            variants["ci run (kernel)"] = [*coreepi, "ci", "run", "--capture", "kernel", "--",
                                           "sh", str(script)]
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.runs):  # interleaved, so load drifts hit every variant alike
            for name, argv in variants.items():
                times[name].append(_timed(argv, suite.root))
        med = {k: statistics.median(v) for k, v in times.items()}
        startup = med["coreepi start-up"]
        result: dict[str, object] = {"rounds": args.rounds, "runs": args.runs,
                                     "median_seconds": med, "seconds": times}
        print(f"crash-free suite ({args.rounds} rounds of gcc/g++/run), median of {args.runs}:")
        for name in variants:
            line = f"  {name:18s} {med[name]:7.2f} s"
            if name.startswith("ci run"):
                over = med[name] - med["bare"]
                line += (f"  overhead {over:+.2f} s = {over / med['bare']:+.1%}; without "
                         f"start-up {(over - startup) / med['bare']:+.1%}")
            print(line)
        per_crash: list[dict[str, object]] = []
        for i in range(args.runs):
            with open(Path(tmp) / "suite.log", "w") as log:  # the suite's own chatter
                saved = os.dup(1), os.dup(2)
                os.dup2(log.fileno(), 1)
                os.dup2(log.fileno(), 2)
                try:
                    run = ci_run(["sh", str(suite.script)], mode="ptrace",
                                 cores_dir=Path(tmp) / f"cores-{i}")
                finally:
                    os.dup2(saved[0], 1)
                    os.dup2(saved[1], 2)
            per_crash += [{"process": c.process, "signal": c.signal,
                           "core_s": c.seconds_to_core, "analyse_s": c.seconds_to_analyse}
                          for c in run.crashes]
        print("per crash (ptrace mode): core write + analysis, median:")
        for proc in sorted({p["process"] for p in per_crash}):
            mine = [p for p in per_crash if p["process"] == proc]
            core_s = statistics.median(p["core_s"] for p in mine)
            an_s = statistics.median(p["analyse_s"] for p in mine)
            print(f"  {proc:14s} core {core_s * 1000:6.1f} ms + analysis {an_s:5.2f} s "
                  f"= {core_s + an_s:5.2f} s")
        result["per_crash"] = per_crash
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
