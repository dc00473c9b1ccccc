"""The web UI: server-rendered pages (Jinja2), each also JSON at ``URL.json``.

=================================  =============================================
page                               what
=================================  =============================================
``/``                              overview: the answer first
``/groups``                        signature groups; filters in the URL
``/groups/{group_id}``             one group (``?cursor=`` pages its crashes)
``/hosts``, ``/hosts/{host_id}``   reported hosts; one host
``/crashes/{crash_id}``            one crash, its core and the gdb command
``/search``                        signature, phenotype, host, attribute, time
``/login``, ``/logout``            the session cookie (read scope)
=================================  =============================================

Pages need a read token: the session cookie (people) or an ``Authorization:
Bearer`` header (scripts, tests). Without one an HTML page redirects to the
login form and a ``.json`` page answers 401. Handlers are thin: the data
comes from :mod:`coreepi.serve.views` / :mod:`coreepi.serve.itemviews`.
"""

from __future__ import annotations

import functools
import re
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from coreepi import __version__
from coreepi.reporting.phrases import fmt_ci, fmt_n, fmt_p, fmt_q, fmt_rate, fmt_ratio, how_many
from coreepi.serve import charts
from coreepi.serve.alertviews import drain_panel, page_alerts
from coreepi.serve.auth import COOKIE, Authenticator, token_from
from coreepi.serve.cores import stored_core
from coreepi.serve.errors import ApiError
from coreepi.serve.findings import FindingsCache, Snapshot
from coreepi.serve.itemviews import crash_rows, crash_view, host_view
from coreepi.serve.lineage import lineage_rows
from coreepi.serve.routes.query import FIRST_WAIT, decode_cursor, encode_cursor
from coreepi.store.alert_records import DrainRecord
from coreepi.store.blobstate import rows_with_blob_state, with_blob_state
from coreepi.store.interfaces.crashes import MIN_CRASH_ID_PREFIX
from coreepi.surveil.drains import drain_of
from coreepi.serve.views import (
    SORTS,
    GroupFilter,
    crash_href,
    group_view,
    groups_view,
    host_href,
    hosts_view,
    overview_view,
    signature_view,
    status,
)

router = APIRouter(include_in_schema=False)
_SPARKS: dict[tuple[Any, ...], str] = {}
_HEX = re.compile(r"[0-9a-fA-F]{1,31}")  # a short crash id (a full one is 32 digits)
_COUNTED = 1000
"""Crash ids counted for an ambiguous prefix ("1,000 or more crashes start with it")."""


def group_spark(row: dict[str, Any], axis: dict[str, str]) -> str:
    """A group row's sparkline, drawn once per group state (a group's curve
    changes only when its crash count or last crash does)."""
    key = (row["id"], row["crashes"], row["last_seen"], axis["first"], axis["last"])
    svg = _SPARKS.get(key)
    if svg is None:
        if len(_SPARKS) > 20_000:  # old refreshes' entries: start over
            _SPARKS.clear()
        svg = _SPARKS[key] = charts.sparkline(row["curve"], axis["first"], axis["last"])
    return svg


def _day_cell(iso: str | None) -> Markup:
    """An ISO time's UTC day for a table cell: the year over the month-day
    (``2024-<wbr>05-10``), so a narrow column breaks it where it reads well."""
    day = (iso or "")[:10]
    return Markup(f"{escape(day[:5])}<wbr>{escape(day[5:])}")


def _q_cell(q: float | None, family: str | None) -> Markup:
    """:func:`~coreepi.reporting.phrases.fmt_q` for a cell: the value
    (``q < 1e-20``) on one line, its family free to wrap after it."""
    value, sep, rest = fmt_q(q, family).partition(" (")
    return Markup('<span class="nowrap">{}</span>{}').format(value, sep + rest)


# after a space, a scope or path separator, before an argument list, a template's
# arguments or an offset: where a function name (``ns::f<T>(int)+0x1a``), a Java method
# (``java.util.Map.get(Ljava/lang/Object;)``) or a path may wrap without cutting a word
_NAME_BREAKS = re.compile(r"(?<=::)|(?<=[/. ])|(?=[(<+])")


def _breakable(text: str | None) -> Markup:
    """``text`` escaped as parts split at :data:`_NAME_BREAKS`, each part a
    ``<span class="nb">`` (CSS: no wrap inside; the browser would also break
    after a hyphen, ``ingest-`` / ``router``) with ``<wbr>`` between: a narrow
    frames column wraps a name between its parts, never inside an identifier
    (a ``<wbr>`` is not copied with the text, unlike a zero-width space)."""
    parts = [p for p in _NAME_BREAKS.split(text or "") if p]
    return Markup("<wbr>").join(Markup('<span class="nb">{}</span>').format(p) for p in parts)


