#!/usr/bin/env python3
"""Benchmark ``coreepi inspect --json`` against ``gdb`` and ``eu-stack``.

Makes real cores of ``programs/heap_threads.c`` with gdb's ``gcore`` at the
fatal SIGSEGV, in four sizes:

    small              ~10 MB core: 9 MiB of heap, one thread
    heap-1g            ~1 GB core: 1 GiB of touched heap, one thread
    threads-200        200 blocked worker threads (+ main), one crashes
    heap-1g-threads-200  both

then times, on each core, over ``--runs`` runs (after one untimed warm-up run
per tool, which also checks that the tool found the crash):

    coreepi inspect CORE --exe PROG --json         (--view text: without --json)
    the same with --baseline's command             (as coreepi-base, e.g. main's tree)
    gdb -batch -nx -ex 'set debuginfod enabled off' -ex 'thread apply all bt' PROG CORE
    eu-stack --core CORE --executable PROG          (if installed)

Each run is started by ``programs/measure.c`` (fork + exec + wait4), which
reports wall time, CPU time and the child's own peak RSS. The page cache is
*not* dropped between runs (that needs root and changes the machine's state):
the numbers are warm-cache numbers, which is what the warm-up run is for.

Everything (binaries, cores, outputs) lives in one work directory: a fresh
temporary directory by default (deleted at the end unless ``--keep``), or
``--workdir`` (e.g. ``benchmarks/out/``, which git ignores). Nothing is
written anywhere else and no global setting (core_pattern, ulimits,
caches) is changed.

Usage::

    .venv/bin/python benchmarks/bench_inspect.py --runs 5 [--json-out results.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "programs"
REPO = HERE.parent

#: the goals of the issue
GOAL_RATIO_VS_GDB = 0.5  # coreepi time / gdb time on the biggest case
GOAL_PEAK_RSS_MIB = 200
GOAL_FLAT = 1.5  # coreepi time and RSS on the 1 GB core / on the small core


@dataclass(frozen=True)
class Case:
    name: str
    heap_mib: int
    threads: int
    description: str


@dataclass
class Sample:
    wall_s: float
    cpu_s: float
    maxrss_mib: float
    status: int


@dataclass
class Result:
    case: str
    tool: str
    command: list[str]
    core_bytes: int
    samples: list[Sample] = field(default_factory=list)
    warmup_ok: bool = True
    warmup_problem: str | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(s.wall_s for s in self.samples)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(s.cpu_s for s in self.samples)

    @property
    def peak_rss_mib(self) -> float:
        return max(s.maxrss_mib for s in self.samples)


def cases(heap_mib: int, threads: int) -> list[Case]:
    return [
        Case("small", 9, 0, "9 MiB heap, 1 thread"),
        Case(f"heap-{_size(heap_mib)}", heap_mib, 0, f"{heap_mib} MiB touched heap, 1 thread"),
        Case(f"threads-{threads}", 0, threads, f"{threads} workers + main, 256 KiB stacks"),
        Case(
            f"heap-{_size(heap_mib)}-threads-{threads}",
            heap_mib,
            threads,
            f"{heap_mib} MiB touched heap, {threads} workers + main",
        ),
    ]


def _size(mib: int) -> str:
    return f"{mib // 1024}g" if mib % 1024 == 0 else f"{mib}m"


# --------------------------------------------------------------------------
# building and crashing


def _check(argv: list[str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    return proc


def build(workdir: Path) -> tuple[Path, Path]:
    cc = os.environ.get("CC", "gcc")
    prog = workdir / "heap_threads"
    measure = workdir / "measure"
    _check([cc, "-g", "-O0", "-fno-omit-frame-pointer", "-pthread", "-o", str(prog),
            str(PROGRAMS / "heap_threads.c")])  # fmt: skip
    _check([cc, "-O2", "-o", str(measure), str(PROGRAMS / "measure.c")])
    return prog, measure


def make_core(prog: Path, case: Case, workdir: Path) -> Path:
    """Run ``prog`` under gdb and write its core with gcore when SIGSEGV stops it."""
    core = workdir / f"core.{case.name}"
    if core.exists():
        core.unlink()
    argv = [
        "gdb", "-batch", "-nx",
        "-ex", "set pagination off",
        "-ex", "set confirm off",
        "-ex", "set debuginfod enabled off",
        "-ex", "run",
        "-ex", f"gcore {core}",
        "-ex", "kill",
        "--args", str(prog), str(case.heap_mib), str(case.threads),
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        check=False,
        cwd=workdir,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=1800,
    )
    text = proc.stdout + proc.stderr
    if not core.exists() or "SIGSEGV" not in text:
        raise SystemExit(f"gdb made no core for {case.name}:\n{text[-3000:]}")
    print(
        f"  {case.name}: core {core.stat().st_size / 1e6:.1f} MB "
        f"(gcore took {time.monotonic() - started:.1f} s)",
        flush=True,
    )
    return core


def _env() -> dict[str, str]:
    # No debuginfod for anyone: no network, same debug files for every tool.
    env = dict(os.environ, DEBUGINFOD_URLS="", LC_ALL="C")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


# --------------------------------------------------------------------------
# tools


def tool_commands(coreepi: list[str], prog: Path, core: Path, view: str = "json",
                  baseline: list[str] | None = None) -> dict[str, list[str]]:
    gdb = [
        "gdb", "-batch", "-nx",
        "-ex", "set debuginfod enabled off",
        "-ex", "thread apply all bt",
        str(prog), str(core),
    ]  # fmt: skip
    tools = {
        "coreepi": [*coreepi, "inspect", str(core), "--exe", str(prog),
                    *(["--json"] if view == "json" else [])],
        "gdb": gdb,
    }
    if baseline:  # another coreepi (e.g. main's tree), timed in the same rounds
        tools["coreepi-base"] = [*baseline, *tools["coreepi"][len(coreepi):]]
    if shutil.which("eu-stack"):
        tools["eu-stack"] = ["eu-stack", "--core", str(core), "--executable", str(prog)]
    return tools


def validate(tool: str, output: str, case: Case) -> str | None:
    """Why the tool's output does not show the crash, or None when it does."""
    want_threads = case.threads + 1
    if tool == "coreepi-base":
        tool = "coreepi"
    if tool == "coreepi" and not output.lstrip().startswith(("{", "[")):  # the text view
        if "killed by SIGSEGV" not in output or "crash+0x" not in output:
            return "text view without the signal or a frame in crash()"
        return None
    if tool == "coreepi":
        try:
            report = json.loads(output)
        except json.JSONDecodeError as exc:
            return f"output is not JSON: {exc}"
        threads = report.get("threads", [])
        if len(threads) != want_threads:
            return f"{len(threads)} threads, want {want_threads}"
        frames = threads[0].get("frames") or []
        if not frames or frames[0].get("function") != "crash":
            return f"crashed thread's frame #0 is not crash(): {frames[:1]}"
        unwound = sum(1 for t in threads if len(t.get("frames") or []) >= 4)
        if unwound != want_threads:
            return f"only {unwound}/{want_threads} threads have >= 4 frames"
        return None
    if tool == "gdb":
        if "in crash (" not in output:
            return "no frame in crash()"
        n = len(re.findall(r"^Thread \d+ ", output, re.MULTILINE))
        return None if n == want_threads else f"{n} threads, want {want_threads}"
    if tool == "eu-stack":
        if not re.search(r"^#0\s+0x[0-9a-f]+ crash$", output, re.MULTILINE):
            return "no frame #0 in crash"
        n = len(re.findall(r"^TID \d+:", output, re.MULTILINE))
        return None if n == want_threads else f"{n} threads, want {want_threads}"
    return None


