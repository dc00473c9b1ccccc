"""The PostgreSQL connection pool every part of the server store shares.

Unlike DuckDB, PostgreSQL takes many writers: each thread borrows a
connection from one :class:`psycopg_pool.ConnectionPool` for one statement
(autocommit) or, inside :meth:`PostgresGateway.transaction`, keeps it for the
whole block, so a read inside the block sees the block's own rows. Several
processes (``coreepi serve`` replicas, ``coreepi worker``s) share one
database; the database does the coordination.

SQL is written with ``?`` placeholders, as the DuckDB parts write it (so the
shared builders :class:`~coreepi.store.sqlbuild.Where` and
:func:`~coreepi.store.sqlbuild.insert_sql` serve both); :func:`pg_sql` turns
them into psycopg's ``%s``. Bulk rows go in as one array parameter per column
(``INSERT … SELECT … FROM unnest(…)``): one statement and one round trip per
batch.

Schema: the shared migrations (:mod:`coreepi.store.migrations`, recorded in
``schema_version``) then this backend's own numbered SQL files
(``postgres_store/sql/NNNN_name.sql``, recorded in ``postgres_migrations``),
applied under an advisory lock so replicas starting together migrate once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

from coreepi.errors import StoreError
from coreepi.store.base import COUNTED_TABLES
from coreepi.store.cancel import watch_query
from coreepi.store.interfaces.session import Transactional
from coreepi.store.migrations import MIGRATIONS, SCHEMA_VERSION_TABLE, latest_version
from coreepi.store.sqlbuild import insert_sql, utc_now

# psycopg, pandas and the report models are loaded where they are used, not on
# import: `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

__all__ = ["PostgresGateway", "array_literal", "is_postgres_url", "pg_sql", "redact"]

_MIGRATION_LOCK = 0x636F7265  # advisory lock key ("core"): one migrator at a time
_OWN_TABLE = """
CREATE TABLE IF NOT EXISTS postgres_migrations (
    version    INTEGER PRIMARY KEY,
    name       VARCHAR NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL
)
"""


def is_postgres_url(text: str) -> bool:
    """Whether ``text`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return text.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)


def pg_sql(sql: str) -> str:
    """Portable ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def array_literal(values: Sequence[str]) -> str:
    """A PostgreSQL array literal of strings, each quoted: ``{"a","b \\"c\\""}``."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def own_migrations() -> list[tuple[int, str, str]]:
    """(version, name, SQL) of the files ``sql/NNNN_name.sql``, in order."""
    out = []
    for item in resources.files("coreepi.store.postgres_store").joinpath("sql").iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", item.name)
        if m:
            out.append((int(m.group(1)), m.group(2), item.read_text(encoding="utf-8")))
    return sorted(out)


class PostgresGateway(Transactional):
    """The database at ``url`` (migrated on open) behind a pool of at most
    ``pool_size`` connections. Raises StoreError (naming the database, its
    password left out) when it cannot be reached or has a newer schema."""

    def __init__(self, url: str, *, read_only: bool = False, pool_size: int = 10) -> None:
        import psycopg
        from psycopg_pool import ConnectionPool, PoolTimeout

        self.url = url
        self.name = redact(url)
        self.read_only = read_only
        self._local = threading.local()
        self._closed = False
        options = "-c timezone=UTC" + (" -c default_transaction_read_only=on" if read_only else "")
        kwargs = {"autocommit": True, "options": options, "connect_timeout": 10}
        try:
            with psycopg.connect(url, **kwargs) as con:  # type: ignore[arg-type]
                self._migrate(con)
        except psycopg.Error as exc:
            raise StoreError(f"{self.name}: cannot open: {_first_line(exc)}") from None
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, kwargs=kwargs,
                                    check=ConnectionPool.check_connection, open=False,
                                    name="coreepi-store")
        try:
            self._pool.open(wait=True, timeout=15)
        except PoolTimeout:
            raise StoreError(f"{self.name}: cannot open a connection pool") from None

    # -- schema

    def _migrate(self, con: psycopg.Connection[Any]) -> None:
        current = _shared_version(con)
        if current > latest_version():
            raise StoreError(f"{self.name}: schema version {current} is newer than this "
                             f"coreepi knows ({latest_version()}); upgrade coreepi")
        own = own_migrations()
        if self.read_only:
            if current < latest_version():
                raise StoreError(f"{self.name}: schema version {current} needs migrating; "
                                 "open it writable once")
            return
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
            con.execute(SCHEMA_VERSION_TABLE)
            con.execute(_OWN_TABLE)
            current = _shared_version(con)
            for m in MIGRATIONS:
                if m.version > current:
                    for statement in m.statements:
                        con.execute(statement)
                    con.execute("INSERT INTO schema_version (version, description, applied_at) "
                                "VALUES (%s, %s, %s)", [m.version, m.description, utc_now()])
            done_row = con.execute("SELECT max(version) FROM postgres_migrations").fetchone()
            done = int(done_row[0]) if done_row and done_row[0] is not None else 0
            for version, name, sql in own:
                if version > done:
                    con.execute(sql)
                    con.execute("INSERT INTO postgres_migrations (version, name, applied_at) "
                                "VALUES (%s, %s, %s)", [version, name, utc_now()])

    def schema_version(self) -> int:
        """The last shared migration applied (0: none)."""
        with self._connection() as con:
            return _shared_version(con)

    # -- connections and transactions

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """See :meth:`Transactional.transaction`: the thread keeps one pooled
        connection for the block; nested blocks join it."""
        import psycopg

        if self.read_only:
            raise StoreError(f"{self.name}: opened read-only")
        if getattr(self._local, "con", None) is not None:
            yield
            return
        try:
            with self._pool.connection() as con:
                self._local.con = con
                try:
                    with con.transaction():
                        yield
                finally:
                    self._local.con = None
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.name}: {_first_line(exc)}") from None

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The thread's transaction connection, else a pooled one (autocommit)."""
        import psycopg

        con = getattr(self._local, "con", None)
        if con is not None:
            yield con
            return
        try:
            # a read under a budget can be stopped (store/cancel.py): the
            # cancel request reaches only this query; the connection stays usable
            with self._pool.connection() as con, watch_query(con.cancel_safe):
                yield con
        except psycopg.OperationalError as exc:
            raise StoreError(f"{self.name}: {_first_line(exc)}") from None

    def _write(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        """Run one write in the thread's transaction (or one of its own);
        returns the cursor (``rowcount``, ``fetchall`` for RETURNING)."""
        with self.transaction():
            return self._local.con.execute(pg_sql(sql), params)  # type: ignore[no-any-return]

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read."""
        with self._connection() as con:
            return con.execute(pg_sql(sql), params).fetchall()

    def _frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        """One read as a DataFrame (column names from the query)."""
        import pandas as pd

        with self._connection() as con:
            cur = con.execute(pg_sql(sql), params)
            columns = [d.name for d in cur.description or ()]
            return pd.DataFrame(cur.fetchall(), columns=columns)

    def _insert_rows(self, table: str, columns: dict[str, str], rows: Sequence[Sequence[Any]],
                     *, conflict: str | None = "DO NOTHING", where: str = "",
                     returning: str = "") -> psycopg.Cursor[Any]:
        """``INSERT INTO table … SELECT … FROM unnest(arrays)``: ``columns``
        {name: SQL type}, ``rows`` tuples in that order; one statement. An
        array-typed column (``VARCHAR[]``) is sent as array literals
        (:func:`array_literal`: unnest cannot take ragged 2-D arrays)."""
        names = list(columns)
        arrays = [[row[i] for row in rows] for i in range(len(names))]
        element = {c: ("TEXT" if t.endswith("[]") else t) for c, t in columns.items()}
        casts = {c: t for c, t in columns.items() if t.endswith("[]")}
        unnest = ", ".join(f"?::{t}[]" for t in element.values())
        stage = f"unnest({unnest}) AS _stage({', '.join(names)})"
        sql = insert_sql(table, names, casts, conflict=conflict, where=where,
                         returning=returning, stage=stage)
        return self._write(sql, arrays)

    def export_rows(self, table: str, batch: int = 10_000
                    ) -> Iterator[tuple[list[str], list[tuple[Any, ...]]]]:
        """Every row of ``table`` (one of the schema's), ``batch`` at a time,
        with the column names: the raw rows for moving the store elsewhere
        (``coreepi store copy`` to a data dir). A server-side cursor in one
        read transaction: a consistent snapshot, never the whole table in memory."""
        with self._connection() as con, con.transaction(), con.cursor(
                name=f"coreepi_export_{table}") as cur:
            cur.execute(f"SELECT * FROM {table}")
            columns = [d.name for d in cur.description or ()]
            while rows := cur.fetchmany(batch):
                yield columns, rows

    def import_rows(self, table: str, columns: list[str], rows: Sequence[Sequence[Any]]) -> int:
        """Insert raw rows of ``table`` (as another store's ``export_rows``
        gives them), keeping existing rows of the same key (``ON CONFLICT DO
        NOTHING``); a table without a key (a log such as ``alert_deliveries``)
        keeps out a row equal in every column to one already there, so a
        repeated copy adds nothing. Returns rows inserted. Column types are
        the table's."""
        if not rows:
            return 0
        types = dict(self._query(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = ?::regclass AND a.attnum > 0 AND NOT a.attisdropped", [table]))
        typed = {c: types[c] for c in columns}
        arrays = [i for i, c in enumerate(columns) if typed[c].endswith("[]")]
        if arrays:
            rows = [tuple(array_literal(v) if i in arrays and v is not None else v
                          for i, v in enumerate(row)) for row in rows]
        keyed = self._query("SELECT count(*) FROM pg_index WHERE indrelid = ?::regclass "
                            "AND (indisprimary OR indisunique)", [table])[0][0]
        where = "" if keyed else (
            f"NOT EXISTS (SELECT 1 FROM {table} AS _there WHERE " + " AND ".join(
                f"_there.{c} IS NOT DISTINCT FROM CAST(_stage.{c} AS {t})"
                for c, t in typed.items()) + ")")
        return self._insert_rows(table, typed, rows, where=where).rowcount

    def counts(self) -> dict[str, int]:
        """Rows per table of :data:`~coreepi.store.base.COUNTED_TABLES`."""
        sql = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in COUNTED_TABLES)
        got = dict(self._query(sql))
        return {t: int(got.get(t, 0)) for t in COUNTED_TABLES}

    def close(self) -> None:
        """Close the pool (idempotent)."""
        if not self._closed:
            self._closed = True
            self._pool.close()


def _shared_version(con: psycopg.Connection[Any]) -> int:
    row = con.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    got = con.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(got[0]) if got and got[0] is not None else 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
