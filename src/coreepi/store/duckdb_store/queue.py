"""The DuckDB :class:`~coreepi.store.interfaces.queue.JobQueue`: the embedded
store's queue, taken by worker threads of the one process under the writer lock."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from coreepi.store.duckdb_store.gateway import DuckDBGateway, utc_now
from coreepi.store.interfaces.queue import Job, JobQueue, JobState
from coreepi.store.queue_sql import EXPIRED_AT, job_from_row, sql

__all__ = ["DuckDBJobQueue"]

_SQL = sql()


class DuckDBJobQueue(DuckDBGateway, JobQueue):
    """The ``analysis_jobs`` table in DuckDB."""

    def _run(self, statement: str, params: list[object]) -> list[tuple[object, ...]]:
        with self.transaction():
            return self._con.execute(statement, params).fetchall()

    def enqueue_analysis(self, crash_id: str, blob_key: str, max_attempts: int = 5) -> bool:
        now = utc_now()
        return bool(self._run(_SQL["enqueue"], [f"core:{crash_id}", crash_id, blob_key,
                                                max_attempts, now, now]))

    def take_jobs(self, worker: str, limit: int = 1, stale_after: float = 60.0) -> list[Job]:
        now = utc_now()
        stale = now - timedelta(seconds=stale_after)
        with self.transaction():
            self._run(_SQL["bury"], [now, stale])
            rows = self._run(_SQL["take"], [worker, now, now, stale, limit])
        return sorted((job_from_row(r) for r in rows), key=lambda j: (j.run_after, j.job_id))

    def expire_workers(self, workers: Iterable[str]) -> int:
        return _count(self._run(_SQL["expire"], [EXPIRED_AT, list(workers)]))

    def heartbeat_jobs(self, worker: str, job_ids: Iterable[str]) -> int:
        return _count(self._run(_SQL["heartbeat"], [utc_now(), worker, list(job_ids)]))

    def finish_job(self, job_id: str, worker: str) -> bool:
        return _count(self._run(_SQL["finish"], [utc_now(), job_id, worker])) > 0

    def fail_job(self, job_id: str, worker: str, error: str,
                 backoff_seconds: float = 30.0) -> JobState | None:
        now = utc_now()
        rows = self._run(_SQL["fail"], [error[:2000], now, backoff_seconds, now, job_id, worker])
        return JobState(rows[0][0]) if rows else None

    def retry_job(self, job_id: str) -> bool:
        return _count(self._run(_SQL["retry"], [utc_now(), job_id])) > 0

    def jobs(self, state: JobState | None = None, limit: int = 100) -> list[Job]:
        where = " WHERE state = ?" if state is not None else ""
        params: list[object] = [str(state)] if state is not None else []
        rows = self._query(f"{_SQL['list']}{where} ORDER BY created_at, job_id LIMIT ?",
                           [*params, limit]).fetchall()
        return [job_from_row(r) for r in rows]

    def job_counts(self) -> dict[str, int]:
        got = dict(self._query(_SQL["counts"]).fetchall())
        return {str(s): int(got.get(str(s), 0)) for s in JobState}


def _count(rows: list[tuple[object, ...]]) -> int:
    """DuckDB answers an UPDATE without RETURNING with one row: the count."""
    return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]
