"""Operations: health and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from coreepi import __version__
from coreepi.serve.auth import require
from coreepi.serve.metrics import CONTENT_TYPE_LATEST

router = APIRouter(tags=["ops"])
_read = require("read")


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    """Liveness and store reachability (a trivial store read)."""
    state = request.app.state
    await state.gateway.read(state.store.api_tokens)
    return {"status": "ok", "version": __version__}


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
