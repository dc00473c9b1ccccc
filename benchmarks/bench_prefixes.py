#!/usr/bin/env python3
"""Benchmark the collectors'-prefix reader of kernel log lines
(``coreepi.parse.kernel.prefixes``: ``normalize_line``, the kernel
scanner's view, and ``split_prefix``, the telemetry parsers' and the oops
times' view) against the two readers it replaced, taken from a git revision
(``--base``, default ``main``): ``parse/kernel/prefixes.py``'s
``normalize_line`` and ``parse/telemetry/base.py``'s ``split_prefix``.

Input: the first 300 syzkaller console logs of
``tests/data/vendored/kernel-oops-syzkaller/`` (header lines stripped),
as printed (console), and with each collector's prefix put in front of
every line: BSD syslog (``Mar 19 10:32:12 host kernel: [  12.3] …``), an
ISO-8601 console-server stamp over the printk stamp, and ``/dev/kmsg``
records. Measured: CPU seconds (``time.process_time``) of calling each
function on every line, best of 5 passes, both readers interleaved in this
one process; rates are MiB of input per CPU second.

Not a test; run it by hand::

    .venv/bin/python benchmarks/bench_prefixes.py [--base main]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from coreepi.parse.kernel import prefixes

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "vendored" / "kernel-oops-syzkaller"


def _module(base: str, path: str, name: str, tmp: Path) -> ModuleType:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{base}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    file = tmp / f"{name}.py"
    file.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(CORPUS.iterdir(), key=lambda p: (len(p.name), p.name))[:300]:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines += (text.split("\n\n", 1)[1] if text.startswith("TITLE") else text).split("\n")
    return lines


def _best(fn: Callable[[str], object], lines: list[str]) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for line in lines:
            fn(line)
        best = min(best, time.process_time() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="git revision of the readers replaced")
    args = parser.parse_args(argv)
    lines = _lines()
    shapes = {
        "console": lines,
        "BSD syslog over console": [f"Mar 19 10:32:12 host kernel: {line}" for line in lines],
        "ISO stamp over console": [f"2025-02-23T16:24:18.123456+00:00 {line}" for line in lines],
        "/dev/kmsg": [f"4,{i},{i * 1000},-;{line[15:]}" for i, line in enumerate(lines)],
    }
    with tempfile.TemporaryDirectory() as tmp:
        old_kernel = _module(args.base, "src/coreepi/parse/kernel/prefixes.py", "old_prefixes", Path(tmp))
        old_telemetry = _module(args.base, "src/coreepi/parse/telemetry/base.py", "old_base", Path(tmp))
    print(f"{'shape':26s} {'MiB':>5s}  normalize_line old → new   split_prefix old → new  (MiB per CPU s)")
    for shape, batch in shapes.items():
        mib = sum(len(line) + 1 for line in batch) / 2**20
        rates = [mib / _best(fn, batch) for fn in (
            old_kernel.normalize_line, prefixes.normalize_line,
            lambda line: old_telemetry.split_prefix(1, line), lambda line: prefixes.split_prefix(1, line))]
        print(f"{shape:26s} {mib:5.1f}  {rates[0]:8.0f} → {rates[1]:4.0f}          {rates[2]:8.0f} → {rates[3]:4.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
