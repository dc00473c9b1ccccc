"""The analysis worker: takes queued cores from the store's queue and analyses
each in ingest's sandbox (:class:`coreepi.ingest.sandbox.Sandbox`).

A core upload is durable before it is queued (blob stored, crash row
updated, job enqueued, one transaction; see :class:`~coreepi.ingest.intake.CoreIntake`),
so the HTTP request never waits for an analysis. :class:`AnalysisWorker`
runs in ``coreepi worker`` processes (any number, on any hosts sharing a
PostgreSQL store and its blobs) or as threads of ``coreepi serve`` (the
embedded store's in-process queue). Each job: stream the blob to a temporary
file, decompress it within the server's limits, run the sandboxed analysis,
merge the result into the stored report (:func:`merge_analysis`) and
``update_crash`` — an idempotent write, so a job run twice (its first worker
died after writing, before finishing the job) changes nothing more. A job
whose crash was already analysed centrally is finished without work. An
unreadable core is a result (``core_status`` unreadable), not a failure;
failures (blob gone, store down) are retried with exponential backoff and
end as ``dead`` jobs after ``max_attempts``, listed by ``GET /api/v1/jobs``.

A worker's name says where it runs (``host:pid.start.ns:thread``: ``start``
the process's start time, so a pid the kernel gave again is not taken for
the old process; ``ns`` its pid namespace, so a container sharing the host
name does not judge another's pids). When a worker starts it looks at the
running jobs: one held by a process of this host and namespace that is
gone (a server restarted after a SIGKILL) is taken over at once
(:func:`dead_holders`), not after ``stale_after`` seconds of silence.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from coreepi import __version__
from coreepi.ingest.crashes import crash_events
from coreepi.ingest.intake import ARTIFACT, decompress_checked, merge_analysis
from coreepi.ingest.sandbox import Launcher, Sandbox, SandboxLimits
from coreepi.model.report import CrashReport
from coreepi.parse.open_input import max_decompressed_bytes
from coreepi.serve.config import ServeConfig
from coreepi.store import CoreStatus, CrashRecord, Job, JobState, Store

__all__ = ["AnalysisWorker", "dead_holders", "worker_name"]

log = logging.getLogger("coreepi.worker")


_MARKER = "analysed centrally by coreepi"  # merge_analysis's warning, and ours when unreadable


class LimitReached(Exception):
    """The analysis hit a resource limit (``SandboxResult.retryable``): the
    core is not unreadable; the job is retried (after its backoff) and ends
    ``dead`` after ``max_attempts``, the crash left unanalysed, not judged."""


class Stopping(Exception):
    """The worker was closed (the server stops) while a core was analysed:
    the analysis child was killed, so its failure says nothing about the core."""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot, field 22 of
    ``/proc/PID/stat``, proc(5)); None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces and ")"
    return stat.rsplit(")", 1)[1].split()[19]


def _pid_namespace() -> str:
    """The inode of this process's pid namespace (``/proc/self/ns/pid``)."""
    try:
        return os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return "?"  # unknown: dead_holders then judges no holder


def worker_name() -> str:
    """``host:pid.start.ns:thread`` of the calling thread (see the module docstring)."""
    pid = os.getpid()
    return (f"{socket.gethostname()}:{pid}.{_process_start(pid)}.{_pid_namespace()}:"
            f"{threading.get_ident()}")


def dead_holders(workers: set[str]) -> list[str]:
    """The names of ``workers`` whose process ran on this host, in this pid
    namespace, and is gone (no such pid, or a pid started at another time),
    sorted. A name of another host or namespace, or in another form, is left
    to the heartbeat's ``stale_after``: only the kernel of its host can tell."""
    host, ns = socket.gethostname(), _pid_namespace()
    dead = []
    for name in workers:
        where, _, rest = name.partition(":")
        pid, start, their_ns = (rest.partition(":")[0].split(".") + ["", ""])[:3]
        if where != host or their_ns != ns or ns == "?" or not pid.isdigit():
            continue
        try:
            alive = _process_start(int(pid)) == start
        except OSError:  # /proc unreadable here (hidepid): cannot tell, so alive
            alive = True
        if not alive:
            dead.append(name)
    return sorted(dead)


def _analysed_centrally(report: CrashReport) -> bool:
    """A previous run of this job already wrote its result."""
    return any(w.startswith(_MARKER) for w in report.analysis.warnings)


