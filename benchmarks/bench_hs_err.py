#!/usr/bin/env python3
"""The hs_err parser alone, this tree against others, alternating: MiB of
hs_err logs per CPU second, and (``--instructions``) instructions per pass
counted by valgrind's callgrind, which the load of a shared machine does
not move.

Input: krashpad's 60 real logs (``tests/data/vendored/jvm-hs_err-krashpad``,
1.15 MiB, each with the newline ``bench_logs.py`` appends), held in memory
and given to ``parse_hs_err`` one by one as bytes, as ``bench_logs.py``
does. Each tree runs in a child process (``PYTHONPATH=<tree>/src``) that
parses every log once to warm up (regexps compiled, model plans made), then
times ``--passes`` passes of ``time.process_time``; rounds alternate the
trees, so a change of load hits both. Counted: logs whose pid and JDK
version match ``tests/data/hs_err_expected.toml``.

``--instructions``: per tree, two callgrind runs of the child, with 0 and 1
timed pass after the warm-up; the difference is one steady pass (Python's
start-up and the warm-up cancel out). Needs valgrind, ≈ 10 minutes a tree
on a loaded machine.

``--stages``: in this process, this tree only, the CPU time of one pass
split by stage (best of 9): reading (decode, hash), reading and scanning
(``HsErrScanner.feed_text``), and ``build_report`` on the scanned facts.

Run by hand::

    .venv/bin/python benchmarks/bench_hs_err.py --src OTHER/src [--rounds 3] [--instructions]
    .venv/bin/python benchmarks/bench_hs_err.py --stages

(``OTHER`` made by ``git archive REV src | tar -x -C OTHER``.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1 << 20


def _child(passes: int) -> None:
    """Warm up, then time ``passes`` passes; print one JSON line."""
    sys.path.insert(0, str(HERE))
    from bench_logs import TESTDATA, _hs_err_logs, _hs_err_right  # noqa: PLC0415 - child only

    from coreepi.parse.jvm.hs_err import parse_hs_err  # noqa: PLC0415 - from PYTHONPATH's tree

    logs, truth = _hs_err_logs(TESTDATA / "jvm-hs_err-krashpad")
    for log in logs:
        parse_hs_err(log, name="warm-up")
    seconds, right = [], 0
    for _ in range(passes):
        started = time.process_time()
        reports = [parse_hs_err(log, name="bench") for log in logs]
        seconds.append(time.process_time() - started)
        right = sum(r is not None and _hs_err_right(r, w) for r, w in zip(reports, truth))
    size = sum(map(len, logs)) / MB
    print(json.dumps({"mib": size, "seconds": seconds, "right": right, "logs": len(logs)}))


def _stages() -> None:
    """Print the best-of-9 CPU milliseconds of each stage of one pass."""
    sys.path.insert(0, str(HERE))
    from bench_logs import TESTDATA, _hs_err_logs  # noqa: PLC0415

    from coreepi.parse.jvm.build import build_report  # noqa: PLC0415
    from coreepi.parse.jvm.hs_err import _blocks, _Reader  # noqa: PLC0415
    from coreepi.parse.jvm.scan import HsErrScanner  # noqa: PLC0415

    logs, _ = _hs_err_logs(TESTDATA / "jvm-hs_err-krashpad")

    def scan(keep: bool) -> list:
        out = []
        for log in logs:
            reader, scanner = _Reader(4096), HsErrScanner()
            for block in _blocks(log, reader):
                if keep:
                    scanner.feed_text(block)
            out.append((scanner.facts, reader.head.hexdigest(), reader.sha.hexdigest()))
        return out

    facts = scan(True)

    def build() -> None:
        for found, head, _ in facts:
            build_report(found, name="bench", sha256=None, size_bytes=None, head_digest=head)

    for name, stage in (("read", lambda: scan(False)), ("read + scan", lambda: scan(True)),
                        ("build_report", build)):
        best = float("inf")
        for _ in range(9):
            started = time.process_time()
            stage()
            best = min(best, time.process_time() - started)
        print(f"{name}: {best * 1000:.1f} ms CPU per pass of {len(logs)} logs")


def _run(src: Path, passes: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, __file__, "--child", str(passes)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _instructions(src: Path, passes: int) -> tuple[int, float]:
    """(instructions callgrind counted, MiB of one pass) of one child run."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory(prefix="coreepi-callgrind-") as tmp:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
             sys.executable, __file__, "--child", str(passes)],
            env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from callgrind: {done.stderr[-500:]}")
    return int(found.group(1)), json.loads(done.stdout.strip().splitlines()[-1])["mib"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, action="append", default=[], help="another tree's src/")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        _child(args.child)
        return 0
    if args.stages:
        _stages()
        return 0
    trees = [t.resolve() for t in (REPO / "src", *args.src)]
    rates: dict[Path, list[float]] = {t: [] for t in trees}
    for round_ in range(args.rounds):
        for tree in trees if round_ % 2 == 0 else trees[::-1]:
            out = _run(tree, args.passes)
            rates[tree] += [out["mib"] / s for s in out["seconds"]]
            print(f"round {round_ + 1} {tree}: median {statistics.median(rates[tree][-args.passes:]):.1f}"
                  f" MiB per CPU s, {out['right']}/{out['logs']} right", flush=True)
    print("\n| tree | MiB per CPU s, median (min–max) of passes |\n|---|---:|")
    for tree, values in rates.items():
        print(f"| {tree} | {statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f}) |")
    if args.instructions:
        print("\n| tree | instructions, one steady pass | per MiB |\n|---|---:|---:|")
        for tree in trees:
            (one, mib), (none, _) = _instructions(tree, 1), _instructions(tree, 0)
            print(f"| {tree} | {one - none:,} | {(one - none) / mib:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
