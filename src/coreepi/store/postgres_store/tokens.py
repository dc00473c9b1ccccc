"""The PostgreSQL :class:`~coreepi.store.interfaces.TokenStore`: the ``api_tokens`` table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from coreepi.store.interfaces.tokens import TokenStore
from coreepi.store.postgres_store.gateway import PostgresGateway
from coreepi.store.records import ApiToken
from coreepi.store.sqlbuild import utc_now

# loaded where it is used (see gateway.py)
if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresTokenStore"]


class PostgresTokenStore(PostgresGateway, TokenStore):
    """API tokens in PostgreSQL (scopes as a JSON array). Every replica reads
    the same table, so a revocation reaches all of them with their token
    cache's next refresh."""

    def add_api_token(self, token: ApiToken) -> None:
        import psycopg

        try:
            self._write(
                "INSERT INTO api_tokens (token_id, name, scopes, token_sha256, created_at, "
                "revoked_at) VALUES (?, ?, ?, ?, ?, ?)",
                [token.token_id, token.name, json.dumps(list(token.scopes)),
                 token.token_sha256, token.created_at, token.revoked_at])
        except psycopg.errors.UniqueViolation:
            raise ValueError(f"API token {token.token_id!r} ({token.name}): its id or hash "
                             "is already stored") from None

    def api_tokens(self, include_revoked: bool = False) -> list[ApiToken]:
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        rows = self._query("SELECT token_id, name, scopes, token_sha256, created_at, revoked_at "
                           f"FROM api_tokens{where} ORDER BY created_at, token_id")
        return [ApiToken(t, n, tuple(json.loads(sc)), h, c, r) for t, n, sc, h, c, r in rows]

    def revoke_api_token(self, token_id_or_name: str) -> int:
        return self._write(
            "UPDATE api_tokens SET revoked_at = ? WHERE revoked_at IS NULL "
            "AND (token_id = ? OR name = ?)",
            [utc_now(), token_id_or_name, token_id_or_name]).rowcount
