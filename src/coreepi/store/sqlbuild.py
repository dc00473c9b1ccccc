"""The SQL both backends share: a WHERE builder, the bulk-insert builder,
canonical JSON and the clock. Placeholders are ``?`` (DuckDB's; the
PostgreSQL gateway turns them into ``%s``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

__all__ = ["Where", "insert_sql", "to_json", "utc_now"]


def to_json(value: Any) -> str:
    """``value`` as canonical JSON text (sorted keys; non-JSON values as str)."""
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def utc_now() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


class Where:
    """A WHERE clause built from optional conditions, its parameters in order.

    >>> w = Where().since_until("ts", None, t1).equals("host_id", "h1")
    >>> w.sql, w.params  # (" WHERE ts < ? AND host_id = ?", [t1, "h1"])
    """

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.params: list[Any] = []

    def add(self, clause: str, *params: Any) -> Where:
        """AND ``clause`` (with one ``?`` per param)."""
        self.clauses.append(clause)
        self.params.extend(params)
        return self

    def add_if(self, value: Any, clause: str) -> Where:
        """AND ``clause`` with the one parameter ``value``, unless it is None."""
        return self if value is None else self.add(clause, value)

    def equals(self, column: str, value: Any) -> Where:
        """AND ``column = value``, unless ``value`` is None."""
        return self.add_if(value, f"{column} = ?")

    def since_until(self, column: str, since: datetime | None, until: datetime | None) -> Where:
        """AND ``since <= column < until`` (a None bound: unbounded)."""
        return self.add_if(since, f"{column} >= ?").add_if(until, f"{column} < ?")

    @property
    def sql(self) -> str:
        """`` WHERE a AND b`` or the empty string."""
        return (" WHERE " + " AND ".join(self.clauses)) if self.clauses else ""


def insert_sql(
    table: str, columns: Iterable[str], casts: dict[str, str] | None = None, *,
    conflict: str | None = "DO NOTHING", where: str = "", returning: str = "",
    stage: str = "_stage",
) -> str:
    """``INSERT INTO table (columns) SELECT columns FROM stage …``: the one
    builder of the store's bulk inserts. ``casts``: {column: SQL type} for
    columns whose pandas dtype does not say it (all-None columns, lists,
    timestamps); ``conflict``: the ``ON CONFLICT`` action (None: no clause);
    ``where``: a filter on the staged rows; ``returning``: columns to return."""
    columns = list(columns)
    casts = casts or {}
    select = ", ".join(f"CAST({c} AS {casts[c]})" if c in casts else c for c in columns)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM {stage}"
    if where:
        sql += f" WHERE {where}"
    if conflict is not None:
        sql += f" ON CONFLICT {conflict}"
    if returning:
        sql += f" RETURNING {returning}"
    return sql
