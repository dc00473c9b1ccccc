"""Alerts and the drain loop on the pages: JSON-ready dicts, as in :mod:`coreepi.serve.views`.

The overview shows the firing alerts; a group page and a host page show
every alert about them (firing and resolved) with its evidence numbers; a
hardware-suspect host's page has the drain form, or, once drained, who
drained it when and the re-check (:func:`coreepi.surveil.drains.recheck`).

The drain form is the one write a page makes. The session cookie is
HttpOnly and SameSite=Strict; on top of that the form needs a session
holding an ``admin`` token (a read session sees the state, not the
button), a same-origin ``Origin`` (or, without one, ``Referer``) header,
and a form token: HMAC-SHA256 keyed by the session token over the host id,
which a page on another site cannot compute because it cannot read the
cookie (the OWASP "HMAC-based token" pattern; nothing to keep server-side,
so any replica accepts it).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request

from coreepi.epi.surveillance import DetectorParams
from coreepi.reporting.phrases import fmt_bound, recheck_sentence
from coreepi.serve.auth import COOKIE
from coreepi.serve.errors import ApiError
from coreepi.serve.views import group_href, host_href
from coreepi.serve.findings import group_id
from coreepi.store import ApiToken
from coreepi.store.alert_records import AlertRecord, DrainRecord
from coreepi.surveil.drains import recheck

__all__ = ["alert_rows", "check_drain_form", "drain_panel", "form_token",
           "page_alerts"]


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts is not None else None


def _number(v: Any, status: str | None) -> str:
    if v is None:  # a ratio or limit with no finite value (ratio_evidence)
        return fmt_bound(None, status)
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, str) and (at := _utc_time(v)) is not None:
        return f"{at:%Y-%m-%d %H:%M} UTC"  # as the summary beside it words it
    return f"{v:,}" if isinstance(v, int) else str(v)


def _utc_time(v: str) -> datetime | None:
    """An evidence string that is an ISO time with its offset (``since``,
    ``first_seen``, ``run_start``), in UTC; None for any other string."""
    try:
        at = datetime.fromisoformat(v)
    except ValueError:
        return None
    return at.astimezone(UTC) if at.tzinfo is not None else None


def alert_rows(alerts: list[AlertRecord]) -> list[dict[str, Any]]:
    """Alerts as rows, firing first then the latest: kind, state, ``since``
    (UTC ISO), ``ends_at``, summary, ``evidence`` (``[{"name", "value",
    "text"}]``, numbers as stored plus their display text) and links to the
    subject's group / host page."""
    out = []
    for a in sorted(alerts, key=lambda a: (a.state != "firing", -a.starts_at.timestamp())):
        sig, host = a.labels.get("signature"), a.labels.get("host_id")
        pheno = a.labels.get("phenotype")
        out.append({
            "key": a.key, "kind": a.kind, "state": a.state, "since": _iso(a.starts_at),
            "ends_at": _iso(a.ends_at), "summary": a.summary, "labels": a.labels,
            "evidence": [{"name": k, "value": v, "text": _number(v, a.evidence.get("ratio_status"))}
                         for k, v in a.evidence.items()],
            "group_href": (group_href(group_id("signature", sig)) if sig else
                           group_href(group_id("phenotype", pheno)) if pheno else None),
            "host_href": host_href(host) if host else None,
        })
    return out


async def page_alerts(request: Request, *, state: str | None = None,
                      signature: str | None = None, host_id: str | None = None,
                      phenotype: str | None = None) -> list[dict[str, Any]]:
    """The stored alerts (of ``state``; about ``signature`` / ``host_id`` /
    ``phenotype`` when given) as :func:`alert_rows`."""
    app = request.app.state
    rows = await app.gateway.read(app.store.alerts, state)
    keep = [a for a in rows
            if (signature is None or a.labels.get("signature") == signature)
            and (host_id is None or a.labels.get("host_id") == host_id)
            and (phenotype is None or a.labels.get("phenotype") == phenotype)]
    return alert_rows(keep)


def _session(request: Request) -> str | None:
    """The session cookie's token (pages are the cookie's only use)."""
    return request.cookies.get(COOKIE) or None


def _admin(request: Request) -> ApiToken | None:
    token = _session(request)
    if token is None:
        return None
    try:
        found: ApiToken = request.app.state.auth.lookup(f"Bearer {token}")
    except ApiError:
        return None
    return found if "admin" in found.scopes else None


def form_token(session: str, host_id: str) -> str:
    """The drain form's token: HMAC-SHA256(session token, ``drain:`` + host id), hex."""
    return hmac.new(session.encode(), f"drain:{host_id}".encode(), hashlib.sha256).hexdigest()


async def drain_panel(request: Request, host_id: str, suspect: bool,
                      drain: DrainRecord | None) -> dict[str, Any]:
    """What the host page shows about draining (``drain``: the host's drain
    record, :func:`coreepi.surveil.drains.drain_of`): ``suspect`` (a drain is
    recommended), ``drained`` (``{"at", "by", "reason"}`` or None),
    ``recheck`` (its evidence and verdict, or None), ``recheck_text`` (that
    in words, :func:`coreepi.reporting.phrases.recheck_sentence`), ``can_drain`` (the
    session holds an admin token: the drain form, or once drained the
    undrain form) and ``form_token`` (only then; never in the page's JSON)."""
    app = request.app.state
    rules = app.config.alert_rules
    params = rules.detectors if rules else DetectorParams()
    check = await app.gateway.read(recheck, app.store, drain, params) if drain else None
    # before node-time has passed since the drain the ratio is undefined (NaN, ∞):
    # null in JSON, left out on the page
    shown = ({k: None if isinstance(v, float) and not math.isfinite(v) else v
              for k, v in check.items()} if check else None)
    admin = _admin(request) if suspect or drain is not None else None
    session = _session(request)
    return {"suspect": suspect, "can_drain": admin is not None,
            "drained": {"at": drain.drained_at.isoformat(), "by": drain.drained_by,
                        "reason": drain.reason} if drain else None,
            "recheck": shown,
            "recheck_text": recheck_sentence(shown, params.baseline_days) if shown else None,
            "form_token": form_token(session, host_id) if admin and session else None}


def _same_origin(request: Request) -> bool:
    sent = request.headers.get("origin") or request.headers.get("referer")
    if not sent or sent == "null":
        return False
    got = urlsplit(sent)
    return (got.scheme, got.netloc) == (request.url.scheme, request.url.netloc)


def check_drain_form(request: Request, host_id: str, token: str) -> ApiToken:
    """The admin token behind a drain or undrain form post. ApiError 403 (one line
    naming the reason) on a foreign or missing Origin/Referer, a session
    without the admin scope, or a wrong form token."""
    if not _same_origin(request):
        raise ApiError(403, "drain form: the request's Origin is not this server", "forbidden")
    admin = _admin(request)
    session = _session(request)
    if admin is None or session is None:
        raise ApiError(403, "drain form: log in with an admin token to drain a host", "forbidden")
    if not hmac.compare_digest(token, form_token(session, host_id)):
        raise ApiError(403, "drain form: the form token does not match this session; reload "
                            "the host page", "forbidden")
    return admin
