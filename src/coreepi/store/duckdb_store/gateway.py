"""The DuckDB connection every part of the embedded store shares: one writer.

DuckDB allows one writing process per database file (it locks the file), and
within the process one connection should write. Following Datasette's
``Database`` (one gateway for writes), every write goes through
:meth:`DuckDBGateway.transaction`, which holds a lock around the single
writer connection: threads of one process (ingest's dispatchers, the
server's handlers) queue there, never open the database themselves. Reads use
cursors (DuckDB's per-thread connections to the same database) and see
committed data, or the writer itself inside the reading thread's own
transaction. A second process gets a :class:`~coreepi.errors.StoreError`
naming the data dir, unless it opens read-only while nobody writes.

Bulk rows go in as a registered DataFrame (``INSERT … SELECT … FROM _stage
ON CONFLICT …``, built by :func:`insert_sql`): one statement per batch
instead of one per row. The SQL itself is portable (PostgreSQL has ``ON
CONFLICT``, ``TIMESTAMPTZ``, ``VARCHAR[]``); only the staging is DuckDB's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from coreepi.errors import StoreError
from coreepi.model.limits import duckdb_threads
from coreepi.store.base import COUNTED_TABLES
from coreepi.store.cancel import track_query
from coreepi.store.interfaces.session import Transactional
from coreepi.store.migrations import MIGRATIONS, SCHEMA_VERSION_TABLE, latest_version
from coreepi.store.sqlbuild import Where, insert_sql, to_json, utc_now

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DB_NAME", "DuckDBGateway", "Where", "default_data_dir", "insert_sql", "to_json",
           "utc_now"]

DB_NAME = "coreepi.duckdb"


def default_data_dir() -> Path:
    """``$COREEPI_DATA_DIR``, else the per-user data dir (platformdirs), e.g.
    ``~/.local/share/coreepi`` on Linux."""
    env = os.environ.get("COREEPI_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("coreepi", appauthor=False))


def _locked(data_dir: Path, text: str) -> str:
    """The one line for a store another process holds, from DuckDB's lock
    error ``text`` ("Conflicting lock is held in /usr/bin/python3 (PID 123)"):
    the holder named (``coreepi serve`` read from ``/proc/PID/cmdline``) and
    what to do, not DuckDB's internals."""
    import re

    found = re.search(r"\(PID (\d+)\)", text)
    if found is None:
        return (f"the store {data_dir} is in use by another process (DuckDB allows one "
                "writer): wait for it to finish or stop it")
    pid = found.group(1)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        argv = []
    words = [Path(a).name for a in argv if a]
    if "serve" in words and any(w == "coreepi" or w.startswith("coreepi") for w in words):
        # what works through the server, by command: only these take --server
        return (f"the store {data_dir} is open in coreepi serve (pid {pid}), and DuckDB lets "
                "one process open it: stop the server, or go through it: list, info, dump and "
                "debug take --server URL (read token), host drain --server URL (admin token); "
                "findings, groups, hosts and alerts are in its web UI and /api/v1; other "
                "commands need the server stopped")
    holder = " ".join(argv).strip() or "another process"
    return (f"the store {data_dir} is in use by {holder[:120]} (pid {pid}; DuckDB allows one "
            "writer): wait for it to finish or stop it")


