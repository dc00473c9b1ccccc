"""The analysis queue (scope ``read`` to look, ``admin`` to retry): counts per
state, the jobs of a state — ``dead`` ones are the dead letters, each with
its last error — and requeueing a dead job."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from coreepi.serve.auth import require
from coreepi.serve.errors import ApiError
from coreepi.store import ApiToken, JobState

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
Read = Annotated[ApiToken, Depends(require("read"))]
Admin = Annotated[ApiToken, Depends(require("admin"))]


@router.get("")
async def list_jobs(request: Request, _: Read,
                    state: Annotated[JobState | None, Query()] = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    """Jobs per state, and the jobs (of ``state``), oldest first."""
    app = request.app.state
    counts = await app.gateway.read(app.store.job_counts)
    jobs = await app.gateway.read(app.store.jobs, state, limit)
    return {"counts": counts, "jobs": [dataclasses.asdict(j) for j in jobs]}


@router.post("/{job_id}/retry")
async def retry(job_id: str, request: Request, _: Admin) -> dict[str, Any]:
    """Requeue a dead job (its attempts reset); 404 when there is no dead job of that id."""
    app = request.app.state
    if not await app.gateway.write(app.store.retry_job, job_id):
        raise ApiError(404, f"no dead job {job_id!r}", "not-found")
    app.intake.wake.set()
    return {"job_id": job_id, "state": "queued"}
