"""Make the planned crashes' real cores, in parallel.

Each job runs one workload under gdb (:func:`coreepi.simulate.faults.run_under_gdb`):
the program crashes on its own (a bug) or after injected faults (hardware),
gdb writes the core with ``gcore`` at the fatal signal — core_pattern is
never touched — and the job compresses it with zstd into the fleet
directory. Jobs run in a process pool (``spawn``: no state is inherited from
the caller); an interrupted run kills its gdb and program by pid.

A run that does not crash (a race that did not fire in time, faults that hit
dead values) is retried, up to ``attempts`` runs; what every attempt did is
returned for ``run.json``.
"""

from __future__ import annotations

import multiprocessing
import shutil
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from coreepi.simulate.faults import run_under_gdb

__all__ = ["CoreJob", "failure_reason", "make_cores", "progress_reporter", "run_job"]

#: zstd level of the written cores (3: fast; cores of these programs shrink ~15x)
ZSTD_LEVEL = 3


@dataclass(frozen=True, slots=True)
class CoreJob:
    """One crash to make: run ``binary argv`` (with ``faults``) and write the
    zstd-compressed core to ``out_core``; scratch files go to ``workdir``."""

    name: str
    binary: str
    argv: tuple[str, ...]
    out_core: str
    workdir: str
    faults: tuple[dict[str, Any], ...] = ()
    pass_signals: tuple[str, ...] = ()
    stack_kib: int | None = None
    timeout: float = 60.0
    attempts: int = 3


def _compress(raw: Path, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name("." + out.name + ".tmp")
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    with open(raw, "rb") as src, open(tmp, "wb") as dst:
        cctx.copy_stream(src, dst)
    tmp.rename(out)
    return out.stat().st_size


def run_job(job: CoreJob) -> dict[str, Any]:
    """Make one core (in a pool worker or inline). Returns what happened:
    ``outcome`` (``crashed`` or the last failure), ``attempts`` (each run's
    record), sizes in bytes."""
    workdir = Path(job.workdir)
    records: list[dict[str, Any]] = []
    result: dict[str, Any] = {"name": job.name, "outcome": "not-run", "attempts": records}
    try:
        for attempt in range(job.attempts):
            adir = workdir / f"attempt-{attempt}"
            raw = adir / "core"
            run = run_under_gdb(
                Path(job.binary),
                job.argv,
                raw,
                adir,
                faults=job.faults,
                pass_signals=job.pass_signals,
                stack_kib=job.stack_kib,
                timeout=job.timeout,
            )
            records.append(run.as_dict())
            result["outcome"] = run.outcome
            if run.outcome == "crashed" and run.core is not None:
                result["core_bytes"] = run.core.stat().st_size
                result["compressed_bytes"] = _compress(run.core, Path(job.out_core))
                result["crash"] = run.crash
                break
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _worker_init() -> None:
    """Pool workers leave Ctrl-C to the parent (which stops them with
    SIGTERM); SIGTERM unwinds the job, whose ``finally`` kills its gdb and
    program by pid."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_interrupt)


def make_cores(
    jobs: Sequence[CoreJob],
    workers: int = 2,
    on_done: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` with ``workers`` processes (1: inline). Returns name ->
    :func:`run_job`'s result; ``on_done`` is called as each finishes."""
    results: dict[str, dict[str, Any]] = {}
    if workers <= 1:
        for job in jobs:
            results[job.name] = run_job(job)
            if on_done:
                on_done(results[job.name])
        return results
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init)
    try:
        pending: set[Future[dict[str, Any]]] = {pool.submit(run_job, j) for j in jobs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                res = fut.result()
                results[res["name"]] = res
                if on_done:
                    on_done(res)
    except BaseException:
        # stop now: no new jobs, and the running ones unwind (their finally
        # kills gdb and the program); only our own workers are signalled
        workers_now = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in workers_now:
            if proc.is_alive():
                proc.terminate()
        for proc in workers_now:
            proc.join(timeout=30)
        raise
    pool.shutdown(wait=True)
    return results


def failure_reason(record: dict[str, Any]) -> str:
    """A :func:`run_job` result's failure in words: the outcome and the first
    line of the last attempt's error (``exited``: the program ran to its end)."""
    outcome = str(record.get("outcome"))
    if outcome == "exited":
        return "exited: the program ran to its end, the bug or fault did not fire"
    attempts = record.get("attempts") or [{}]
    error = str(attempts[-1].get("error") or "").strip().splitlines()
    return f"{outcome}: {error[0]}" if error else outcome


def progress_reporter(say: Callable[[str], None], noun: str) -> Callable[[dict[str, Any]], None]:
    """An ``on_done`` callback for :func:`make_cores` that calls ``say`` with
    a count every 25 runs (``"  25 <noun>"``) and, as it happens, each
    planned crash whose attempts all ended without a crash: a bug that
    never fires would otherwise run silently for minutes."""
    done = 0

    def progress(record: dict[str, Any]) -> None:
        nonlocal done
        done += 1
        if record.get("outcome") != "crashed":
            tries = len(record.get("attempts") or [])
            say(f"  {record['name']}: no crash in {tries} attempts ({failure_reason(record)})")
        if done % 25 == 0:
            say(f"  {done} {noun}")

    return progress
