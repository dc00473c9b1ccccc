"""Operations: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from coreepi import __version__
from coreepi.serve.auth import require
from coreepi.serve.metrics import CONTENT_TYPE_LATEST

router = APIRouter(tags=["ops"])
_read = require("read")
READY_TIMEOUT_SECONDS = 2.0
"""How long /readyz waits for each of the store and the blob store."""


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    """Liveness and store reachability (a trivial store read)."""
    state = request.app.state
    await state.gateway.read(state.store.api_tokens)
    return {"status": "ok", "version": __version__}


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """Readiness, for a load balancer: 200 ``{"status": "ready"}`` when the
    store answers a trivial read and the blob store a cheap probe, each
    within :data:`READY_TIMEOUT_SECONDS`; else 503 ``{"status":
    "unready", "detail": one line naming what failed}`` (the store first)."""
    state = request.app.state
    failed = None
    try:
        await asyncio.wait_for(state.gateway.read(state.store.api_tokens),
                               READY_TIMEOUT_SECONDS)
    except TimeoutError:
        failed = f"store: no answer within {READY_TIMEOUT_SECONDS:g} s"
    except Exception as exc:  # any store error makes this replica unready, said in one line
        failed = "store: " + " ".join(str(exc).split())[:300]
    if failed is None:
        failed = await asyncio.to_thread(state.store.blobs.check, READY_TIMEOUT_SECONDS)
    if failed is not None:
        return JSONResponse({"status": "unready", "detail": failed, "version": __version__},
                            status_code=503)
    return JSONResponse({"status": "ready", "version": __version__})


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus text format (public unless the server is configured otherwise).
    Rendered off the event loop: the group gauges read the alerts table."""
    state = request.app.state
    if not state.config.metrics_public:
        await _read(request)
    # the jobs table holds what every worker did, `coreepi worker`s included;
    # rendered off the event loop: the alerts gauge reads the alerts table
    jobs = await state.gateway.read(state.store.job_counts)
    return Response(await state.gateway.read(state.metrics.render, jobs),
                    media_type=CONTENT_TYPE_LATEST)
