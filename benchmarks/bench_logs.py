#!/usr/bin/env python3
"""Benchmark the log parsers: kernel logs and JVM hs_err logs, MB/s and
reports/s, against ``grep -c`` over the same bytes as a floor.

Inputs: the real logs of ``tests/data/vendored/`` — the syzkaller kernel
crash logs (``kernel-oops-syzkaller/``, each file's header lines up to the
first blank line stripped, so only the raw log remains) and the krashpad
hs_err logs (``jvm-hs_err-krashpad/``) — each set concatenated over and over
into one file of ``--size-mb`` (default 1024 MiB) in a temporary directory,
deleted afterwards.

Measured, each in this one process: wall clock (``time.perf_counter``) and
CPU time (``time.process_time``; grep's from ``RUSAGE_CHILDREN``); rates are
per CPU second, which a shared, loaded machine disturbs far less than wall
time:

    kernel     iter_kernel_log(path): every crash report of the 1 GB console log;
               counted: logs whose first report carries syzbot's TITLE (the
               corpus truth; a report belongs to the log holding its header)
    sparse     iter_kernel_log(path) on a console log that is mostly noise, as
               a fleet's are: the syzkaller logs' own lines before their first
               report (boot, services, the fuzzer's chatter; 0 reports by
               themselves) repeated, with one whole titled log put in every
               ``--sparse-every-mb`` (default 10) MiB; counted: inserted logs
               whose first report carries their TITLE, and reports outside
               any inserted log (false ones; must be 0)
    telemetry  parse_telemetry(path): every hardware event of the same file
    hs_err     parse_hs_err(bytes) on each log of the hs_err file in turn
               (one report per log; the file is read once into memory
               beforehand, per log, so only parsing is timed); counted: logs
               whose pid and JDK version match tests/data/hs_err_expected.toml
    grep       grep -c PATTERN FILE (LC_ALL=C): the cost of reading and
               scanning the bytes once, a floor no parser can beat (run on
               the dense and on the sparse file)

Not a test; run it by hand::

    .venv/bin/python benchmarks/bench_logs.py [--size-mb 1024] [--sparse-every-mb 10] [--json-out out.json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TESTDATA = REPO / "tests" / "data" / "vendored"  # syzkaller and krashpad logs (tests/data/NOTICE)

from coreepi.model.report import CrashReport
from coreepi.parse.jvm.hs_err import parse_hs_err
from coreepi.parse.kernel.oops import iter_kernel_log
from coreepi.parse.kernel.scan import ScanLimits
from coreepi.parse.telemetry.logs import parse_telemetry

MB = 1 << 20
KERNEL_GREP = r"BUG:\|Oops\|WARNING:\|general protection\|KASAN:\|Kernel panic"
HS_ERR_GREP = "A fatal error has been detected"


def _syzkaller_logs(folder: Path) -> tuple[list[bytes], list[str | None]]:
    """The raw logs and, per log, syzbot's title of its first report (None:
    the log holds no crash)."""
    out, titles = [], []
    for f in sorted(folder.iterdir()):
        raw = f.read_bytes()
        head, sep, body = raw.partition(b"\n\n")
        if sep and b"TITLE:" in head:
            out.append(body if body.endswith(b"\n") else body + b"\n")
            title = next((h[6:].strip().decode() for h in head.split(b"\n") if h.startswith(b"TITLE:")), "")
            titles.append(title or None)
    return out, titles


def _correct_reports(reports: list[tuple[int, str]], pieces: list[bytes], titles: list[str | None],
                     written: int) -> tuple[int, int]:
    """(logs whose first report has syzbot's title, logs with a title) over
    the ``written`` logs of the concatenated file; ``reports`` are (line
    number, syzbot title) in log order. A report belongs to the log whose
    lines hold its header line."""
    starts, line = [], 1
    for i in range(written):
        starts.append(line)
        line += pieces[i % len(pieces)].count(b"\n")
    first: dict[int, str] = {}
    for number, title in reports:
        first.setdefault(bisect.bisect_right(starts, number) - 1, title)
    expected = [(i, titles[i % len(titles)]) for i in range(written) if titles[i % len(titles)]]
    return sum(first.get(i) == t for i, t in expected), len(expected)


def _noise(logs: list[bytes]) -> bytes:
    """The lines of the syzkaller logs before their first report (the
    parser's own finding), joined: real console noise that holds no report
    by itself (checked by the caller)."""
    out = []
    for log in logs:
        first = next(iter_kernel_log(log, name="noise"), None)
        line = int(first.artifact.line or 1) if first is not None and first.artifact else 1
        out.extend(log.split(b"\n")[: line - 1])
    # a reboot marker after other text starts a report: not noise
    return b"".join(l + b"\n" for l in out if b"Booting the kernel" not in l)


def _fill_sparse(path: Path, noise: bytes, logs: list[bytes], titles: list[str | None], size: int,
                 every: int) -> list[tuple[int, int, str]]:
    """Write ``noise`` over and over until ``size`` bytes, one titled log of
    ``logs`` after each ``every`` bytes of noise; the inserted logs as
    (first line, line after the last, TITLE)."""
    titled = [(log, t) for log, t in zip(logs, titles) if t]
    inserted: list[tuple[int, int, str]] = []
    written = lines = 0
    with open(path, "wb") as fh:
        while written < size:
            gap = 0
            while gap < every and written < size:
                piece = noise[: every - gap] if every - gap < len(noise) else noise
                piece = piece[: piece.rfind(b"\n") + 1] or noise
                fh.write(piece)
                gap += len(piece)
                written += len(piece)
                lines += piece.count(b"\n")
            if written >= size:
                break
            log, title = titled[len(inserted) % len(titled)]
            fh.write(log)
            inserted.append((lines + 1, lines + 1 + log.count(b"\n"), title))
            written += len(log)
            lines += log.count(b"\n")
    return inserted


def _sparse_right(reports: list[tuple[int, str]], inserted: list[tuple[int, int, str]]) -> tuple[int, int]:
    """(inserted logs whose first report has their TITLE, reports outside
    every inserted log)."""
    starts = [first for first, _, _ in inserted]
    first: dict[int, str] = {}
    stray = 0
    for number, title in reports:
        i = bisect.bisect_right(starts, number) - 1
        if i < 0 or number >= inserted[i][1]:
            stray += 1
        else:
            first.setdefault(i, title)
    return sum(first.get(i) == t for i, (_, _, t) in enumerate(inserted)), stray


def _hs_err_logs(folder: Path) -> tuple[list[bytes], list[dict]]:
    """The logs and their hand-read truth (``tests/data/hs_err_expected.toml``)."""
    truth = tomllib.loads((REPO / "tests" / "data" / "hs_err_expected.toml").read_text(encoding="utf-8"))
    out, wants = [], []
    for f in sorted(folder.iterdir()):
        raw = f.read_bytes()
        out.append(raw if raw.endswith(b"\n") else raw + b"\n")
        wants.append(truth.get(f.stem, {}))
    return out, wants


def _hs_err_right(report: CrashReport, want: dict) -> bool:
    """The parse agrees with the hand-read pid and JDK version of its log."""
    return bool(want) and report.process.pid == want.get("pid") and (
        report.runtime.version == want.get("jdk_version"))


def _kernel_key(report: CrashReport) -> tuple[int, str]:
    """(header line, syzbot's title) of one kernel report."""
    artifact = report.artifact
    if artifact is None:
        return 0, ""
    return int(artifact.line or 0), artifact.kernel.syzbot_title if artifact.kernel else ""


def _fill(path: Path, pieces: list[bytes], size: int) -> tuple[int, int]:
    """Write ``pieces`` over and over until ``size`` bytes; (bytes, pieces written)."""
    written = count = 0
    with open(path, "wb") as fh:
        while written < size:
            for p in pieces:
                fh.write(p)
                written += len(p)
                count += 1
                if written >= size:
                    break
    return written, count


def _grep(pattern: str, path: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, matching lines) of grep -c."""
    env = {**os.environ, "LC_ALL": "C"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(["grep", "-c", pattern, str(path)], capture_output=True, text=True,
                         env=env, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, int(out.stdout.strip() or 0)


def _row(name: str, size: int, seconds: float, cpu: float, reports: int | None,
         unit: str) -> dict:
    """Rates per CPU second (robust on a shared machine); wall time kept too."""
    cpu = max(cpu, 1e-6)
    return {
        "what": name,
        "mb": round(size / MB, 1),
        "wall_seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "mb_per_cpu_s": round(size / MB / cpu, 1),
        "count": reports,
        "count_per_cpu_s": None if reports is None else round(reports / cpu, 1),
        "unit": unit,
    }


def _timed() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _sparse_rows(tmp: Path, logs: list[bytes], titles: list[str | None], size: int,
                 every: int) -> list[dict]:
    """The kernel parser and grep on the sparse console log (see the module
    docstring)."""
    noise = _noise(logs)
    if sum(1 for _ in iter_kernel_log(noise, name="noise")):
        raise SystemExit("the noise lines hold a report: not a fair sparse log")
    spath = tmp / "sparse-console.log"
    inserted = _fill_sparse(spath, noise, logs, titles, size, every)
    sbytes = spath.stat().st_size
    print(f"sparse kernel log: {sbytes / MB:.0f} MiB, {len(inserted)} logs with a crash, "
          f"one per {every / MB:.0f} MiB of noise", flush=True)
    t, c = _timed()
    found = [_kernel_key(r) for r in iter_kernel_log(spath, name="bench")]
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    right, stray = _sparse_right(found, inserted)
    rows = [_row(f"kernel-oops parser, sparse log (1 crash per {every / MB:.0f} MiB)", sbytes, wall, cpu,
                 right, f"inserted logs whose first report has their TITLE (of {len(inserted):,}; "
                        f"{len(found):,} reports, {stray} outside them)")]
    print(rows[-1], flush=True)
    secs, cpu, hits = _grep(KERNEL_GREP, spath)
    rows.append(_row("grep -c (kernel crash markers), sparse log", sbytes, secs, cpu, hits, "lines"))
    print(rows[-1], flush=True)
    spath.unlink()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--sparse-every-mb", type=int, default=10,
                    help="MiB of console noise between two reports in the sparse log")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--workdir", type=Path, help="where the big files go (default: a temp dir)")
    args = ap.parse_args(argv)
    syz, hs = TESTDATA / "kernel-oops-syzkaller", TESTDATA / "jvm-hs_err-krashpad"
    if not syz.is_dir() or not hs.is_dir():
        print(f"no test data in {TESTDATA}", file=sys.stderr)
        return 2
    size = args.size_mb * MB
    tmp = Path(tempfile.mkdtemp(prefix="coreepi-bench-logs-", dir=args.workdir))
    results: list[dict] = []
    try:
        kernel_logs, kernel_titles = _syzkaller_logs(syz)
        kpath = tmp / "console.log"
        kbytes, kfiles = _fill(kpath, kernel_logs, size)
        print(f"kernel log: {kbytes / MB:.0f} MiB ({kfiles} syzkaller logs, "
              f"{len(kernel_logs)} distinct)", flush=True)
        limits = ScanLimits()
        t, c = _timed()
        found = [_kernel_key(r) for r in iter_kernel_log(kpath, name="bench", limits=limits)]
        wall, cpu_k = time.perf_counter() - t, time.process_time() - c
        right, titled = _correct_reports(found, kernel_logs, kernel_titles, kfiles)
        results.append(_row("kernel-oops parser", kbytes, wall, cpu_k, right,
                            f"logs whose first report has syzbot's title (of {titled:,}; "
                            f"{len(found):,} reports)"))
        print(results[-1], flush=True)
        t, c = _timed()
        n = sum(1 for _ in parse_telemetry(kpath, name="bench"))
        results.append(_row("telemetry parser (same kernel log)", kbytes,
                            time.perf_counter() - t, time.process_time() - c, n, "events"))
        print(results[-1], flush=True)
        secs, cpu, hits = _grep(KERNEL_GREP, kpath)
        results.append(_row("grep -c (kernel crash markers)", kbytes, secs, cpu, hits, "lines"))
        print(results[-1], flush=True)
        kpath.unlink()
        results += _sparse_rows(tmp, kernel_logs, kernel_titles, size, args.sparse_every_mb * MB)

        hs_logs, hs_truth = _hs_err_logs(hs)
        hpath = tmp / "hs_err.log"
        hbytes, hfiles = _fill(hpath, hs_logs, size)
        print(f"hs_err logs: {hbytes / MB:.0f} MiB ({hfiles} logs, {len(hs_logs)} distinct)",
              flush=True)
        n = parsed = 0
        elapsed = cpu_s = 0.0
        with open(hpath, "rb") as fh:  # the logs, one by one, as written
            while parsed < hfiles:
                for log, want in zip(hs_logs, hs_truth):
                    data = fh.read(len(log))
                    t, c = _timed()
                    report = parse_hs_err(data, name="bench")
                    elapsed += time.perf_counter() - t
                    cpu_s += time.process_time() - c
                    n += report is not None and _hs_err_right(report, want)
                    parsed += 1
                    if parsed >= hfiles:
                        break
        results.append(_row("hs_err parser", hbytes, elapsed, cpu_s, n,
                            f"logs read right (pid, JDK version; of {hfiles:,})"))
        print(results[-1], flush=True)
        secs, cpu, hits = _grep(HS_ERR_GREP, hpath)
        results.append(_row(f"grep -c '{HS_ERR_GREP}'", hbytes, secs, cpu, hits, "lines"))
        print(results[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "size_mb": args.size_mb}
    print("\n| what | MiB | wall s | CPU s | MiB per CPU s | count | per CPU s |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        per = "" if r["count_per_cpu_s"] is None else f"{r['count_per_cpu_s']:,.0f}"
        print(f"| {r['what']} | {r['mb']:,.0f} | {r['wall_seconds']} | {r['cpu_seconds']} | "
              f"{r['mb_per_cpu_s']} | {r['count']:,} {r['unit']} | {per} |")
    if args.json_out:
        args.json_out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
