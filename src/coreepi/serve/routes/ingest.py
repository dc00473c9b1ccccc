"""Ingest endpoints (scope ``ingest``): crash reports, cores, heartbeats."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, TypeVar

import anyio
from fastapi import APIRouter, Depends, Request, Response
from pydantic import ValidationError

from coreepi.ingest.fleet import host_id_problem
from coreepi.ingest.intake import (
    CoreIntake,
    InvalidCore,
    Outcome,
    spool_file,
)
from coreepi.model.heartbeat import Heartbeat
from coreepi.model.limits import AttributeLimitError, TimeRangeError, check_attributes, check_time
from coreepi.model.report import CrashReport
from coreepi.serve.auth import require
from coreepi.serve.errors import ApiError
from coreepi.serve.gateway import Backlogged, GroupCommit
from coreepi.serve.limits import check_declared_length
from coreepi.serve.models import (
    CoreAccepted,
    CrashAccepted,
    HeartbeatAccepted,
    is_crash_id,
)
from coreepi.store import ApiToken

router = APIRouter(prefix="/api/v1", tags=["ingest"])
Ingest = Annotated[ApiToken, Depends(require("ingest"))]

I = TypeVar("I")
R = TypeVar("R")
CORE_TYPES = ("application/zstd", "application/octet-stream")
_WRITE_CHUNK = 1 << 20


def checked_crash_id(crash_id: str) -> str:
    if not is_crash_id(crash_id):
        raise ApiError(400, f"invalid crash_id {crash_id[:80]!r}: expected 16 to 64 "
                       "lower-case hex digits", "invalid-crash-id")
    return crash_id


def check_host_id(host_id: str) -> None:
    """ApiError 422 when ``host_id`` cannot name a host (a URL path segment
    and a cell of terminal tables: :func:`coreepi.ingest.fleet.host_id_problem`),
    as ``coreepi ingest`` refuses it in a fleet directory."""
    problem = host_id_problem(host_id)
    if problem is not None:
        raise ApiError(422, f"host_id {host_id[:80]!r} {problem}", "invalid-body")


def check_accepted_time(when: datetime | None, skew_seconds: float, what: str) -> None:
    """ApiError 422 naming the limit when ``when`` lies before
    :data:`~coreepi.model.limits.EARLIEST_TIME` (a clock saying year 1 would
    break every report window) or more than ``skew_seconds`` past the
    server's clock (a node clock gone wrong, or a forged time that would
    become a host's last_seen and stretch the report window)."""
    if when is None:
        return
    try:
        check_time(when, what, skew_seconds=skew_seconds)
    except TimeRangeError as exc:
        raise ApiError(422, str(exc), "invalid-body") from None


def check_attribute_limits(attributes: Mapping[str, object], what: str) -> None:
    """ApiError 422 naming the limit when ``attributes`` exceeds the attribute
    limits (checked before anything is stored or queued)."""
    try:
        check_attributes(attributes, what)
    except AttributeLimitError as exc:
        raise ApiError(422, str(exc), "invalid-body") from None


async def committed(commits: GroupCommit[I, R], item: I) -> R:
    """``commits.submit(item)``; a full backlog becomes ApiError 503
    (``overloaded``) with ``Retry-After``, nothing stored."""
    try:
        return await commits.submit(item)
    except Backlogged as exc:
        raise ApiError(503, str(exc), "overloaded", {"Retry-After": str(exc.retry_after)}) from None


REPORT_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/CrashReport"}}}}}