def _open(data_dir: Path, db_path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Connect to ``db_path``; every failure becomes one StoreError line."""
    if read_only and not db_path.exists():
        raise StoreError(f"{data_dir}: no coreepi store here (nothing ingested yet)")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        # offline by default: DuckDB would otherwise download a missing extension
        # the allocator's background threads hand freed memory back to the system:
        # without them a report on 10M intervals kept ~400 MB of finished queries'
        # hash tables (docs/scale.md)
        config: dict[str, object] = {"autoinstall_known_extensions": False,
                                     "allocator_background_threads": True}
        if (threads := duckdb_threads()) is not None:
            config["threads"] = threads
        return duckdb.connect(os.fspath(db_path), read_only=read_only, config=config)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise StoreError(_locked(data_dir, text)) from None
        raise StoreError(f"{db_path}: cannot open: {text.splitlines()[0]}") from None
    except (duckdb.Error, OSError) as exc:
        raise StoreError(f"{db_path}: cannot open: {exc}") from None


class DuckDBGateway(Transactional):
    """The database ``data_dir/coreepi.duckdb`` (created if needed, migrated
    on open): the writer, its lock, the readers. Each DuckDB part of the store
    (``DuckDBCrashStore`` …) is one of these, and :class:`DuckDBStore` is all
    of them over one gateway. Raises StoreError when the file cannot be
    opened, is locked by another process, or has a newer schema."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, read_only: bool = False):
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.read_only = read_only
        self.db_path = self.data_dir / DB_NAME
        self._con = _open(self.data_dir, self.db_path, read_only)
        self._con.execute("SET TimeZone = 'UTC'")
        self._lock = threading.RLock()
        self._depth = 0
        self._owner: int | None = None  # thread inside transaction(), if any
        self._closed = False
        self._migrate()

    # -- schema

    def schema_version(self) -> int:
        """The last migration applied (0: none)."""
        try:
            row = self._con.execute("SELECT max(version) FROM schema_version").fetchone()
        except duckdb.CatalogException:
            return 0
        return int(row[0]) if row and row[0] is not None else 0

    def _migrate(self) -> None:
        current = self.schema_version()
        if current > latest_version():
            raise StoreError(
                f"{self.db_path}: schema version {current} is newer than this coreepi "
                f"knows ({latest_version()}); upgrade coreepi"
            )
        if current == latest_version():
            return
        if self.read_only:
            raise StoreError(f"{self.db_path}: schema version {current} needs migrating; "
                             "open it writable once (e.g. run ingest)")
        with self.transaction():
            self._con.execute(SCHEMA_VERSION_TABLE)
        for m in MIGRATIONS:
            if m.version <= current:
                continue
            with self.transaction():
                for statement in m.statements:
                    self._con.execute(statement)
                self._con.execute(
                    "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                    [m.version, m.description, utc_now()],
                )

    # -- the write gateway

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """See :meth:`Transactional.transaction`: one lock around the writer."""
        if self.read_only:
            raise StoreError(f"{self.db_path}: opened read-only")
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._con.begin()
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._con.rollback()
                raise
            self._depth -= 1
            if outer:
                self._con.commit()

    @contextmanager
    def _staged(
        self, frame: pd.DataFrame, name: str = "_stage", con: duckdb.DuckDBPyConnection | None = None
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """``frame`` registered as the view ``name`` on ``con`` (the writer by
        default) for the block; yields that connection."""
        con = con if con is not None else self._con
        con.register(name, frame)
        try:
            yield con
        finally:
            con.unregister(name)

    def _insert_frame(self, table: str, frame: pd.DataFrame, casts: dict[str, str] | None = None,
                      conflict: str | None = "DO NOTHING") -> int:
        """INSERT the rows of ``frame`` (columns = the table's) into ``table``,
        one statement (see :func:`insert_sql`); returns rows inserted."""
        if frame.empty:
            return 0
        with self.transaction(), self._staged(frame) as con:
            row = con.execute(insert_sql(table, frame.columns, casts, conflict=conflict)).fetchone()
        return int(row[0]) if row else 0

    # -- reads

    def _reader(self) -> duckdb.DuckDBPyConnection:
        """The connection a read uses: inside this thread's transaction the
        writer, which sees the transaction's own uncommitted rows
        (check-then-insert); else a fresh cursor in a UTC session."""
        if self._depth and self._owner == threading.get_ident():
            return self._con
        cur = self._con.cursor()
        track_query(cur.interrupt)  # a read under a budget can be stopped (store/cancel.py)
        cur.execute("SET TimeZone = 'UTC'")
        return cur

    def _query(self, sql: str, params: list[Any] | None = None) -> duckdb.DuckDBPyConnection:
        """Run a read on :meth:`_reader`; returns the result to fetch from."""
        return self._reader().execute(sql, params or [])

    def export_rows(self, table: str, batch: int = 10_000) -> Iterator[tuple[list[str], list[tuple[Any, ...]]]]:
        """Every row of ``table`` (one of the schema's), ``batch`` at a time,
        with the column names: the raw rows for moving a store elsewhere
        (``coreepi store copy``)."""
        cur = self._reader().execute(f"SELECT * FROM {table}")
        columns = [d[0] for d in cur.description or ()]
        while rows := cur.fetchmany(batch):
            yield columns, rows

    def import_rows(self, table: str, columns: list[str], rows: Sequence[Sequence[Any]]) -> int:
        """Insert raw rows of ``table`` (as another store's ``export_rows``
        gives them: ``coreepi store copy`` from PostgreSQL or a data dir),
        keeping existing rows of the same key; a table without a key (a log)
        keeps out a row equal in every column to one already there, so a
        repeated copy adds nothing. Returns rows inserted. Column types are
        the table's (the staged values are cast to them)."""
        import pandas as pd

        if not rows:
            return 0
        types = dict(self._query("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = ?", [table]).fetchall())
        casts = {c: types[c] for c in columns}
        keyed = self._query(
            "SELECT (SELECT count(*) FROM duckdb_constraints() WHERE table_name = ? AND "
            "constraint_type IN ('PRIMARY KEY', 'UNIQUE')) + (SELECT count(*) FROM "
            "duckdb_indexes() WHERE table_name = ? AND is_unique)", [table, table]).fetchall()
        where = "" if keyed[0][0] else (
            f"NOT EXISTS (SELECT 1 FROM {table} AS _there WHERE " + " AND ".join(
                f"_there.{c} IS NOT DISTINCT FROM CAST(_stage.{c} AS {t})"
                for c, t in casts.items()) + ")")
        frame = pd.DataFrame([tuple(r) for r in rows], columns=columns, dtype=object)
        with self.transaction(), self._staged(frame) as con:
            row = con.execute(insert_sql(table, columns, casts, where=where,
                                         conflict="DO NOTHING" if not where else None)
                              ).fetchone()
        return int(row[0]) if row else 0

    def counts(self) -> dict[str, int]:
        """Rows per table of :data:`~coreepi.store.base.COUNTED_TABLES`."""
        out = {}
        for table in COUNTED_TABLES:
            row = self._query(f"SELECT count(*) FROM {table}").fetchone()
            out[table] = int(row[0]) if row else 0
        return out

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if not self._closed:
            self._closed = True
            self._con.close()
