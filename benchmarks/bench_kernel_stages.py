#!/usr/bin/env python3
"""Where the kernel-log parser's time goes on syzkaller's corpus, stage by
stage, and the floor that building the report objects alone sets.

Input: the 713 titled syzkaller console logs concatenated (3.7 MiB, as one
pass of ``bench_logs.py``), in memory. Each stage runs alone over every
report, the stages interleaved in one process, best of ``--repeat``; CPU
time (``time.process_time``), so a shared machine's load inflates every
stage alike and the shares stay meaningful:

    whole parse      iter_kernel_log(bytes): everything
    scan             scan_blocks: the reports' windows
    title            title_report on each scanned report
    facts            read_facts on each (with its trace frames as objects)
    model building   oops._report with title and facts given: the
                     CrashReport, thread, artifact and host objects
    frame objects    trusted(Frame, ...) for every trace frame, alone

The floor: model building plus frame objects per report, and the MiB per
CPU second the corpus would allow if everything else cost nothing.

Not a test; run it by hand::

    .venv/bin/python benchmarks/bench_kernel_stages.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_logs import MB, TESTDATA, _syzkaller_logs  # noqa: E402

from coreepi.model.report import Frame  # noqa: E402
from coreepi.model.trusted import trusted  # noqa: E402
from coreepi.parse.kernel import oops  # noqa: E402
from coreepi.parse.kernel.facts import read_facts  # noqa: E402
from coreepi.parse.kernel.scan import ScanLimits, scan_blocks  # noqa: E402
from coreepi.parse.kernel.title import title_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    logs, _ = _syzkaller_logs(TESTDATA / "kernel-oops-syzkaller")
    data = b"".join(logs)
    mib = len(data) / MB
    max_bytes = ScanLimits().max_line_chars * 4
    list(oops.iter_kernel_log(data, name="warm-up"))
    scanned = list(scan_blocks(oops._blocks(data, max_bytes)))
    titles = {id(s): title_report(s) for s in scanned}
    facts = {id(s.facts_lines): read_facts(s.facts_lines, s.prefix) for s in scanned}
    frames = [dict(f.__dict__) for fa in facts.values() for f in fa.frames]

    def models() -> None:
        # oops._report with its title and facts already made
        real = oops.title_report, oops.read_facts
        oops.title_report = lambda s: titles[id(s)]
        oops.read_facts = lambda lines, prefix: facts[id(lines)]
        try:
            for s in scanned:
                oops._report(s, "bench")
        finally:
            oops.title_report, oops.read_facts = real

    stages: dict[str, Callable[[], object]] = {
        "whole parse": lambda: list(oops.iter_kernel_log(data, name="bench")),
        "scan": lambda: list(scan_blocks(oops._blocks(data, max_bytes))),
        "title": lambda: [title_report(s) for s in scanned],
        "facts (with trace frames)": lambda: [read_facts(s.facts_lines, s.prefix) for s in scanned],
        "model building (report, thread, artifact, host)": models,
        "frame objects alone": lambda: [trusted(Frame, **k) for k in frames],
    }
    best = dict.fromkeys(stages, float("inf"))
    for _ in range(args.repeat):
        for name, run in stages.items():
            start = time.process_time()
            run()
            best[name] = min(best[name], time.process_time() - start)
    n = len(scanned)
    print(f"{mib:.2f} MiB, {n} reports ({n / mib:.0f} per MiB), {len(frames)} trace frames "
          f"({len(frames) / n:.1f} per report)\n")
    print("| stage | CPU s | µs per report | share of the whole | MiB per CPU s |\n|---|---:|---:|---:|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.3f} | {seconds / n * 1e6:.0f} | {seconds / best['whole parse']:.0%} | "
              f"{mib / seconds:.1f} |")
    floor = (best["model building (report, thread, artifact, host)"] + best["frame objects alone"]) / n
    print(f"\nfloor: {floor * 1e6:.0f} µs per report for the objects alone -> at most "
          f"{mib / (floor * n):.0f} MiB per CPU second on this corpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