TEMPLATES = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")
TEMPLATES.env.globals.update(charts=charts, version=__version__, urlencode=urlencode,
                             spark=group_spark)
# ``q`` takes the FDR family as a required argument (``a.q_value | q(a.q_family)``): a
# template that prints a q without its family fails to render instead of printing it bare
TEMPLATES.env.filters.update(many=how_many, rate=fmt_rate, ci=lambda r: fmt_ci(r[0], r[1]),
                             n=fmt_n, p=fmt_p, q=_q_cell,
                             ratio=lambda r: fmt_ratio(*r), day=_day_cell,
                             breakable=_breakable)
PAGE_CRASHES = 50
HOST_CRASHES = 500
VERDICTS = ("hardware-suspect", "environment-triggered", "software", "undetermined")


class LoginRequired(Exception):
    """A page asked for without a read token: redirect to the login form."""

    def __init__(self, next_url: str) -> None:
        self.next_url = next_url


async def _authorize(request: Request, as_json: bool) -> None:
    auth: Authenticator = request.app.state.auth
    if auth.stale():
        await request.app.state.gateway.read(auth.refresh)
    try:
        token = auth.lookup(token_from(request, "read"))
    except ApiError:
        if as_json:
            raise
        raise LoginRequired(request.url.path + (f"?{request.url.query}" if request.url.query
                                                else "")) from None
    if "read" not in token.scopes and "admin" not in token.scopes:
        raise ApiError(403, f"this token ({token.name}) lacks the 'read' scope", "forbidden")


async def _snapshot(request: Request) -> tuple[Snapshot, dict[str, Any]]:
    cache: FindingsCache = request.app.state.findings
    snap = await request.app.state.gateway.read(cache.current, FIRST_WAIT)
    return snap, status(snap, cache.wanted)


def _split(name: str) -> tuple[str, bool]:
    return (name[:-5], True) if name.endswith(".json") else (name, False)


async def _page(request: Request, template: str, data: dict[str, Any] | None, as_json: bool,
                title: str, snap_status: dict[str, Any] | None = None,
                **extra: Any) -> Response:
    """``data`` as JSON (``.json``) or rendered into ``template``; None: 404."""
    if data is None:
        raise ApiError(404, f"not found: {request.url.path}", "not-found")
    if as_json:
        return JSONResponse({**data, "findings": snap_status} if snap_status else data)
    return TEMPLATES.TemplateResponse(request, template, {
        "data": data, "title": title, "findings": snap_status, "path": request.url.path,
        "query": request.url.query, **extra})


def _day(name: str, value: str | None) -> date | None:
    if not value:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise ApiError(400, f"{name}: not a date (YYYY-MM-DD): {value[:40]!r}",
                       "invalid-query") from None


FILTER_PARAMS = ("verdict", "phenotype", "attr", "since", "until", "q", "host", "sort", "desc",
                 "page")


def _only(request: Request, allowed: tuple[str, ...]) -> None:
    """400 for a query parameter this page does not take: a typo must not
    silently show the unfiltered page."""
    for name in request.query_params:
        if name not in allowed:
            takes = f"it takes {', '.join(allowed)}" if allowed else "it takes none"
            raise ApiError(400, f"{name[:40]!r}: not a parameter of {request.url.path} ({takes})",
                           "invalid-query")


def _verdict(request: Request) -> str | None:
    verdict = request.query_params.get("verdict") or None
    if verdict is not None and verdict not in VERDICTS:
        raise ApiError(400, f"verdict: one of {', '.join(VERDICTS)}, not {verdict[:40]!r}",
                       "invalid-query")
    return verdict