def run_once(measure: Path, argv: list[str], workdir: Path, capture: bool) -> tuple[Sample, str]:
    result = workdir / "measure.out"
    out_path = workdir / "tool.stdout"
    with open(out_path if capture else os.devnull, "w") as out:
        subprocess.run(
            [str(measure), str(result), *argv],
            cwd=workdir,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
            check=False,
        )
    fields = dict(kv.split("=") for kv in result.read_text().split())
    sample = Sample(
        wall_s=int(fields["wall_ns"]) / 1e9,
        cpu_s=(int(fields["user_us"]) + int(fields["sys_us"])) / 1e6,
        maxrss_mib=int(fields["maxrss_kib"]) / 1024,
        status=int(fields["status"]),
    )
    text = out_path.read_text(errors="replace") if capture else ""
    return sample, text


# --------------------------------------------------------------------------
# reporting


def machine() -> dict[str, str]:
    def first(cmd: list[str]) -> str:
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, timeout=30, check=False
            ).stdout
            return out.splitlines()[0].strip() if out else "?"
        except (OSError, subprocess.SubprocessError):
            return "?"

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = _search(r"MemTotal:\s+(\d+)", "/proc/meminfo")
    if mem != "?":
        mem = f"{int(mem) / 1024 / 1024:.1f} GiB"
    os_name = _search(r'PRETTY_NAME="([^"]*)"', "/etc/os-release")
    try:
        import drgn

        drgn_version = drgn.__version__
    except ImportError:
        drgn_version = "?"
    return {
        "cpu": cpu,
        "cpus": str(os.cpu_count()),
        "memory": mem,
        "kernel": platform.release(),
        "os": os_name,
        "python": platform.python_version(),
        "drgn": drgn_version,
        "gdb": first(["gdb", "--version"]),
        "eu-stack": (
            first(["eu-stack", "--version"]) if shutil.which("eu-stack") else "not installed"
        ),
        "coreepi_commit": first(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _search(pattern: str, path: str) -> str:
    try:
        m = re.search(pattern, Path(path).read_text())
    except OSError:
        return "?"
    return m.group(1) if m else "?"


def print_table(results: list[Result], runs: int) -> None:
    print(f"\nMedians of {runs} warm runs (after one warm-up run per tool); "
          "peak RSS is the largest of the runs.\n")  # fmt: skip
    header = (
        f"| {'case':<22} | {'core':>8} | {'tool':<8} | {'wall s':>7} | {'cpu s':>6} "
        f"| {'peak RSS MiB':>12} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for r in results:
        print(
            f"| {r.case:<22} | {r.core_bytes / 1e6:>5.0f} MB | {r.tool:<8} | {r.median_s:>7.3f} | "
            f"{r.median_cpu_s:>6.3f} | {r.peak_rss_mib:>12.1f} |"
        )
    by = {(r.case, r.tool): r for r in results}
    case_names = list(dict.fromkeys(r.case for r in results))
    others = [t for t in ("gdb", "eu-stack", "coreepi-base") if any(r.tool == t for r in results)]
    print(
        "\nRatios of medians, coreepi / other tool (< 1 means coreepi is faster), "
        "wall time and CPU time:\n"
    )
    titles = [f"coreepi/{t} {kind}" for t in others for kind in ("wall", "cpu")]
    header = f"| {'case':<22} | " + " | ".join(f"{title:>21}" for title in titles) + " |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for name in case_names:
        mine = by.get((name, "coreepi"))
        cells = []
        for t in others:
            other = by.get((name, t))
            for kind in ("wall", "cpu"):
                if mine and other:
                    a, b = (
                        (mine.median_s, other.median_s)
                        if kind == "wall"
                        else (mine.median_cpu_s, other.median_cpu_s)
                    )
                    cells.append(f"{a / b:>21.2f}" if b > 0 else f"{'-':>21}")
                else:
                    cells.append(f"{'-':>21}")
        print(f"| {name:<22} | " + " | ".join(cells) + " |")


def goals(results: list[Result], case_list: list[Case]) -> dict[str, object]:
    by = {(r.case, r.tool): r for r in results}
    small, big, _thr, both = (c.name for c in case_list)
    out: dict[str, object] = {}
    mine = [r for r in results if r.tool == "coreepi"]
    if (small, "coreepi") in by and (big, "coreepi") in by:
        a, b = by[(small, "coreepi")], by[(big, "coreepi")]
        t_ratio, m_ratio = b.median_s / a.median_s, b.peak_rss_mib / a.peak_rss_mib
        out["flat_time_ratio"] = round(t_ratio, 3)
        out["flat_rss_ratio"] = round(m_ratio, 3)
        out["flat_ok"] = t_ratio <= GOAL_FLAT and m_ratio <= GOAL_FLAT
    if (both, "coreepi") in by and (both, "gdb") in by:
        ratio = by[(both, "coreepi")].median_s / by[(both, "gdb")].median_s
        out["vs_gdb_ratio"] = round(ratio, 3)
        out["vs_gdb_ok"] = ratio <= GOAL_RATIO_VS_GDB
    if mine:
        peak = max(r.peak_rss_mib for r in mine)
        out["peak_rss_mib"] = round(peak, 1)
        out["peak_rss_ok"] = peak < GOAL_PEAK_RSS_MIB
    return out


def print_goals(g: dict[str, object], case_list: list[Case]) -> None:
    small, big, _thr, both = (c.name for c in case_list)
    print("\nGoals:")
    if "flat_ok" in g:
        print(
            f"  flat in core size ({big} / {small}): time x{g['flat_time_ratio']}, "
            f"peak RSS x{g['flat_rss_ratio']} (goal <= x{GOAL_FLAT}): "
            + ("met" if g["flat_ok"] else "NOT met")
        )
    if "vs_gdb_ok" in g:
        print(
            f"  {both}: coreepi / gdb = {g['vs_gdb_ratio']} (goal <= {GOAL_RATIO_VS_GDB}): "
            + ("met" if g["vs_gdb_ok"] else "NOT met")
        )
    if "peak_rss_ok" in g:
        print(
            f"  coreepi peak RSS {g['peak_rss_mib']} MiB (goal < {GOAL_PEAK_RSS_MIB} MiB): "
            + ("met" if g["peak_rss_ok"] else "NOT met")
        )


# --------------------------------------------------------------------------


def default_coreepi() -> list[str]:
    beside = Path(sys.executable).parent / "coreepi"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("coreepi")
    if found:
        return [found]
    return [sys.executable, "-m", "coreepi"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per tool and core (default 5)")
    ap.add_argument("--workdir", type=Path, help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and its cores")
    ap.add_argument("--heap-mib", type=int, default=1024, help="touched heap of the big cases")
    ap.add_argument("--threads", type=int, default=200, help="worker threads of the thread cases")
    ap.add_argument("--cases", help="comma-separated subset of the case names")
    ap.add_argument("--tools", default="coreepi,gdb,eu-stack", help="comma-separated tools to time")
    ap.add_argument("--coreepi", help="coreepi command (default: the one beside this Python)")
    ap.add_argument("--baseline", help="a second coreepi command to time as coreepi-base in the "
                    "same rounds, e.g. 'env PYTHONPATH=<main>/src .venv/bin/python -m coreepi'")
    ap.add_argument("--json-out", type=Path, help="write all samples and the summary here")
    ap.add_argument("--view", choices=("json", "text"), default="json",
                    help="what coreepi prints: the CrashReport JSON (default) or the text view")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    for tool in ("gcc", "gdb"):
        if shutil.which(os.environ.get("CC", "gcc") if tool == "gcc" else tool) is None:
            raise SystemExit(f"{tool} is needed to build the programs and make the cores")
    coreepi = args.coreepi.split() if args.coreepi else default_coreepi()
    baseline = args.baseline.split() if args.baseline else None
    wanted_tools = set(args.tools.split(",")) | ({"coreepi-base"} if baseline else set())
    case_list = cases(args.heap_mib, args.threads)
    selected = [c for c in case_list if not args.cases or c.name in args.cases.split(",")]
    if not selected:
        ap.error(f"no such case; cases are {', '.join(c.name for c in case_list)}")

    if args.workdir:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        remove = False
    else:
        workdir = Path(tempfile.mkdtemp(prefix="coreepi-bench-"))
        remove = not args.keep
    info = machine()
    print(f"work dir: {workdir}")
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    results: list[Result] = []
    try:
        prog, measure = build(workdir)
        print("making cores with gdb's gcore:", flush=True)
        cores = {c.name: make_core(prog, c, workdir) for c in selected}
        for case in selected:
            core = cores[case.name]
            commands = {
                t: cmd
                for t, cmd in tool_commands(coreepi, prog, core, args.view, baseline).items()
                if t in wanted_tools
            }
            print(f"timing {case.name} ({case.description}):", flush=True)
            case_results = {
                t: Result(case.name, t, cmd, core.stat().st_size) for t, cmd in commands.items()
            }
            for tool, cmd in commands.items():  # warm-up + output check
                sample, text = run_once(measure, cmd, workdir, capture=True)
                problem = (
                    f"exit status {sample.status}: {text[-500:]}"
                    if sample.status != 0
                    else validate(tool, text, case)
                )
                if problem:
                    case_results[tool].warmup_ok = False
                    case_results[tool].warmup_problem = problem
                    print(f"  WARNING: {tool} on {case.name}: {problem}", flush=True)
            for _ in range(args.runs):  # interleaved, so drift hits every tool alike
                for tool, cmd in commands.items():
                    sample, _ = run_once(measure, cmd, workdir, capture=False)
                    case_results[tool].samples.append(sample)
            for r in case_results.values():
                print(f"  {r.tool:<8} median {r.median_s:.3f} s, peak RSS {r.peak_rss_mib:.1f} MiB",
                      flush=True)  # fmt: skip
            results.extend(case_results.values())
            if remove:
                core.unlink()  # big cores: free the disk as soon as they are done
        print_table(results, args.runs)
        g = goals(results, case_list)
        print_goals(g, case_list)
        if args.json_out:
            args.json_out.write_text(
                json.dumps(
                    {
                        "machine": info,
                        "runs": args.runs,
                        "cases": [asdict(c) for c in selected],
                        "results": [
                            {
                                **{k: v for k, v in asdict(r).items()},
                                "median_s": r.median_s,
                                "median_cpu_s": r.median_cpu_s,
                                "peak_rss_mib": r.peak_rss_mib,
                            }
                            for r in results
                        ],
                        "goals": g,
                    },
                    indent=2,
                )
                + "\n"
            )
            print(f"\nwrote {args.json_out}")
    finally:
        if remove:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
