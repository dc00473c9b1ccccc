"""``create_app(store, config)``: the FastAPI application of ``coreepi serve``.

The app holds, on ``app.state``: the store and its gateway (the only way
handlers reach the store), the config, the token authenticator, the metrics
registry, the core intake and the findings cache (the report, recomputed in
the background after writes). Routes live in :mod:`coreepi.serve.routes`
(``pages`` is the web UI); static assets (CSS, the vendored Swagger UI of
``/docs``) are served from ``serve/static``. Every refusal is an
:class:`~coreepi.serve.errors.ApiError` (or a request validation error),
answered as ``{"detail", "reason"}`` — or, for a page, as an HTML page —
and counted in ``coreepi_requests_rejected_total{reason}``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from coreepi import __version__
from coreepi.errors import StoreError
from coreepi.ingest.intake import CoreIntake, CoreLimits, accept_heartbeats, accept_reports
from coreepi.ingest.scratch import scratch_dir
from coreepi.reanalysis.warm import WarmLauncher
from coreepi.serve.analysis import AnalysisWorker
from coreepi.serve.auth import Authenticator
from coreepi.serve.budget import ClientWatch
from coreepi.serve.config import ServeConfig
from coreepi.serve.errors import ApiError
from coreepi.serve.findings import FindingsCache
from coreepi.surveil.scheduler import AlertScheduler
from coreepi.serve.gateway import GroupCommit, StoreGateway
from coreepi.serve.groupmetrics import GroupsCollector
from coreepi.serve.limits import BodyLimit
from coreepi.serve.metrics import Metrics
from coreepi.serve.routes import admin, alerts, drainform, ingest, jobs, ops, pages, query
from coreepi.store import Store

__all__ = ["create_app"]

_CORE_PATH = re.compile(r"^/api/v1/crashes/.*/core$")
_STATIC = Path(__file__).resolve().parent / "static"
STORE_RETRY_AFTER_SECONDS = 5  # a PostgreSQL restart or failover takes seconds
_NOT_PAGES = ("/api/", "/openapi.json", "/metrics", "/healthz", "/readyz", "/static/")
_STATUS_REASON = {401: "unauthorized", 403: "forbidden", 404: "not-found",
                  405: "method-not-allowed", 413: "too-large", 415: "unsupported-media-type"}


def _is_core_upload(scope: Scope) -> bool:
    return scope.get("method") == "PUT" and bool(_CORE_PATH.match(scope.get("path", "")))


def _is_page(request: Request) -> bool:
    """A request for a page (answered in HTML when refused), not the API."""
    path = request.url.path
    return not path.startswith(_NOT_PAGES) and not path.endswith(".json")


def _tmp_dir(store: Store, config: ServeConfig) -> Path:
    """This server process's own scratch directory (uploads being received,
    cores being analysed) under the configured tmp dir, else the data dir's
    ``tmp/``, else ``$TMPDIR``: removed at exit, swept by the next server
    when this one was killed (:mod:`coreepi.ingest.scratch`)."""
    if config.tmp_dir is not None:
        return scratch_dir(Path(config.tmp_dir))
    data_dir = getattr(store, "data_dir", None)
    return scratch_dir(Path(data_dir) / "tmp" if data_dir is not None else None)


class Timing:
    """Observe each request's latency in ``coreepi_request_duration_seconds``,
    labelled by method and route template (plain ASGI: no per-request task)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            route = scope.get("route")
            label = f"{scope['method']} {getattr(route, 'path', 'unmatched')}"
            self.metrics.latency.labels(label).observe(time.perf_counter() - started)


