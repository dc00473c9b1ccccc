"""Read endpoints (scope ``read``): crashes, one report, its artifact, the findings, groups, hosts.

Groups and hosts come from the findings snapshot (:mod:`coreepi.serve.findings`),
never from a scan of the crash table per request."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse

from coreepi.model.fleet import parse_utc
from coreepi.serve.auth import require
from coreepi.serve.cores import stored_core
from coreepi.serve.errors import ApiError
from coreepi.serve.routes.ingest import checked_crash_id
from coreepi.epi import FleetFindings
from coreepi.serve.findings import FindingsCache, Snapshot
from coreepi.serve.views import group_row, signature_view, status
from coreepi.store import ApiToken
from coreepi.store.blobstate import rows_with_blob_state, with_blob_state

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
    start, end = _time("since", since), _time("until", until)
    if start is not None and end is not None and start >= end:
        raise ApiError(400, f"since {since} is not before until {until}: an empty range",
                       "invalid-query")
    rows = await state.gateway.read(
        state.store.list_crashes, start, end,
        host_id=host_id, signature=signature, limit=limit,
        after=decode_cursor(cursor) if cursor else None)
    last = rows[-1] if len(rows) == limit else None
    # a core retention deleted since reads "pruned", as on the store itself
    shown = await state.gateway.read(rows_with_blob_state, state.store, rows)
    return {"crashes": [_jsonable(r) for r in shown],
            "next_cursor": encode_cursor(last["ingested_at"], last["crash_id"]) if last else None}


@router.get("/crashes/{crash_id}/artifact", response_class=StreamingResponse, responses={
    200: {"content": {"application/zstd": {}},
          "description": "the stored artifact (core, kernel log, hs_err log), compressed"},
    404: {"description": "unknown crash, or nothing stored"}})
@router.get("/crashes/{crash_id}/core", response_class=StreamingResponse, include_in_schema=False)
async def get_artifact(crash_id: str, request: Request, _: Read) -> StreamingResponse:
    """The crash's stored artifact as it lies in the blob store (zstd; gzip/xz/bzip2
    when it arrived so), streamed, named by what it is (``X.core.zst``,
    ``X.kernel.log.zst``, ``hs_err_X.log.zst``); ``X-Gdb-Command`` tells how to
    open a core in gdb (a log has none). ``…/core`` is the same (its first name)."""
    checked_crash_id(crash_id)
    state = request.app.state
    report = await state.gateway.read(state.store.get_report, crash_id)
    if report is None:
        raise ApiError(404, f"unknown crash {crash_id}", "not-found")
    stored = await state.gateway.read(stored_core, state.store, report)
    if stored is None:
        report = await state.gateway.read(with_blob_state, state.store, report)
        why = report.core.dropped_reason or "nothing stored for this crash"
        raise ApiError(404, f"crash {crash_id}: {why}", "not-found")
    headers = {"Content-Length": str(stored.size),
               "Content-Disposition": f'attachment; filename="{stored.filename}"'}
    if stored.gdb_command:
        headers["X-Gdb-Command"] = stored.gdb_command
    return StreamingResponse(state.store.blobs.stored_chunks(stored.key),
                             media_type=stored.media_type, headers=headers)


@router.get("/crashes/{crash_id:path}", responses={404: {"description": "unknown crash"}})
async def get_crash(crash_id: str, request: Request, _: Read) -> Response:
    """The full CrashReport JSON of one crash."""
    checked_crash_id(crash_id)
    state = request.app.state
    report = await state.gateway.read(state.store.get_report, crash_id)
    if report is None:
        raise ApiError(404, f"unknown crash {crash_id}", "not-found")
    report = await state.gateway.read(with_blob_state, state.store, report)
    return Response(report.model_dump_json(), media_type="application/json")


FIRST_WAIT = 30.0
"""Seconds a read waits for the server's first findings refresh."""


async def snapshot(request: Request, fresh: bool = False) -> Snapshot:
    """The findings snapshot; ``fresh``: wait (up to ``FRESH_WAIT`` s) until it
    covers every write committed before this request."""
    cache: FindingsCache = request.app.state.findings
    if fresh:
        cache.start()
        return await request.app.state.gateway.read(cache.wait_covering, cache.wanted,
                                                    FRESH_WAIT)
    return await request.app.state.gateway.read(cache.current, FIRST_WAIT)


FRESH_WAIT = 120.0
Fresh = Annotated[bool, Query(description="wait until the findings include every write "
                              "accepted before this request")]


