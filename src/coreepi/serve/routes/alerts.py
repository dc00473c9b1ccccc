"""Surveillance over the API: alerts (scope ``read``), host drains and undrains (scope ``admin``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from coreepi.errors import InputError
from coreepi.serve.auth import require
from coreepi.serve.errors import ApiError
from coreepi.store import ApiToken, Store
from coreepi.store.alert_records import AlertRecord, DrainRecord
from coreepi.surveil.drains import drain as store_drain

router = APIRouter(prefix="/api/v1", tags=["alerts"])
Read = Annotated[ApiToken, Depends(require("read"))]
Admin = Annotated[ApiToken, Depends(require("admin"))]


class DrainBody(BaseModel):
    reason: str = ""
    # when the host was taken out of service (ISO 8601; no zone means UTC):
    # an operator records a drain done earlier by hand; default now
    at: datetime | None = None


def _alert_json(a: AlertRecord) -> dict[str, Any]:
    return {"key": a.key, "kind": a.kind, "state": a.state, "labels": a.labels,
            "summary": a.summary, "evidence": a.evidence, "starts_at": a.starts_at.isoformat(),
            "ends_at": a.ends_at.isoformat() if a.ends_at else None}


@router.get("/alerts")
async def alerts(request: Request, _: Read, state: str | None = None) -> dict[str, Any]:
    """Alerts, oldest first (``state``: firing or resolved)."""
    if state not in (None, "firing", "resolved"):
        raise ApiError(422, f"state {state!r}: firing or resolved", "invalid-query")
    app = request.app.state
    rows = await app.gateway.read(app.store.alerts, state)
    return {"alerts": [_alert_json(a) for a in rows]}


async def drain_host(request: Request, host_id: str, by: str, reason: str,
                     at: datetime | None = None) -> bool | None:
    """Drain ``host_id`` from ``at`` (default now) through the store's
    writer (:func:`coreepi.surveil.drains.drain`): True newly drained, False
    already, None not in the store. ApiError 422 when ``at`` is refused (in
    the future, or inside one of the host's ended drains)."""
    app = request.app.state
    try:
        result: bool | None = await app.gateway.write(
            store_drain, app.store, host_id, by, reason, at, name="at")
    except InputError as exc:
        raise ApiError(422, str(exc), "invalid-drain-time") from exc
    return result


@router.post("/hosts/{host_id}/drain")
async def drain(host_id: str, body: DrainBody, request: Request, token: Admin) -> dict[str, Any]:
    """Mark a host drained from ``at`` (default now): its exposure stops
    from then; the evaluation re-checks its groups."""
    new = await drain_host(request, host_id, f"token:{token.name}", body.reason, body.at)
    if new is None:
        raise ApiError(404, f"host {host_id!r}: not in the store", "not-found")
    return {"host_id": host_id, "drained": True, "already": not new}


def _undrain(store: Store, host_id: str, by: str) -> DrainRecord | bool:
    if host_id not in store.host_ids():
        return False
    return store.undrain_host(host_id, datetime.now(UTC), by) or True


async def undrain_host(request: Request, host_id: str, by: str) -> DrainRecord | None:
    """Put ``host_id`` back in service through the store's writer: the ended
    drain; None when it was not drained. ApiError 404 when it is not in the store."""
    app = request.app.state
    result: DrainRecord | bool = await app.gateway.write(_undrain, app.store, host_id, by)
    if result is False:
        raise ApiError(404, f"host {host_id!r}: not in the store", "not-found")
    return result if isinstance(result, DrainRecord) else None


@router.delete("/hosts/{host_id}/drain")
async def undrain(host_id: str, request: Request, token: Admin) -> dict[str, Any]:
    """Put a drained host back in service: its node-time counts again from
    now; the drained span stays cut. ``was_drained`` false when it was not."""
    ended = await undrain_host(request, host_id, f"token:{token.name}")
    return {"host_id": host_id, "drained": False, "was_drained": ended is not None,
            "drained_at": ended.drained_at.isoformat() if ended else None,
            "undrained_at": ended.undrained_at.isoformat() if ended and ended.undrained_at
            else None}
