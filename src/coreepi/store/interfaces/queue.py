"""JobQueue: the analysis queue (cores waiting for central analysis).

A received core is durable (blob stored, crash row updated) before its job is
queued, in the same transaction as the receipt, so nothing accepted is lost.
Workers (``coreepi worker``, or threads of an embedded ``coreepi serve``)
take jobs, heartbeat while they work, and finish or fail them:

====================  ========================================================
``queued``            waiting; ``run_after`` delays a retry (backoff)
``running``           taken by ``worker``; ``heartbeat_at`` says it is alive
``done``              analysed (the crash row holds the result)
``dead``              failed ``max_attempts`` times: left for a person to look
                      at (listed by the API); :meth:`JobQueue.retry_job` requeues
====================  ========================================================

Execution is at-least-once: a worker that stops heartbeating for
``stale_after`` seconds (killed, host gone) loses its job to the next
:meth:`JobQueue.take_jobs` — at once when a worker on its host sees its
process gone (:meth:`JobQueue.expire_workers`) — and a late :meth:`JobQueue.finish_job` of the old
worker is refused. The analysis writes are idempotent (``update_crash``
replaces the row), so a crash is analysed exactly once in effect.
PostgreSQL takes jobs with ``FOR UPDATE SKIP LOCKED`` (many workers, many
hosts); DuckDB under its single writer (workers are threads of one process).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from coreepi.store.interfaces.session import Transactional

__all__ = ["Job", "JobQueue", "JobState"]


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Job:
    """One analysis job: the crash whose core (``blob_key``) is to be analysed.
    ``attempts`` counts takes (the running one included); times are UTC."""

    job_id: str
    crash_id: str
    blob_key: str
    state: JobState
    attempts: int
    max_attempts: int
    run_after: datetime
    worker: str | None
    heartbeat_at: datetime | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None


class JobQueue(Transactional):
    """The ``analysis_jobs`` table."""

    @abc.abstractmethod
    def enqueue_analysis(self, crash_id: str, blob_key: str, max_attempts: int = 5) -> bool:
        """Queue the analysis of ``crash_id``'s core; idempotent by crash
        (True: queued now, False: it already had a job)."""

    @abc.abstractmethod
    def take_jobs(self, worker: str, limit: int = 1, stale_after: float = 60.0) -> list[Job]:
        """Take up to ``limit`` runnable jobs for ``worker`` (oldest first):
        queued ones whose ``run_after`` has come, and running ones whose
        worker has not heartbeaten for ``stale_after`` seconds (a job of a
        dead worker that has used all its attempts becomes ``dead`` instead).
        Each taken job is ``running`` with ``attempts`` + 1."""

    @abc.abstractmethod
    def expire_workers(self, workers: Iterable[str]) -> int:
        """The running jobs of ``workers`` (known dead: their process is
        gone) stale at once, so the next :meth:`take_jobs` takes them over
        (or buries those out of attempts) without waiting ``stale_after``;
        how many jobs."""

    @abc.abstractmethod
    def heartbeat_jobs(self, worker: str, job_ids: Iterable[str]) -> int:
        """Mark ``worker``'s running jobs alive; how many are still its own."""

    @abc.abstractmethod
    def finish_job(self, job_id: str, worker: str) -> bool:
        """``done``, if ``worker`` still holds the job (False: it was taken over)."""

    @abc.abstractmethod
    def fail_job(self, job_id: str, worker: str, error: str,
                 backoff_seconds: float = 30.0) -> JobState | None:
        """An attempt failed: ``queued`` again after ``backoff_seconds`` x
        2^(attempts-1), or ``dead`` when out of attempts. None when ``worker``
        no longer holds the job."""

    @abc.abstractmethod
    def retry_job(self, job_id: str) -> bool:
        """Requeue a ``dead`` job now, its attempts reset (False: not dead)."""

    @abc.abstractmethod
    def jobs(self, state: JobState | None = None, limit: int = 100) -> list[Job]:
        """Jobs (of ``state``), oldest first."""

    @abc.abstractmethod
    def job_counts(self) -> dict[str, int]:
        """Jobs per state, every :class:`JobState` present (0 when none)."""
