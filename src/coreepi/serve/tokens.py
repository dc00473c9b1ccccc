"""Token management without the web framework: what ``coreepi token …`` and
the admin endpoints call (:mod:`coreepi.serve.auth` checks tokens per
request). Imports nothing heavy, so ``coreepi token create`` starts fast."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime

from coreepi.store import ApiToken, Store

__all__ = ["SCOPES", "TOKEN_PREFIX", "create_token", "hash_token", "list_tokens",
           "revoke_token"]

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
