"""Token management (scope ``admin``): the way to manage tokens while the
server runs (the embedded store admits one process, so ``coreepi token``
works only while the server is stopped)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from coreepi.serve.auth import create_token, list_tokens, require, revoke_token
from coreepi.serve.errors import ApiError
from coreepi.serve.models import TokenCreate, token_json
from coreepi.store import ApiToken

router = APIRouter(prefix="/api/v1/tokens", tags=["admin"])
Admin = Annotated[ApiToken, Depends(require("admin"))]


@router.post("", status_code=201)
async def create(body: TokenCreate, request: Request, _: Admin) -> dict[str, Any]:
    """Create a token; the answer is the only place the token is ever shown."""
    state = request.app.state
    try:
        record, token = await state.gateway.write(create_token, state.store, body.scopes,
                                                  body.name)
    except ValueError as exc:
        raise ApiError(422, str(exc), "invalid-body") from None
    state.auth.invalidate()
    return {**token_json(record), "token": token}


@router.get("")
async def index(request: Request, _: Admin, include_revoked: bool = False) -> dict[str, Any]:
    state = request.app.state
    tokens = await state.gateway.read(list_tokens, state.store, include_revoked)
    return {"tokens": [token_json(t) for t in tokens]}


@router.delete("/{token_id_or_name}")
async def revoke(token_id_or_name: str, request: Request, _: Admin) -> dict[str, Any]:
    """Revoke a token by id, or every token of that name."""
    state = request.app.state
    n = await state.gateway.write(revoke_token, state.store, token_id_or_name)
    if not n:
        raise ApiError(404, f"no active token {token_id_or_name!r}", "not-found")
    state.auth.invalidate()
    return {"revoked": n}
