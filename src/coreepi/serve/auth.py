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

People use the pages with a cookie (``coreepi_session``, HttpOnly,
SameSite=Strict) holding a read token: either one they typed into the login
form (checked against the token table on every request, so revoking it logs
them out), or a session made by redeeming the one-time login code that
``coreepi serve`` prints (kept in memory only: it ends with the process).
The cookie is honoured for ``read`` only — never for API writes — so a
forged cross-site request can change nothing through the API. The one
write a page makes, the host page's drain form, takes a session holding an
``admin`` token plus a same-origin ``Origin`` and an HMAC form token
(:mod:`coreepi.serve.alertviews`).

:func:`create_token`, :func:`list_tokens` and :func:`revoke_token` (in
:mod:`coreepi.serve.tokens`, free of FastAPI) are what ``coreepi token …``
and the admin endpoints call.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from fastapi import Request

from coreepi.serve.errors import ApiError
from coreepi.serve.tokens import SCOPES, create_token, hash_token, list_tokens, revoke_token
from coreepi.store import ApiToken, Store

__all__ = [
    "COOKIE",
    "SCOPES",
    "Authenticator",
    "token_from",
    "create_token",
    "hash_token",
    "list_tokens",
    "require",
    "revoke_token",
]

SESSION_PREFIX = "ces_"
COOKIE = "coreepi_session"


class Authenticator:
    """Checks bearer tokens against the store's token table, cached in memory
    for ``cache_seconds`` (:meth:`invalidate` after a change made here)."""

    def __init__(self, store: Store, cache_seconds: float = 5.0) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._by_hash: dict[str, ApiToken] = {}
        self._sessions: dict[str, ApiToken] = {}
        self._login_codes: set[str] = set()
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def login_code(self) -> str:
        """A one-time code for ``/login?code=…`` (as Jupyter's token URL):
        redeemed once for a read session; kept in memory only."""
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._login_codes.add(hash_token(code))
        return code

    def redeem(self, code: str) -> str | None:
        """A new session token (read scope) for an unused login code, else None."""
        digest = hash_token(code)
        with self._lock:
            if digest not in self._login_codes:
                return None
            self._login_codes.discard(digest)
            session = SESSION_PREFIX + secrets.token_urlsafe(32)
            self._sessions[hash_token(session)] = ApiToken(
                token_id=secrets.token_hex(6), name="login-session", scopes=("read",),
                token_sha256=hash_token(session), created_at=datetime.now(UTC))
        return session

    def end_session(self, session: str) -> None:
        """Forget a session made by :meth:`redeem` (logout). A pasted token
        is not a session: it stays valid until revoked (``coreepi token
        revoke``), on every replica."""
        with self._lock:
            self._sessions.pop(hash_token(session), None)

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
            found = self._by_hash.get(digest) or self._sessions.get(digest)
        if found is None or not hmac.compare_digest(found.token_sha256, digest):
            raise ApiError(401, "unknown or revoked token", "unauthorized", challenge)
        return found


def token_from(request: Request, scope: str) -> str | None:
    """The request's ``Authorization`` header; for the read scope, without
    one, the session cookie as a bearer header."""
    header = request.headers.get("authorization")
    if header is None and scope == "read" and (cookie := request.cookies.get(COOKIE)):
        return f"Bearer {cookie}"
    return header


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
        token = auth.lookup(token_from(request, scope))
        if scope not in token.scopes and "admin" not in token.scopes:
            raise ApiError(403, f"this token ({token.name}) lacks the {scope!r} scope "
                           f"(it has: {', '.join(token.scopes)})", "forbidden")
        request.state.token = token
        return token

    dependency.__name__ = f"require_{scope}"
    return dependency
