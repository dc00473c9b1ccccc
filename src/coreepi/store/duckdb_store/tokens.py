"""The DuckDB :class:`~coreepi.store.interfaces.TokenStore`: the ``api_tokens`` table."""

from __future__ import annotations

import json
from datetime import UTC

import duckdb

from coreepi.store.duckdb_store.gateway import DuckDBGateway, utc_now
from coreepi.store.interfaces.tokens import TokenStore
from coreepi.store.records import ApiToken

__all__ = ["DuckDBTokenStore"]


class DuckDBTokenStore(DuckDBGateway, TokenStore):
    """API tokens in DuckDB (scopes as a JSON array)."""

    def add_api_token(self, token: ApiToken) -> None:
        try:
            with self.transaction():
                self._con.execute(
                    "INSERT INTO api_tokens (token_id, name, scopes, token_sha256, created_at, "
                    "revoked_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [token.token_id, token.name, json.dumps(list(token.scopes)),
                     token.token_sha256, token.created_at, token.revoked_at],
                )
        except duckdb.ConstraintException:
            raise ValueError(f"API token {token.token_id!r} ({token.name}): its id or hash "
                             "is already stored") from None

    def api_tokens(self, include_revoked: bool = False) -> list[ApiToken]:
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        rows = self._query(
            "SELECT token_id, name, scopes, token_sha256, created_at, revoked_at "
            f"FROM api_tokens{where} ORDER BY created_at, token_id"
        ).fetchall()
        return [
            ApiToken(t, n, tuple(json.loads(sc)), h, c.astimezone(UTC),
                     r.astimezone(UTC) if r is not None else None)
            for t, n, sc, h, c, r in rows
        ]

    def revoke_api_token(self, token_id_or_name: str) -> int:
        with self.transaction():
            row = self._con.execute(
                "UPDATE api_tokens SET revoked_at = ? WHERE revoked_at IS NULL "
                "AND (token_id = ? OR name = ?)",
                [utc_now(), token_id_or_name, token_id_or_name],
            ).fetchone()
        return int(row[0]) if row else 0