async def read_report(request: Request) -> CrashReport:
    """The request's CrashReport, parsed and validated straight from the JSON
    bytes (pydantic's fast path), after the token was checked."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not ctype.endswith("json"):
        raise ApiError(415, f"send the report as application/json, not {ctype or 'nothing'!r}",
                       "unsupported-media-type")
    body = await request.body()
    try:
        return CrashReport.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        broken = any(e["type"] == "json_invalid" for e in errors)
        first = errors[0]
        where = ".".join(str(x) for x in first["loc"]) or "body"
        raise ApiError(422, f"{where}: {first['msg']}"
                       + (f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""),
                       "invalid-json" if broken else "invalid-body") from None


@router.post("/crashes", status_code=201, response_model=CrashAccepted, openapi_extra=REPORT_BODY,
             responses={200: {"description": "duplicate: this crash was already received "
                              "with the same content"},
                        409: {"description": "the crash_id exists with other content"},
                        503: {"description": "overloaded: too many writes wait; nothing "
                              "stored, retry after Retry-After seconds"}})
async def post_crash(request: Request, response: Response, _: Ingest) -> CrashAccepted:
    """Store one crash report (idempotent by crash_id). A 2xx means it is committed."""
    report = await read_report(request)
    checked_crash_id(report.crash_id)
    if not report.host_id:
        raise ApiError(422, "host_id is required", "invalid-body")
    check_host_id(report.host_id)
    state = request.app.state
    check_accepted_time(report.captured_at, state.config.max_clock_skew_seconds, "captured_at")
    check_attribute_limits(report.attributes, "attributes")
    outcome = await committed(state.reports, report)
    if outcome is Outcome.CONFLICT:
        raise ApiError(409, f"crash {report.crash_id} was received before with other content",
                       "conflict")
    if outcome is Outcome.DUPLICATE:
        state.metrics.crashes_duplicate.inc()
        response.status_code = 200
    else:
        state.metrics.crashes_ingested.labels(str(report.source)).inc()
        state.findings.notify()
    return CrashAccepted(crash_id=report.crash_id, status=str(outcome))


@router.put("/crashes/{crash_id:path}/core", status_code=201, response_model=CoreAccepted,
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/zstd": {"schema": {"type": "string", "format": "binary"}}}}},
            responses={200: {"description": "duplicate: this core was already stored"},
                       404: {"description": "unknown crash: POST its report first"},
                       413: {"description": "the core is over the size limit, or expands "
                             "beyond the compression-ratio limit (a zstd bomb)"},
                       422: {"description": "the decompressed core is not ELF"}})
async def put_core(crash_id: str, request: Request, response: Response,
                   _: Ingest) -> CoreAccepted:
    """Upload a crash's core as one zstd stream; kept as a blob, and its
    analysis queued when the report lacks analysis (``queued``; the
    workers write the result into the crash). A 2xx means the core is
    durably stored. Idempotent."""
    checked_crash_id(crash_id)
    state = request.app.state
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in CORE_TYPES:
        raise ApiError(415, f"a core is sent as application/zstd, not {ctype or 'nothing'!r}",
                       "unsupported-media-type")
    limit = state.config.max_core_bytes
    check_declared_length(request.headers, limit, "a core upload")
    if await state.gateway.read(state.store.get_report, crash_id) is None:
        raise ApiError(404, f"unknown crash {crash_id}: POST its report first", "unknown-crash")
    intake: CoreIntake = state.intake
    fh, path = await anyio.to_thread.run_sync(spool_file, intake.tmp_dir)
    digest, size, buffer = hashlib.sha256(), 0, bytearray()
    try:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"a core upload over the limit of {limit} bytes",
                                   "too-large")
                digest.update(chunk)
                buffer += chunk
                if len(buffer) >= _WRITE_CHUNK:
                    data, buffer = bytes(buffer), bytearray()
                    await anyio.to_thread.run_sync(fh.write, data)
            await anyio.to_thread.run_sync(fh.write, bytes(buffer))
        finally:
            fh.close()
        result = await state.gateway.core(intake.accept, crash_id, path, digest.hexdigest(), size)
    except InvalidCore as exc:
        raise ApiError(exc.status, str(exc), exc.reason) from None
    finally:
        path.unlink(missing_ok=True)
    if result.outcome is Outcome.UNKNOWN:
        raise ApiError(404, f"unknown crash {crash_id}: POST its report first", "unknown-crash")
    if result.outcome is Outcome.CONFLICT:
        raise ApiError(409, f"crash {crash_id} already has another core ({result.blob_key})",
                       "conflict")
    m = state.metrics
    if result.outcome is Outcome.DUPLICATE:
        response.status_code = 200
        m.cores_received.labels("duplicate").inc()
    else:
        state.findings.notify()  # central analysis may have given it a signature
        m.cores_received.labels("stored").inc()
        m.core_bytes.inc(size)
    return CoreAccepted(crash_id=crash_id, status="stored" if result.outcome is Outcome.CREATED
                        else "duplicate", blob_key=result.blob_key,
                        core_status=result.core_status, queued=result.queued,
                        signature=result.signature, warning=result.warning)


@router.post("/heartbeats", status_code=201, response_model=HeartbeatAccepted,
             responses={200: {"description": "duplicate: this interval was already stored"},
                        409: {"description": "the interval overlaps another one of the host"},
                        503: {"description": "overloaded: too many writes wait; nothing "
                              "stored, retry after Retry-After seconds"}})
async def post_heartbeat(hb: Heartbeat, request: Request, response: Response,
                         _: Ingest) -> HeartbeatAccepted:
    """Record that a host was up over [start, end) (exposure), with its load
    figures and, when they changed, its host facts."""
    state = request.app.state
    check_host_id(hb.host_id)
    for when, what in ((hb.start, "start"), (hb.end, "end")):
        check_accepted_time(when, state.config.max_clock_skew_seconds, what)
    check_attribute_limits(hb.load, "load")
    if hb.facts is not None:
        check_attribute_limits(hb.facts.extra, "facts.extra")
        check_attribute_limits(hb.facts.k8s_labels, "facts.k8s_labels")
    outcome = await committed(state.heartbeats, hb)
    if outcome is Outcome.CONFLICT:
        raise ApiError(409, f"[{hb.start.isoformat()}, {hb.end.isoformat()}) overlaps another "
                       f"interval of host {hb.host_id!r}", "conflict")
    state.metrics.heartbeats.labels(str(outcome)).inc()
    if outcome is Outcome.DUPLICATE:
        response.status_code = 200
    else:
        state.findings.notify()
    return HeartbeatAccepted(host_id=hb.host_id, status=str(outcome))