def create_app(store: Store, config: ServeConfig | None = None) -> FastAPI:
    """The API over ``store`` (which the caller opens and closes)."""
    config = config or ServeConfig()
    tmp_dir = _tmp_dir(store, config)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics()
    wake = threading.Event()  # set when a job is queued here: in-process workers start at once
    intake = CoreIntake(store, CoreLimits(config.max_core_ratio, config.core_ratio_min_bytes),
                        tmp_dir, wake)
    findings = FindingsCache(store, config.findings_debounce_seconds,
                             config.findings_max_delay_seconds)

    metrics.registry.register(GroupsCollector(findings, config.metrics_top_groups,
                                              lambda: store.alerts("firing")))

    def analysed(outcome: str) -> None:
        metrics.analyses.labels(outcome).inc()
        findings.notify()  # the analysis may have given the crash its signature

    # each worker thread forks its analysis children from its own warm zygote,
    # as `coreepi worker` does (a cold child spends most of its CPU importing);
    # started with the first core, so a server that analyses nothing pays nothing
    launchers = [WarmLauncher() for _ in range(config.analysis_jobs if config.warm_analysis else 0)]
    workers = [AnalysisWorker(store, config, tmp_dir, on_result=analysed,
                              launcher=launchers[i] if launchers else None)
               for i in range(config.analysis_jobs)]
    alerting = AlertScheduler(store, config.alert_rules) if config.alert_rules else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        threads = [threading.Thread(target=w.run, args=(stop, wake), daemon=True,
                                    name=f"analysis-{i}") for i, w in enumerate(workers)]
        for t in threads:
            t.start()
        if alerting:
            alerting.start()
        yield
        if alerting:
            alerting.close()
        stop.set()
        wake.set()
        for w in workers:
            w.close()  # kills analysis children still running (by pid)
        for t in threads:
            t.join(10)
        for launcher in launchers:
            launcher.close()
        findings.close()

    app = FastAPI(
        title="coreepi", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
        summary="Core dump epidemiology: ingest crash reports, cores and exposure; query groups.",
        description="Bearer tokens with scopes `ingest`, `read`, `admin` "
        "(`coreepi token create --scope …`). A 2xx on a write means the data is committed.",
    )
    app.state.store = store
    app.state.config = config
    app.state.gateway = StoreGateway(store, config.store_threads,
                                     core_threads=max(2, config.analysis_jobs * 2),
                                     read_cpu_seconds=config.read_cpu_seconds)
    app.state.workers = workers
    app.state.reports = GroupCommit(app.state.gateway, accept_reports,
                                    max_backlog=config.max_write_backlog)
    app.state.heartbeats = GroupCommit(app.state.gateway, accept_heartbeats,
                                       max_backlog=config.max_write_backlog)
    app.state.auth = Authenticator(store, config.token_cache_seconds)
    app.state.metrics = metrics
    app.state.intake = intake
    app.state.findings = findings
    app.state.alerting = alerting

    def rejected(reason: str) -> None:
        metrics.rejected.labels(reason).inc()

    app.add_middleware(BodyLimit, limit=config.max_body_bytes, exempt=_is_core_upload,
                       on_reject=rejected)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        reason = exc.reason if isinstance(exc, ApiError) else _STATUS_REASON.get(
            exc.status_code, f"http-{exc.status_code}")
        rejected(reason)
        if _is_page(request):
            return pages.html_error(request, exc.status_code, str(exc.detail))
        return JSONResponse({"detail": exc.detail, "reason": reason}, exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(StoreError)
    async def store_unavailable(request: Request, exc: StoreError) -> Response:
        # the database is restarting or unreachable: nothing was committed, so
        # the client is told to come back (the agent keeps the item), not a 500
        rejected("store-unavailable")
        message = f"the store is unavailable, nothing stored: {exc}"
        if _is_page(request):
            return pages.html_error(request, 503, message)
        return JSONResponse({"detail": message, "reason": "store-unavailable"}, 503,
                            headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)})

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.method in ("POST", "PUT") and not ctype.endswith("json"):
            rejected("unsupported-media-type")
            return JSONResponse({"detail": f"send the body as application/json, not "
                                 f"{ctype or 'without a Content-Type'}",
                                 "reason": "unsupported-media-type"}, 415)
        json_broken = any(e.get("type") == "json_invalid" for e in errors)
        reason = "invalid-json" if json_broken else "invalid-body"
        rejected(reason)
        first = errors[0] if errors else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid')}" if first else "invalid request"
        return JSONResponse(
            {"detail": message, "reason": reason,
             "errors": jsonable_encoder(errors[:20], exclude={"input", "ctx"})}, 422)

    app.add_exception_handler(pages.LoginRequired, pages.login_redirect)  # type: ignore[arg-type]
    app.add_middleware(ClientWatch)  # a read whose client left is cancelled
    app.add_middleware(Timing, metrics=metrics)

    for module in (ingest, query, admin, jobs, ops, pages, alerts, drainform):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=_STATIC), name="static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Swagger UI from the package's own copy (works without internet)."""
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title="coreepi API",
            swagger_js_url="/static/swagger/swagger-ui-bundle.js",
            swagger_css_url="/static/swagger/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg")

    _document_crash_report(app)
    return app


def _document_crash_report(app: FastAPI) -> None:
    """Put the CrashReport schema (read by hand from the request bytes, so
    FastAPI does not see it) into the OpenAPI components."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from coreepi.model.report import CrashReport

            spec = base()
            schema = CrashReport.model_json_schema(ref_template="#/components/schemas/{model}")
            components = spec.setdefault("components", {}).setdefault("schemas", {})
            components.update(schema.pop("$defs", {}))
            components["CrashReport"] = schema
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