def _filter(request: Request) -> GroupFilter:
    """The groups filter of the URL; 400 naming the parameter when one is not
    understood."""
    _only(request, FILTER_PARAMS)
    q = request.query_params
    sort = q.get("sort") or "rate"
    if sort not in SORTS:
        raise ApiError(400, f"sort: one of {', '.join(SORTS)}, not {sort[:40]!r}", "invalid-query")
    attr = q.get("attr") or None
    if attr is not None:
        name, eq, value = attr.partition("=")
        if not (name.strip() and eq and value):  # `attr=kernel` matched nothing, silently
            raise ApiError(400, f"attr: give name=value (e.g. kernel=6.1.0), not {attr[:40]!r}",
                           "invalid-query")
    since, until = _day("since", q.get("since")), _day("until", q.get("until"))
    if since is not None and until is not None and since > until:
        raise ApiError(400, f"since {since} is after until {until} (both days included): "
                       "no day lies between them", "invalid-query")
    desc = q.get("desc", "1")
    if desc not in ("0", "1"):
        raise ApiError(400, f"desc: 0 or 1, not {desc[:40]!r}", "invalid-query")
    page = q.get("page") or "1"
    if not page.isdigit() or not 1 <= int(page) <= 1_000_000:
        raise ApiError(400, f"page: a page number from 1, not {page[:40]!r}", "invalid-query")
    return GroupFilter(verdict=_verdict(request), phenotype=q.get("phenotype") or None,
                       attr=attr, since=since, until=until, q=q.get("q") or None,
                       host=(q.get("host") or "").strip() or None, sort=sort,
                       desc=desc == "1", page=int(page))


def _check_phenotype(flt: GroupFilter, snap: Snapshot) -> None:
    """400 when ``flt.phenotype`` is neither a built-in phenotype nor one a
    crash of the window has (a user case definition): a typo would otherwise
    be an empty result that looks like an answer."""
    if flt.phenotype is None:
        return
    known = _builtin_phenotypes() | {p for counts in snap.phenotypes_by_signature.values()
                                     for p in counts}
    if flt.phenotype not in known:
        raise ApiError(400, f"phenotype: unknown {flt.phenotype[:40]!r} (one of "
                       f"{', '.join(sorted(known))})", "invalid-query")


@functools.cache
def _builtin_phenotypes() -> frozenset[str]:
    from coreepi.analyze.phenotypes import builtin_names

    return frozenset(builtin_names())


async def _drained(request: Request) -> dict[str, DrainRecord]:
    """The drained hosts by id (the recommendation of a drained host is not "drain")."""
    state = request.app.state
    return {d.host_id: d for d in await state.gateway.read(state.store.drained_hosts)}


@router.get("/")
@router.get("/index.json")
async def overview(request: Request) -> Response:
    as_json = request.url.path.endswith(".json")
    await _authorize(request, as_json)
    snap, st = await _snapshot(request)
    data = {**overview_view(snap, await _drained(request)),
            "alerts": await page_alerts(request, state="firing")}
    return await _page(request, "overview.html", data, as_json, "Overview", st)


@router.get("/groups")
@router.get("/groups.json")
async def groups(request: Request) -> Response:
    as_json = request.url.path.endswith(".json")
    await _authorize(request, as_json)
    flt = _filter(request)
    snap, st = await _snapshot(request)
    _check_phenotype(flt, snap)
    data = groups_view(snap, flt)
    if data.get("ready") and flt.page > data["pages"]:
        raise ApiError(404, f"page {flt.page}: there are {data['pages']} pages", "not-found")
    return await _page(request, "groups.html", data, as_json, "Groups", st,
                       flt=flt, verdicts=VERDICTS, sorts=SORTS)


@router.get("/groups/{name}")
async def group(name: str, request: Request) -> Response:
    gid, as_json = _split(name)
    await _authorize(request, as_json)
    _only(request, ("cursor",))
    snap, st = await _snapshot(request)
    g = snap.groups.get(gid)
    unanalysed = snap.signatures.get(gid) if g is None else None
    signature = g.key if g is not None and g.kind == "signature" else (
        unanalysed.signature if unanalysed else None)
    rows: list[dict[str, Any]] = []
    nxt = None
    if signature is not None:
        cursor = request.query_params.get("cursor")
        state = request.app.state
        raw = await state.gateway.read(state.store.list_crashes, signature=signature,
                                       limit=PAGE_CRASHES,
                                       after=decode_cursor(cursor) if cursor else None)
        raw = await state.gateway.read(rows_with_blob_state, state.store, raw)  # pruned cores
        rows = crash_rows(raw)
        if len(raw) == PAGE_CRASHES:
            nxt = encode_cursor(raw[-1]["ingested_at"], raw[-1]["crash_id"])
    if unanalysed is not None:
        return await _page(request, "signature.html", signature_view(snap, gid, rows, nxt),
                           as_json, f"Signature {unanalysed.signature}", st)
    data = group_view(snap, gid, rows, nxt)
    if data is not None and g is not None and g.kind == "signature":
        data["alerts"] = await page_alerts(request, signature=g.key)
        state = request.app.state
        history = await state.gateway.read(state.store.group_lineage, g.key)
        data["lineage"] = lineage_rows(history, g.key, snap.groups)
    elif data is not None and g is not None and g.kind == "phenotype":
        data["alerts"] = await page_alerts(request, phenotype=g.key)
    title = f"Group {g.key}" if g else "Group"
    return await _page(request, "group.html", data, as_json, title, st)


