"""The PostgreSQL :class:`~coreepi.store.interfaces.queue.JobQueue`: jobs
taken with ``FOR UPDATE SKIP LOCKED`` by any number of workers on any hosts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from coreepi.store.interfaces.queue import Job, JobQueue, JobState
from coreepi.store.postgres_store.gateway import PostgresGateway
from coreepi.store.queue_sql import EXPIRED_AT, job_from_row, sql
from coreepi.store.sqlbuild import utc_now

__all__ = ["PostgresJobQueue"]

_SQL = sql(" FOR UPDATE SKIP LOCKED")


class PostgresJobQueue(PostgresGateway, JobQueue):
    """The ``analysis_jobs`` table in PostgreSQL."""

    def enqueue_analysis(self, crash_id: str, blob_key: str, max_attempts: int = 5) -> bool:
        now = utc_now()
        cur = self._write(_SQL["enqueue"], [f"core:{crash_id}", crash_id, blob_key,
                                            max_attempts, now, now])
        return bool(cur.fetchall())

    def take_jobs(self, worker: str, limit: int = 1, stale_after: float = 60.0) -> list[Job]:
        now = utc_now()
        stale = now - timedelta(seconds=stale_after)
        with self.transaction():
            self._write(_SQL["bury"], [now, stale])
            rows = self._write(_SQL["take"], [worker, now, now, stale, limit]).fetchall()
        return sorted((job_from_row(r) for r in rows), key=lambda j: (j.run_after, j.job_id))

    def expire_workers(self, workers: Iterable[str]) -> int:
        return self._write(_SQL["expire"], [EXPIRED_AT, list(workers)]).rowcount

    def heartbeat_jobs(self, worker: str, job_ids: Iterable[str]) -> int:
        return self._write(_SQL["heartbeat"], [utc_now(), worker, list(job_ids)]).rowcount

    def finish_job(self, job_id: str, worker: str) -> bool:
        return self._write(_SQL["finish"], [utc_now(), job_id, worker]).rowcount > 0

    def fail_job(self, job_id: str, worker: str, error: str,
                 backoff_seconds: float = 30.0) -> JobState | None:
        now = utc_now()
        rows = self._write(_SQL["fail"], [error[:2000], now, backoff_seconds, now, job_id,
                                          worker]).fetchall()
        return JobState(rows[0][0]) if rows else None

    def retry_job(self, job_id: str) -> bool:
        return self._write(_SQL["retry"], [utc_now(), job_id]).rowcount > 0

    def jobs(self, state: JobState | None = None, limit: int = 100) -> list[Job]:
        where = " WHERE state = ?" if state is not None else ""
        params = [str(state)] if state is not None else []
        rows = self._query(f"{_SQL['list']}{where} ORDER BY created_at, job_id LIMIT ?",
                           [*params, limit])
        return [job_from_row(r) for r in rows]

    def job_counts(self) -> dict[str, int]:
        got = dict(self._query(_SQL["counts"]))
        return {str(s): int(got.get(str(s), 0)) for s in JobState}
