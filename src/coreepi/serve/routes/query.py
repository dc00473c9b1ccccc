"""Read endpoints (scope ``read``): crashes, one report, groups, hosts."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from coreepi.model.fleet import parse_utc
from coreepi.serve.auth import require
from coreepi.serve.errors import ApiError
from coreepi.serve.routes.ingest import checked_crash_id
from coreepi.serve.summaries import group_counts, host_rows
from coreepi.store import ApiToken

router = APIRouter(prefix="/api/v1", tags=["read"])
Read = Annotated[ApiToken, Depends(require("read"))]
MAX_LIMIT = 1000


def _time(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_utc(value)
    except ValueError as exc:
        raise ApiError(400, f"{name}: {exc}", "invalid-query") from None


def encode_cursor(ingested_at: datetime, crash_id: str) -> str:
    raw = json.dumps([ingested_at.isoformat(), crash_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, crash_id = json.loads(raw)
        return parse_utc(at), str(crash_id)
    except (ValueError, TypeError, binascii.Error):
        raise ApiError(400, "invalid cursor (use next_cursor from the previous page)",
                       "invalid-query") from None


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


@router.get("/crashes")
async def list_crashes(
    request: Request, _: Read,
    since: Annotated[str | None, Query(description="ISO-8601; captured_at >= since")] = None,
    until: Annotated[str | None, Query(description="ISO-8601; captured_at < until")] = None,
    host_id: str | None = None,
    signature: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> dict[str, Any]:
    """Crash summaries in ingestion order, a page at a time."""
    state = request.app.state
    rows = await state.gateway.read(
        state.store.list_crashes, _time("since", since), _time("until", until),
        host_id=host_id, signature=signature, limit=limit,
        after=decode_cursor(cursor) if cursor else None)
    last = rows[-1] if len(rows) == limit else None
    return {"crashes": [_jsonable(r) for r in rows],
            "next_cursor": encode_cursor(last["ingested_at"], last["crash_id"]) if last else None}


@router.get("/crashes/{crash_id:path}", responses={404: {"description": "unknown crash"}})
async def get_crash(crash_id: str, request: Request, _: Read) -> Response:
    """The full CrashReport JSON of one crash."""
    checked_crash_id(crash_id)
    state = request.app.state
    report = await state.gateway.read(state.store.get_report, crash_id)
    if report is None:
        raise ApiError(404, f"unknown crash {crash_id}", "not-found")
    return Response(report.model_dump_json(), media_type="application/json")


@router.get("/groups")
async def groups(
    request: Request, _: Read,
    since: Annotated[str | None, Query(description="ISO-8601")] = None,
    until: Annotated[str | None, Query(description="ISO-8601")] = None,
) -> dict[str, Any]:
    """Crash counts (and distinct hosts) by signature and by phenotype over [since, until)."""
    state = request.app.state
    start, end = _time("since", since), _time("until", until)
    frame = await state.gateway.read(state.store.crash_frame, start, end)
    return {"since": start.isoformat() if start else None,
            "until": end.isoformat() if end else None, **group_counts(frame)}


@router.get("/hosts")
async def hosts(request: Request, _: Read) -> dict[str, Any]:
    """Every known host: attributes, exposure (seconds, last seen), crash count."""
    state = request.app.state
    rows = await state.gateway.read(host_rows, state.store)
    return {"hosts": rows}