@router.get("/hosts")
@router.get("/hosts.json")
async def hosts(request: Request) -> Response:
    as_json = request.url.path.endswith(".json")
    await _authorize(request, as_json)
    _only(request, ("verdict",))
    verdict = _verdict(request)
    snap, st = await _snapshot(request)
    return await _page(request, "hosts.html", hosts_view(snap, await _drained(request), verdict),
                       as_json, "Hosts", st)


@router.get("/hosts/{name:path}")
async def host(name: str, request: Request) -> Response:
    host_id, as_json = _split(name)
    await _authorize(request, as_json)
    snap, st = await _snapshot(request)
    state = request.app.state
    rows = await state.gateway.read(state.store.list_crashes, host_id=host_id,
                                    limit=HOST_CRASHES)
    rows = await state.gateway.read(rows_with_blob_state, state.store, rows)  # pruned cores
    drain = await state.gateway.read(drain_of, state.store, host_id)
    data = host_view(snap, host_id, rows, drain)
    form_token = None
    if data is not None:
        data["alerts"] = await page_alerts(request, host_id=host_id)
        suspect = data["verdict"] == "hardware-suspect" or any(
            a["kind"] == "hardware-suspect-host" and a["state"] == "firing" for a in data["alerts"])
        panel = await drain_panel(request, host_id, suspect, drain)
        data["drain"] = {k: v for k, v in panel.items() if k != "form_token"}
        form_token = panel["form_token"]
    return await _page(request, "host.html", data, as_json, f"Host {host_id}", st,
                       form_token=form_token)


@router.get("/crashes/{name}")
async def crash(name: str, request: Request) -> Response:
    crash_id, as_json = _split(name)
    await _authorize(request, as_json)
    state = request.app.state
    report = await state.gateway.read(state.store.get_report, crash_id)
    if report is None and _HEX.fullmatch(crash_id):
        # a short id as `coreepi list` shows it: the one crash it names
        found = await _short_id(request, crash_id)
        return RedirectResponse(crash_href(found) + (".json" if as_json else ""),
                                status_code=303)
    data = None
    if report is not None:
        core = await state.gateway.read(stored_core, state.store, report)
        if core is None:  # say why: pruned by retention, or in another blob store
            report = await state.gateway.read(with_blob_state, state.store, report)
        data = crash_view(report, core)
    return await _page(request, "crash.html", data, as_json, f"Crash {crash_id[:12]}")


async def _short_id(request: Request, prefix: str) -> str:
    """The one crash id starting with ``prefix`` (hex); else 400 saying why
    (too short, or how many crashes start with it) or 404 (none)."""
    if len(prefix) < MIN_CRASH_ID_PREFIX:
        raise ApiError(400, f"crash id {prefix!r} is too short: give at least "
                       f"{MIN_CRASH_ID_PREFIX} of its hex digits (`coreepi list` shows 12)",
                       "invalid-query")
    state = request.app.state
    found = await state.gateway.read(state.store.crash_ids_starting, prefix.lower(), _COUNTED)
    if not found:
        raise ApiError(404, f"no crash id starts with {prefix!r}", "not-found")
    if len(found) > 1:
        many = f"{_COUNTED:,} or more" if len(found) >= _COUNTED else str(len(found))
        raise ApiError(400, f"crash id {prefix!r} is ambiguous: {many} crashes start with it "
                       f"({', '.join(i[:12] + '…' for i in found[:3])}); give more digits",
                       "invalid-query")
    return str(found[0])


