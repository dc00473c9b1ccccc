"""TokenStore: the HTTP API's bearer tokens, kept as SHA-256 hashes only."""

from __future__ import annotations

import abc

from coreepi.store.interfaces.session import Transactional
from coreepi.store.records import ApiToken

__all__ = ["TokenStore"]


class TokenStore(Transactional):
    """API tokens: add, list, revoke. A token is never deleted, only revoked."""

    @abc.abstractmethod
    def add_api_token(self, token: ApiToken) -> None:
        """Store a new token. Raises ValueError (naming the token) when its
        ``token_id`` or ``token_sha256`` is already stored; nothing is written then."""

    @abc.abstractmethod
    def api_tokens(self, include_revoked: bool = False) -> list[ApiToken]:
        """The stored tokens, by ``created_at`` then ``token_id``; revoked ones
        only with ``include_revoked``. Times are UTC."""

    @abc.abstractmethod
    def revoke_api_token(self, token_id_or_name: str) -> int:
        """Revoke the token with this id, or every token with this name
        (``revoked_at`` = now, UTC); returns how many were revoked now (0
        for an unknown or already revoked token: revoking is idempotent)."""