def _ready(snap: Snapshot) -> FleetFindings:
    if snap.findings is None:
        raise ApiError(503, "the findings are not computed yet"
                       + (f" (last refresh failed: {snap.error})" if snap.error else ""),
                       "not-ready", {"Retry-After": "5"})
    return snap.findings


@router.get("/findings", responses={503: {"description": "first refresh not done yet"}})
async def findings(request: Request, _: Read, fresh: Fresh = False) -> Response:
    """The report (FleetFindings JSON, as ``coreepi report --format json``),
    computed in the background after new data arrives. Headers:
    ``X-Findings-Computed-At``, ``X-Findings-Stale`` (data arrived since)."""
    snap = await snapshot(request, fresh)
    _ready(snap)
    state = status(snap, request.app.state.findings.wanted)
    return Response(snap.findings_json, media_type="application/json", headers={
        "X-Findings-Computed-At": state["computed_at"] or "",
        "X-Findings-Stale": "true" if state["stale"] else "false"})


@router.get("/groups")
async def groups(request: Request, _: Read, fresh: Fresh = False) -> dict[str, Any]:
    """Signature and phenotype groups of the findings: id, crashes, hosts,
    rate with CI, verdict, first/last seen (detail: ``/groups/{group_id}``)."""
    snap = await snapshot(request, fresh)
    f = _ready(snap)
    rows = [{k: v for k, v in group_row(snap, g).items() if k not in ("curve",)}
            for g in f.groups]
    return {"findings": status(snap, request.app.state.findings.wanted),
            "window": f.window.model_dump(mode="json"), "groups": rows}


@router.get("/groups/{group_id}", responses={404: {"description": "unknown group"}})
async def group(group_id: str, request: Request, _: Read) -> dict[str, Any]:
    """One group's finding (GroupFinding JSON) with its id and ``analysed``
    true; for a signature of the window the findings do not analyse as a
    group (outside the ``max_groups`` largest, as its page says) a plain
    record: ``id``, ``kind`` ``signature``, ``key``, ``crashes``, ``hosts``,
    ``first_seen`` / ``last_seen``, ``analysed`` false and ``why``."""
    snap = await snapshot(request)
    _ready(snap)
    g = snap.groups.get(group_id)
    if g is not None:
        return {"id": group_id, **g.model_dump(mode="json"), "analysed": True,
                "phenotypes": snap.phenotypes_by_signature.get(g.key, {})
                if g.kind == "signature" else {}}
    plain = signature_view(snap, group_id, [], None)
    if plain is None:
        raise ApiError(404, f"unknown group {group_id[:80]!r}", "not-found")
    return {**{k: v for k, v in plain.items() if k not in ("href", "crash_list", "next_cursor")},
            "phenotypes": snap.phenotypes_by_signature.get(plain["key"], {})}


@router.get("/hosts")
async def hosts(request: Request, _: Read, fresh: Fresh = False) -> dict[str, Any]:
    """Every host with attributes or in the findings: attributes, and for the
    reported hosts (suspects first) crashes, node-days, SIR and verdict
    (null for the others, and for all while the findings are not computed)."""
    snap = await snapshot(request, fresh)
    ids = sorted(set(snap.host_facts) | set(snap.hosts))
    out = []
    for hid in ids:
        h = snap.hosts.get(hid)
        out.append({"host_id": hid, "attributes": snap.host_facts.get(hid, {}),
                    "crashes": h.crashes if h else None, "node_days": h.node_days if h else None,
                    "sir": h.sir if h else None,
                    "verdict": h.attribution.verdict if h else None})
    f = snap.findings
    return {"findings": status(snap, request.app.state.findings.wanted),
            "window": f.window.model_dump(mode="json") if f else None, "hosts": out}


@router.get("/hosts/{host_id:path}", responses={404: {"description": "unknown host"}})
async def host(host_id: str, request: Request, _: Read) -> dict[str, Any]:
    """One host: attributes, its finding (HostFinding JSON; null when the
    findings do not report it) and its telemetry events in the window."""
    snap = await snapshot(request)
    h = snap.hosts.get(host_id)
    facts = snap.host_facts.get(host_id)
    if h is None and facts is None:
        raise ApiError(404, f"unknown host {host_id[:200]!r}", "not-found")
    return {"host_id": host_id, "attributes": facts or {},
            "finding": h.model_dump(mode="json") if h else None,
            "telemetry": [{"ts": t.ts.isoformat(), "kind": t.kind, "summary": t.summary,
                           "hardware_indicative": t.hardware}
                          for t in snap.telemetry.get(host_id, [])]}
