"""Look a CI run's signatures up in production, through the server's read API.

``GET /api/v1/groups`` gives the fleet's groups. Two shapes are understood:
the findings-based one (``groups``: rows with ``id``, ``href``, ``kind``,
``key``, ``crashes``, ``hosts``, ``verdict``, ``first_seen``; the UI's group
page is ``/groups/{id}``) and the earlier count-only one (``signatures``:
rows with ``signature``, ``crashes``, ``hosts``; no verdict, no page). For a
known signature, its crashes (``GET /api/v1/crashes?signature=…``, oldest
first by capture time) give the first version it was seen in. Token: a
``read``-scope bearer token.
"""

from __future__ import annotations

from typing import Any

import httpx

from coreepi.errors import InputError
from coreepi.reporting.ci import CiRun, FleetMatch

__all__ = ["MatchError", "fleet_groups", "match_run"]

PAGE = 1000
MAX_PAGES = 20  # the first version is read from at most 20 000 crashes


class MatchError(InputError):
    """The server cannot be asked (unreachable, token refused, not coreepi)."""


def _get(client: httpx.Client, server: str, path: str, **params: Any) -> dict[str, Any]:
    try:
        r = client.get(path, params={k: v for k, v in params.items() if v is not None})
    except httpx.HTTPError as exc:
        raise MatchError(f"--server {server}", f"cannot reach it: {exc}") from None
    if r.status_code in (401, 403):
        raise MatchError(f"--server {server}", f"token refused ({r.status_code}); give a "
                         "read-scope token in COREEPI_TOKEN")
    if r.status_code != 200:
        raise MatchError(f"--server {server}", f"GET {path}: HTTP {r.status_code}")
    try:
        body = r.json()
    except ValueError:
        raise MatchError(f"--server {server}", f"GET {path}: not JSON") from None
    if not isinstance(body, dict):
        raise MatchError(f"--server {server}", f"GET {path}: unexpected answer")
    return body


def fleet_groups(client: httpx.Client, server: str) -> dict[str, dict[str, Any]]:
    """{signature: group row} of the server's signature groups."""
    body = _get(client, server, "/api/v1/groups", fresh="true")
    if isinstance(body.get("groups"), list):
        return {str(g["key"]): g for g in body["groups"]
                if isinstance(g, dict) and g.get("kind") == "signature" and "key" in g}
    if isinstance(body.get("signatures"), list):
        return {str(g["signature"]): g for g in body["signatures"]
                if isinstance(g, dict) and g.get("signature") is not None}
    raise MatchError(f"--server {server}", "GET /api/v1/groups: no groups in the answer")


def _history(client: httpx.Client, server: str, signature: str
             ) -> tuple[str | None, str | None]:
    """(first version, first seen) of a signature's crashes."""
    rows: list[dict[str, Any]] = []
    cursor = None
    for _ in range(MAX_PAGES):
        body = _get(client, server, "/api/v1/crashes", signature=signature, limit=PAGE,
                    cursor=cursor)
        rows += [r for r in body.get("crashes", []) if isinstance(r, dict)]
        cursor = body.get("next_cursor")
        if not cursor:
            break
    rows.sort(key=lambda r: str(r.get("captured_at") or ""))
    first = rows[0] if rows else {}
    version = next((str(r["app_version"]) for r in rows if r.get("app_version")), None)
    return version, first.get("captured_at")


def match_run(run: CiRun, server: str, token: str, *, ui_url: str | None = None,
              timeout: float = 150.0) -> None:
    """Set ``match`` on every crash of ``run``. ``ui_url``: base of the UI
    links (default: ``server``). Raises MatchError."""
    base = server.rstrip("/")
    links = (ui_url or base).rstrip("/")
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=timeout) as client:
        groups = fleet_groups(client, server)
        found: dict[str, FleetMatch] = {}
        for signature in run.signatures():
            g = groups.get(signature)
            if g is None:
                found[signature] = FleetMatch(known=False)
                continue
            version, first_seen = _history(client, server, signature)
            href = g.get("href")
            found[signature] = FleetMatch(
                known=True, crashes=int(g.get("crashes") or 0), hosts=int(g.get("hosts") or 0),
                since_version=version, first_seen=g.get("first_seen") or first_seen,
                verdict=g.get("verdict"), group_id=g.get("id"),
                url=f"{links}{href}" if isinstance(href, str) and href.startswith("/") else None)
    run.server = base
    for crash in run.crashes:
        crash.match = found.get(crash.signature)
