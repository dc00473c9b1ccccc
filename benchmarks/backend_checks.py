"""The fault run's verdict: the PostgreSQL store against what the agents were told.

- every crash report answered 2xx is in ``crashes`` (once: its primary key);
- every heartbeat answered 2xx is in ``exposure`` (host, start);
- every core answered 2xx has exactly one analysis job, ``done``, and its
  stored report carries the central analysis exactly once (the merge's
  "analysed centrally by coreepi" warning: a job run twice would not add a
  second, and one never run has none);
- no job is ``dead``.

Stored-but-never-acknowledged items (the request was committed, the answer
lost with a killed replica) are counted, not failures: the agent sends them
again and is told "duplicate".
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["check_store"]

MARKER = "analysed centrally by coreepi"


def _wait_for_queue(con: Any, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        counts = dict(con.execute("SELECT state, count(*) FROM analysis_jobs GROUP BY state"))
        if not counts.get("queued") and not counts.get("running"):
            return counts
        if time.monotonic() > deadline:
            return counts
        time.sleep(1)


def check_store(url: str, fleet: Any, job_timeout: float) -> dict[str, object]:
    """The checks of the module docstring on the database at ``url`` after the
    queue drained (at most ``job_timeout`` s); ``ok`` when all hold."""
    import psycopg

    def keys(kind: str, field: str = "accepted") -> set[str]:
        return set().union(*(getattr(a, field)[kind] for a in fleet.agents))

    crashes, beats, cores = keys("crash"), keys("heartbeat"), keys("core")
    with psycopg.connect(url, autocommit=True) as con:
        counts = _wait_for_queue(con, job_timeout)
        stored = {r[0] for r in con.execute("SELECT crash_id FROM crashes")}
        rows = con.execute("SELECT count(*), count(DISTINCT crash_id) FROM crashes").fetchone()
        intervals = {f"{h}@{s.isoformat()}" for h, s in con.execute(
            "SELECT host_id, start_ts FROM exposure")}
        jobs: dict[str, list[tuple[str, int]]] = {}
        for crash_id, state, attempts in con.execute(
                "SELECT crash_id, state, attempts FROM analysis_jobs"):
            jobs.setdefault(crash_id, []).append((state, attempts))
        marks = {cid: json.loads(report)["analysis"]["warnings"] for cid, report in con.execute(
            "SELECT crash_id, report FROM crashes WHERE crash_id = ANY(%s)", [sorted(cores)])}
    analysed_once = sum(1 for c in cores
                        if sum(w.startswith(MARKER) for w in marks.get(c, [])) == 1)
    not_done = sorted(c for c in cores if [s for s, _ in jobs.get(c, [])] != ["done"])
    out: dict[str, object] = {
        "crashes_accepted": len(crashes), "crashes_lost": len(crashes - stored),
        "crash_rows_duplicated": int(rows[0]) - int(rows[1]) if rows else 0,
        "crashes_stored_unacknowledged": len((stored & keys("crash", "sent")) - crashes),
        "heartbeats_accepted": len(beats), "heartbeats_lost": len(beats - intervals),
        "cores_accepted": len(cores), "cores_analysed_exactly_once": analysed_once,
        "cores_job_not_done": len(not_done),
        "jobs_retried": sum(1 for c in cores for _, a in jobs.get(c, []) if a > 1),
        "job_counts": counts,
        "rejected_4xx": sum(len(a.rejected) for a in fleet.agents),
        "rejected_examples": [x for a in fleet.agents for x in a.rejected][:3],
    }
    out["ok"] = (out["crashes_lost"] == 0 and out["crash_rows_duplicated"] == 0
                 and out["heartbeats_lost"] == 0 and analysed_once == len(cores)
                 and not not_done and not counts.get("dead") and out["rejected_4xx"] == 0)
    return out
