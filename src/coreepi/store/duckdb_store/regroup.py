"""The DuckDB :class:`~coreepi.store.interfaces.RegroupStore` (migration 5)."""

from __future__ import annotations

from collections.abc import Sequence

from coreepi.store.duckdb_store.gateway import DuckDBGateway
from coreepi.store.interfaces.regroup import RegroupStore
from coreepi.store.regroup_sql import (
    RegroupRow, insert_regroup_sql, lineage_sql, regroup_params, regroup_row,
)  # fmt: skip

__all__ = ["DuckDBRegroupStore"]


class DuckDBRegroupStore(DuckDBGateway, RegroupStore):
    """The regroup history in DuckDB."""

    def record_regroup(self, rows: Sequence[RegroupRow]) -> int:
        params = [regroup_params(r) for r in rows]  # checked before anything is written
        with self.transaction():
            for p in params:
                self._con.execute(insert_regroup_sql(), p)
        return len(params)

    def group_lineage(self, signature: str | None) -> list[RegroupRow]:
        key = signature or ""
        return [regroup_row(r) for r in self._query(lineage_sql(), [key, key]).fetchall()]
