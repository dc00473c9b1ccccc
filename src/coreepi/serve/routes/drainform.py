"""The host page's drain form (``POST /hosts/{host_id}/drain``): a page write, CSRF-checked.

The checks are :func:`coreepi.serve.alertviews.check_drain_form`'s; the
drain itself is the API's (``POST /api/v1/hosts/{id}/drain``). Answers with
a redirect back to the host page, which shows the drained state.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from coreepi.serve.alertviews import check_drain_form
from coreepi.serve.errors import ApiError
from coreepi.serve.routes.alerts import drain_host

router = APIRouter(include_in_schema=False)


@router.post("/hosts/{host_id}/drain")
async def drain_form(host_id: str, request: Request) -> Response:
    """Drain ``host_id`` from its page; 303 back to it."""
    state = request.app.state
    await state.gateway.read(state.auth.refresh)
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = check_drain_form(request, host_id, (form.get("form_token") or [""])[0])
    reason = (form.get("reason") or [""])[0].strip()[:500]
    if await drain_host(request, host_id, f"ui:{token.name}", reason or "drained from the UI") is None:
        raise ApiError(404, f"host {host_id!r}: not in the store", "not-found")
    return RedirectResponse(f"/hosts/{quote(host_id, safe='')}", status_code=303)
