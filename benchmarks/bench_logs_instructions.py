#!/usr/bin/env python3
"""Instructions per MiB of the log parsers, counted by valgrind's callgrind:
a measure that, unlike CPU time, does not move with the load of a shared
machine, so two source trees can be compared on a busy one.

Inputs (once each, the same as one pass of ``bench_logs.py``): the 713
titled syzkaller console logs concatenated (3.7 MiB; every report built,
as ``iter_kernel_log`` does), a sparse console log as ``bench_logs.py``
builds it (32 MiB: the logs' own pre-report lines repeated, one titled log
after every 10 MiB of them; made once by the parent) and krashpad's 60
hs_err logs parsed one by one (1.15 MiB). Each tree runs one child under
``valgrind --tool=callgrind --dump-before=time_process_time``: the child
reads the inputs and warms up (a 200 kB piece of the kernel input and one
hs_err log, so lazily compiled regexps are not counted), then parses each
input whole, calling ``time.process_time()`` between the phases; callgrind
writes (and zeroes) its counters at each such call, so each phase's count
is one dump's total, start-up and input reading in none of them.

Run by hand (needs valgrind; ≈ 100× slower than a plain run)::

    .venv/bin/python benchmarks/bench_logs_instructions.py [--src OTHER/src] [--json-out out.json]

``--src`` (repeatable) adds trees to compare (``git archive REV src | tar
-x -C DIR``), each imported through ``PYTHONPATH``; this tree's ``src`` is
always measured first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1 << 20
PARSERS = ("kernel", "sparse", "hs_err")
SPARSE_MIB = 32


def _inputs() -> tuple[bytes, list[bytes], list[bytes], list[str | None]]:
    """(kernel log, hs_err logs, the syzkaller logs and their titles), as
    ``bench_logs.py`` builds them."""
    sys.path.insert(0, str(HERE))
    from bench_logs import TESTDATA, _hs_err_logs, _syzkaller_logs  # noqa: PLC0415 - child only

    kernel, titles = _syzkaller_logs(TESTDATA / "kernel-oops-syzkaller")
    hs_err, _ = _hs_err_logs(TESTDATA / "jvm-hs_err-krashpad")
    return b"".join(kernel), hs_err, kernel, titles


def _write_sparse(path: Path) -> None:
    """The sparse log, made once by the parent with this tree's parser (which
    finds each log's first report: the noise is the lines before it)."""
    from bench_logs import _fill_sparse, _noise  # noqa: PLC0415 - after _inputs set sys.path

    _, _, logs, titles = _inputs()
    _fill_sparse(path, _noise(logs), logs, titles, SPARSE_MIB * MB, 10 * MB)


def _child(sparse_path: Path) -> None:
    """Read the inputs, warm up, then parse each input whole, with a
    ``time.process_time()`` call (callgrind's dump marker) after the set-up
    and after each parser."""
    from coreepi.parse.jvm.hs_err import parse_hs_err  # noqa: PLC0415 - from PYTHONPATH's tree
    from coreepi.parse.kernel.oops import iter_kernel_log  # noqa: PLC0415

    kernel, hs_err, _, _ = _inputs()
    sparse = sparse_path.read_bytes()
    list(iter_kernel_log(kernel[:200_000], name="warm-up"))
    parse_hs_err(hs_err[0], name="warm-up")
    time.process_time()
    sum(1 for _ in iter_kernel_log(kernel, name="bench"))
    time.process_time()
    sum(1 for _ in iter_kernel_log(sparse, name="bench"))
    time.process_time()
    sum(parse_hs_err(log, name="bench") is not None for log in hs_err)
    time.process_time()


def _counts(src: Path, sparse_path: Path) -> dict[str, int]:
    """Instructions per parser (PARSERS) of one child run on tree ``src``:
    the totals of callgrind's dumps 2 to 4 (dump 1 is the set-up)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory(prefix="coreepi-callgrind-") as tmp:
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-before=time_process_time",
             f"--callgrind-out-file={tmp}/out", sys.executable, __file__, "--child",
             "--sparse-file", str(sparse_path)],
            env=env, capture_output=True, text=True, check=True)
        totals = []
        for number in range(2, 2 + len(PARSERS)):
            dump = Path(f"{tmp}/out.{number}").read_text()
            found = re.search(r"^totals: (\d+)", dump, re.M)
            if found is None:
                raise RuntimeError(f"no totals in callgrind dump {number}")
            totals.append(int(found.group(1)))
    return dict(zip(PARSERS, totals, strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, action="append", default=[], help="another tree's src/")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sparse-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.sparse_file)
        return 0
    kernel, hs_err, _, _ = _inputs()
    results = []
    print("| tree | parser | MiB | instructions | instructions per MiB |\n|---|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="coreepi-callgrind-sparse-") as work:
        sparse_path = Path(work) / "sparse.log"
        _write_sparse(sparse_path)
        sizes = {"kernel": len(kernel) / MB, "sparse": sparse_path.stat().st_size / MB,
                 "hs_err": sum(map(len, hs_err)) / MB}
        for src in [REPO / "src", *args.src]:
            counts = _counts(src.resolve(), sparse_path)
            for what in PARSERS:
                spent = counts[what]
                results.append({"src": str(src), "parser": what, "mib": round(sizes[what], 2),
                                "instructions": spent, "per_mib": round(spent / sizes[what])})
                print(f"| {src} | {what} | {sizes[what]:.2f} | {spent:,} | {spent / sizes[what]:,.0f} |",
                      flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
