"""The host page's drain and undrain forms (``POST /hosts/{host_id}/drain``,
``POST /hosts/{host_id}/undrain``): page writes, CSRF-checked.

The checks are :func:`coreepi.serve.alertviews.check_drain_form`'s; the
drain and undrain themselves are the API's (``POST`` and ``DELETE
/api/v1/hosts/{id}/drain``). Both answer with a redirect back to the host
page, which shows the new state.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from coreepi.serve.alertviews import check_drain_form
from coreepi.serve.errors import ApiError
from coreepi.serve.routes.alerts import drain_host, undrain_host
from coreepi.store import ApiToken

router = APIRouter(include_in_schema=False)


async def _checked_form(request: Request, host_id: str) -> tuple[ApiToken, dict[str, list[str]]]:
    """The admin token behind the form post (:func:`check_drain_form`) and its fields."""
    state = request.app.state
    await state.gateway.read(state.auth.refresh)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    return check_drain_form(request, host_id, (form.get("form_token") or [""])[0]), form


@router.post("/hosts/{host_id}/drain")
async def drain_form(host_id: str, request: Request) -> Response:
    """Drain ``host_id`` from its page; 303 back to it."""
    token, form = await _checked_form(request, host_id)
    reason = (form.get("reason") or [""])[0].strip()[:500]
    if await drain_host(request, host_id, f"ui:{token.name}", reason or "drained from the UI") is None:
        raise ApiError(404, f"host {host_id!r}: not in the store", "not-found")
    return RedirectResponse(f"/hosts/{quote(host_id, safe='')}", status_code=303)


@router.post("/hosts/{host_id}/undrain")
async def undrain_form(host_id: str, request: Request) -> Response:
    """Put ``host_id`` back in service from its page; 303 back to it."""
    token, _ = await _checked_form(request, host_id)
    await undrain_host(request, host_id, f"ui:{token.name}")
    return RedirectResponse(f"/hosts/{quote(host_id, safe='')}", status_code=303)
