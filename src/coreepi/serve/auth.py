"""Bearer tokens with scopes: created once, stored hashed, checked per request.

A token is ``cep_`` + 43 url-safe base64 characters (256 random bits from
:mod:`secrets`). The store keeps only its SHA-256 (hex) with a short public
``token_id``, a name and its scopes; the token itself is shown once, when it
is created. A request carries ``Authorization: Bearer <token>``; the server
hashes it and compares the hash with :func:`hmac.compare_digest`.

Scopes: ``ingest`` (POST reports, PUT cores, POST heartbeats), ``read`` (the
query endpoints), ``admin`` (tokens; implies both others). An ingest token
cannot read and a read token cannot ingest. No or unknown token: 401; a
token without the scope: 403.

:func:`create_token`, :func:`list_tokens` and :func:`revoke_token` are what
``coreepi token …`` and the admin endpoints call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime

from fastapi import Request

from coreepi.serve.errors import ApiError
from coreepi.store import ApiToken, Store

__all__ = [
    "SCOPES",
    "Authenticator",
    "create_token",
    "hash_token",
    "list_tokens",
    "require",
    "revoke_token",
]

SCOPES = ("ingest", "read", "admin")
TOKEN_PREFIX = "cep_"


def hash_token(token: str) -> str:
    """SHA-256 of a token, lower-case hex (what the store keeps)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _check_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(scopes))
    if not out:
        raise ValueError("a token needs at least one scope (ingest, read, admin)")
    bad = [s for s in out if s not in SCOPES]
    if bad:
        raise ValueError(f"unknown scope(s) {', '.join(bad)}; known: {', '.join(SCOPES)}")
    return out


def create_token(store: Store, scopes: Iterable[str], name: str | None = None) -> tuple[ApiToken, str]:
    """Create and store a token; returns (its stored record, the token itself).
    The token is not kept anywhere: show it once. Raises ValueError on a bad scope."""
    checked = _check_scopes(scopes)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = secrets.token_hex(6)
    record = ApiToken(token_id=token_id, name=name or f"{'+'.join(checked)}-{token_id}",
                      scopes=checked, token_sha256=hash_token(token),
                      created_at=datetime.now(UTC))
    store.add_api_token(record)
    return record, token


def list_tokens(store: Store, include_revoked: bool = False) -> list[ApiToken]:
    return store.api_tokens(include_revoked=include_revoked)


def revoke_token(store: Store, token_id_or_name: str) -> int:
    """Revoke by id, or every active token of that name; returns how many."""
    return store.revoke_api_token(token_id_or_name)


class Authenticator:
    """Checks bearer tokens against the store's token table, cached in memory
    for ``cache_seconds`` (:meth:`invalidate` after a change made here)."""

    def __init__(self, store: Store, cache_seconds: float = 5.0) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._by_hash: dict[str, ApiToken] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def stale(self) -> bool:
        return time.monotonic() - self._loaded_at > self.cache_seconds

    def refresh(self) -> None:
        """Reload the active tokens (blocking: a store read)."""
        tokens = self.store.api_tokens()
        with self._lock:
            self._by_hash = {t.token_sha256: t for t in tokens}
            self._loaded_at = time.monotonic()

    def invalidate(self) -> None:
        with self._lock:
            self._loaded_at = float("-inf")

    def lookup(self, header: str | None) -> ApiToken:
        """The token of an ``Authorization`` header; ApiError 401 otherwise."""
        challenge = {"WWW-Authenticate": 'Bearer realm="coreepi"'}
        if not header:
            raise ApiError(401, "missing bearer token (Authorization: Bearer …)", "unauthorized",
                           challenge)
        kind, _, token = header.partition(" ")
        token = token.strip()
        if kind.lower() != "bearer" or not token:
            raise ApiError(401, "expected 'Authorization: Bearer <token>'", "unauthorized",
                           challenge)
        digest = hash_token(token)
        with self._lock:
            found = self._by_hash.get(digest)
        if found is None or not hmac.compare_digest(found.token_sha256, digest):
            raise ApiError(401, "unknown or revoked token", "unauthorized", challenge)
        return found


def require(scope: str) -> Callable[[Request], Awaitable[ApiToken]]:
    """A FastAPI dependency: the request's token, which must have ``scope``
    (``admin`` has every scope). 401 without a valid token, 403 without the scope."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}")

    async def dependency(request: Request) -> ApiToken:
        state = request.app.state
        auth: Authenticator = state.auth
        if auth.stale():
            await state.gateway.read(auth.refresh)
        token = auth.lookup(request.headers.get("authorization"))
        if scope not in token.scopes and "admin" not in token.scopes:
            raise ApiError(403, f"this token ({token.name}) lacks the {scope!r} scope "
                           f"(it has: {', '.join(token.scopes)})", "forbidden")
        request.state.token = token
        return token

    dependency.__name__ = f"require_{scope}"
    return dependency