class AnalysisWorker:
    """Takes and runs analysis jobs of ``store`` (see the module docstring).

    ``name`` identifies the worker in the jobs table (default
    :func:`worker_name`); ``stale_after`` seconds without a heartbeat and
    another worker takes the job over (heartbeats every quarter of it).
    ``on_result`` is told each analysis's outcome (``ok``, ``unreadable``).
    ``launcher``: how the sandbox starts an analysis child (default: a new
    Python; ``coreepi worker`` forks it from a warm zygote,
    :class:`coreepi.reanalysis.warm.WarmLauncher`)."""

    def __init__(self, store: Store, config: ServeConfig, tmp_dir: Path,
                 name: str | None = None, stale_after: float = 60.0,
                 backoff_seconds: float = 30.0,
                 on_result: Callable[[str], None] | None = None,
                 launcher: Launcher | None = None) -> None:
        self.store = store
        self.config = config
        self.tmp_dir = tmp_dir
        self.name = name or worker_name()
        self._swept = False
        self.stale_after = stale_after
        self.backoff_seconds = backoff_seconds
        self.on_result = on_result or (lambda _: None)
        self._stopping = threading.Event()
        self.runner = Sandbox(SandboxLimits(config.analysis_timeout_seconds,
                                            config.analysis_memory_limit_mb, config.symbol_dirs),
                              launcher=launcher)

    def run(self, stop: threading.Event, wake: threading.Event | None = None,
            poll_seconds: float = 1.0) -> None:
        """Work until ``stop`` is set: take a job, run it; when there is none,
        wait ``poll_seconds`` or until ``wake`` is set (a new job queued here)."""
        while not stop.is_set():
            try:
                did = self.run_once()
            except Exception:
                log.exception("worker %s: taking a job failed", self.name)
                did = 0
            if not did:
                waiter = wake or stop
                waiter.wait(poll_seconds)
                if wake is not None:
                    wake.clear()

    def run_once(self) -> int:
        """Take at most one job and run it; how many were run (0 or 1). The
        first call takes over the jobs of dead processes of this host first."""
        if not self._swept:
            self._take_over_dead()
            self._swept = True
        jobs = self.store.take_jobs(self.name, 1, stale_after=self.stale_after)
        for job in jobs:
            self._run_job(job)
        return len(jobs)

    def _take_over_dead(self) -> None:
        """Make the running jobs of dead local processes stale at once."""
        running = self.store.jobs(JobState.RUNNING, limit=100_000)
        dead = dead_holders({j.worker for j in running if j.worker})
        if dead:
            n = self.store.expire_workers(dead)
            log.warning("worker %s: %d job(s) of %d dead worker(s) of this host taken over "
                        "(%s)", self.name, n, len(dead), ", ".join(dead))

    def _run_job(self, job: Job) -> None:
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job, done), daemon=True,
                                name=f"heartbeat-{job.job_id}")
        beat.start()
        try:
            self.analyse(job)
        except Exception as exc:  # noqa: BLE001 - recorded on the job, retried
            # a job cut by a stop is runnable again at once (the next start)
            backoff = 0.0 if isinstance(exc, Stopping) else self.backoff_seconds
            state = self.store.fail_job(job.job_id, self.name, f"{type(exc).__name__}: {exc}",
                                        backoff)
            log.warning("job %s failed (attempt %d): %s: %s -> %s", job.job_id, job.attempts,
                        type(exc).__name__, exc, state)
        else:
            self.store.finish_job(job.job_id, self.name)
        finally:
            done.set()
            beat.join()

    def _heartbeat(self, job: Job, done: threading.Event) -> None:
        while not done.wait(self.stale_after / 4):
            try:
                self.store.heartbeat_jobs(self.name, [job.job_id])
            except Exception:  # noqa: BLE001 - a missed beat; the next may pass
                log.warning("job %s: heartbeat failed", job.job_id)

    def analyse(self, job: Job) -> None:
        """Analyse the core of ``job`` and write the result into its crash row."""
        report = self.store.get_report(job.crash_id)
        if report is None or _analysed_centrally(report):
            return  # nothing to analyse, or a previous run wrote the result
        config = self.config
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="job-", dir=self.tmp_dir) as tmp:
            packed, plain = Path(tmp) / "core.zst", Path(tmp) / "core"
            with open(packed, "wb") as fh:
                self.store.blobs.write_to(job.blob_key, fh)
            decompress_checked(packed, plain, max_decompressed_bytes(plain.parent),
                               max_ratio=config.max_core_ratio,
                               ratio_min_bytes=config.core_ratio_min_bytes)
            packed.unlink()
            result = self.runner.run(plain)
        if self._stopping.is_set() and not result.ok:
            raise Stopping("the server stopped during the analysis; the job is run again "
                           "at the next start")
        if result.retryable:
            raise LimitReached(f"{result.category}: {result.error}")
        if result.ok and result.reports:
            merged = merge_analysis(report, result.reports[0])
            record = CrashRecord(merged, dict(merged.attributes), CoreStatus.STORED, None,
                                 ARTIFACT)
            with self.store.transaction():
                self.store.update_crash(record)
                # a SIGBUS MCE crash is a telemetry event too, as in `coreepi ingest`
                self.store.add_events(crash_events([record]))
            self.on_result("ok")
            return
        why = (f"{result.category}: {result.error}" if not result.ok
               else "no crash found in the core")
        report.analysis.warnings.append(f"{_MARKER} {__version__}: unreadable: {why}")
        self.store.update_crash(CrashRecord(report, dict(report.attributes),
                                            CoreStatus.UNREADABLE, why, ARTIFACT))
        self.on_result("unreadable")

    def close(self) -> None:
        """Kill analysis children still running (by pid); their jobs are
        failed with no backoff (:class:`Stopping`), not recorded as unreadable."""
        self._stopping.set()
        self.runner.kill_all()
