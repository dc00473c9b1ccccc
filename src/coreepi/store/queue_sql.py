"""The analysis queue's SQL, shared by the DuckDB and PostgreSQL backends.

Only the row lock differs: PostgreSQL appends ``FOR UPDATE SKIP LOCKED`` to
the selection of runnable jobs so concurrent workers never take one job
twice and never wait on each other; DuckDB runs the same statement under its
single writer lock. Placeholders are ``?`` (see :mod:`coreepi.store.sqlbuild`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from coreepi.store.interfaces.queue import Job, JobState

__all__ = ["EXPIRED_AT", "JOB_COLUMNS", "job_from_row", "sql"]

EXPIRED_AT = datetime(2000, 1, 1, tzinfo=UTC)
"""The heartbeat given to the jobs of a worker known dead: older than any
``stale_after`` can reach back, so the next take finds them stale."""

JOB_COLUMNS = ("job_id", "crash_id", "blob_key", "state", "attempts", "max_attempts",
               "run_after", "worker", "heartbeat_at", "last_error", "created_at", "finished_at")
_COLS = ", ".join(JOB_COLUMNS)


def sql(lock: str = "") -> dict[str, str]:
    """The queue's statements; ``lock`` is appended to the runnable-jobs selection."""
    return {
        "enqueue": "INSERT INTO analysis_jobs (job_id, crash_id, blob_key, state, attempts, "
                   "max_attempts, run_after, created_at) VALUES (?, ?, ?, 'queued', 0, ?, ?, ?) "
                   "ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
        # jobs of dead workers with no attempt left: dead, not taken again
        "bury": "UPDATE analysis_jobs SET state = 'dead', finished_at = ?, "
                "last_error = 'worker lost (no heartbeat) on the last attempt' "
                "WHERE state = 'running' AND heartbeat_at < ? AND attempts >= max_attempts",
        "take": f"UPDATE analysis_jobs SET state = 'running', worker = ?, "
                f"attempts = attempts + 1, heartbeat_at = ? WHERE job_id IN ("
                f"SELECT job_id FROM analysis_jobs WHERE (state = 'queued' AND run_after <= ?) "
                f"OR (state = 'running' AND heartbeat_at < ?) ORDER BY run_after, job_id "
                f"LIMIT ?{lock}) RETURNING {_COLS}",
        # the running jobs of workers known dead: stale now, whatever stale_after says
        "expire": "UPDATE analysis_jobs SET heartbeat_at = ? WHERE state = 'running' "
                  "AND worker IN (SELECT unnest(?::VARCHAR[]))",
        "heartbeat": "UPDATE analysis_jobs SET heartbeat_at = ? WHERE worker = ? "
                     "AND state = 'running' AND job_id IN (SELECT unnest(?::VARCHAR[]))",
        "finish": "UPDATE analysis_jobs SET state = 'done', finished_at = ?, last_error = NULL "
                  "WHERE job_id = ? AND worker = ? AND state = 'running'",
        "fail": "UPDATE analysis_jobs SET state = CASE WHEN attempts >= max_attempts "
                "THEN 'dead' ELSE 'queued' END, last_error = ?, "
                "run_after = ? + CAST(? * power(2, attempts - 1) AS INTEGER) * INTERVAL '1 second', "
                "finished_at = CASE WHEN attempts >= max_attempts THEN ? END "
                "WHERE job_id = ? AND worker = ? AND state = 'running' RETURNING state",
        "retry": "UPDATE analysis_jobs SET state = 'queued', attempts = 0, run_after = ?, "
                 "finished_at = NULL WHERE job_id = ? AND state = 'dead'",
        "list": f"SELECT {_COLS} FROM analysis_jobs",
        "counts": "SELECT state, count(*) FROM analysis_jobs GROUP BY state",
    }


def job_from_row(row: tuple[Any, ...]) -> Job:
    values = dict(zip(JOB_COLUMNS, row, strict=True))
    values["state"] = JobState(values["state"])
    for c in ("run_after", "heartbeat_at", "created_at", "finished_at"):
        v: datetime | None = values[c]
        values[c] = v.astimezone(UTC) if v is not None else None
    return Job(**values)