@router.get("/search")
@router.get("/search.json")
async def search(request: Request) -> Response:
    """Groups by signature substring (``q``), phenotype, attribute value and
    time; hosts by id substring (``host``); a crash by its id (``q``)."""
    as_json = request.url.path.endswith(".json")
    await _authorize(request, as_json)
    flt = _filter(request)
    host_q = flt.host or ""
    snap, st = await _snapshot(request)
    _check_phenotype(flt, snap)
    asked = any((flt.q, flt.phenotype, flt.attr, flt.since, flt.until, flt.verdict, host_q))
    data: dict[str, Any] = {"asked": asked, "filter": flt.params()}
    if asked:
        found = groups_view(snap, flt, limit=100)
        data["groups"] = found.get("rows", [])
        data["groups_total"] = found.get("total", 0)
        data["unanalysed"] = found.get("unanalysed", [])
        data["unanalysed_total"] = found.get("unanalysed_total", 0)
        data["max_groups"] = found.get("max_groups")
        ids = sorted(set(snap.host_facts) | set(snap.hosts))
        data["hosts"] = [{"host_id": h, "href": host_href(h)} for h in ids
                         if host_q and host_q.lower() in h.lower()][:100]
        data["crash"] = None
        maybe_id = (flt.q or "").strip()
        if maybe_id and len(maybe_id) <= 128 and " " not in maybe_id:
            report = await request.app.state.gateway.read(request.app.state.store.get_report,
                                                          maybe_id)
            if report is not None:
                data["crash"] = crash_href(maybe_id)
            elif _HEX.fullmatch(maybe_id) and len(maybe_id) >= MIN_CRASH_ID_PREFIX:
                # a short id: linked when it names one crash
                found = await request.app.state.gateway.read(
                    request.app.state.store.crash_ids_starting, maybe_id.lower(), 2)
                data["crash"] = crash_href(found[0]) if len(found) == 1 else None
    return await _page(request, "search.html", data, as_json, "Search", st, flt=flt,
                       verdicts=VERDICTS)


def _local(url: str | None) -> str:
    """Only a path on this server (no ``//host`` or scheme): no open redirect."""
    if not url or not url.startswith("/") or url.startswith("//") or "\\" in url:
        return "/"
    return url


def _with_cookie(request: Request, token: str, next_url: str) -> RedirectResponse:
    out = RedirectResponse(_local(next_url), status_code=303)
    out.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                   secure=request.url.scheme == "https")
    return out


@router.get("/login")
async def login_form(request: Request) -> Response:
    """The login form; ``?code=`` redeems the one-time code ``coreepi serve`` printed."""
    code = request.query_params.get("code")
    next_url = _local(request.query_params.get("next"))
    if code:
        session = request.app.state.auth.redeem(code)
        if session is not None:
            return _with_cookie(request, session, next_url)
    return TEMPLATES.TemplateResponse(request, "login.html", {
        "title": "Log in", "next": next_url, "findings": None, "path": "/login", "query": "",
        "error": "that login link was used already or is not from this server; paste a read "
                 "token instead" if code else None}, status_code=401 if code else 200)


@router.post("/login")
async def login(request: Request) -> Response:
    """Check the pasted read token; set it as the session cookie."""
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    next_url = _local((form.get("next") or ["/"])[0])
    auth: Authenticator = request.app.state.auth
    await request.app.state.gateway.read(auth.refresh)
    try:
        found = auth.lookup(f"Bearer {token}")
        ok = "read" in found.scopes or "admin" in found.scopes
    except ApiError:
        ok = False
    if not ok:
        return TEMPLATES.TemplateResponse(request, "login.html", {
            "title": "Log in", "next": next_url, "findings": None, "path": "/login",
            "query": "", "error": "unknown or revoked token, or one without the read scope"},
            status_code=401)
    return _with_cookie(request, token, next_url)


@router.get("/logout")
async def logout_page(request: Request) -> Response:
    """A typed or bookmarked /logout: a page with the Log out button (logging out
    stays a POST, so no other site can end a session with a link or an image)."""
    return TEMPLATES.TemplateResponse(request, "logout.html", {
        "title": "Log out", "findings": None, "path": "/logout", "query": ""})


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Deletes the cookie; a one-time-link session ends on this server too."""
    if session := request.cookies.get(COOKIE):
        request.app.state.auth.end_session(session)
    out = RedirectResponse("/login", status_code=303)
    out.delete_cookie(COOKIE, path="/")
    return out


def login_redirect(request: Request, exc: LoginRequired) -> Response:
    return RedirectResponse("/login?" + urlencode({"next": exc.next_url}), status_code=303)


def html_error(request: Request, status_code: int, detail: str) -> HTMLResponse:
    """An error as a page (for browsers) — same base template, a link home."""
    return TEMPLATES.TemplateResponse(request, "error.html", {
        "title": f"{status_code}", "detail": detail, "status": status_code, "findings": None,
        "path": request.url.path, "query": ""}, status_code=status_code)
