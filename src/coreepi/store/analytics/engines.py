"""Which engine runs the analytics' queries, and on which tables.

An :class:`EngineTables` is an Ibis backend plus the four tables the
analytics read (``hosts``, ``exposure``, ``crashes``, ``telemetry``), with
the store's column names. Three ways to get one:

- ``duckdb``: the DuckDB store's own database (a cursor of its connection);
- ``postgres``: the PostgreSQL store's database (a connection of its own, UTC);
- ``duckdb`` or ``spark`` over a Parquet export (:mod:`.export`): Hive-style
  day partitions, the shape a data platform reads. Spark runs in local mode
  (``local[*]``, the same engine a cluster runs) or, given ``spark_remote``
  (``sc://host:15002``), on a cluster through Spark Connect.

Errors: :class:`~coreepi.errors.StoreError` (one line) when the engine does
not fit the store, the export is missing, or the engine cannot start.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import duckdb
import ibis
from ibis.backends import BaseBackend

from coreepi.errors import StoreError

__all__ = ["ENGINES", "TABLES", "EngineTables", "parquet_tables", "spark_session", "store_tables"]

ENGINES = ("duckdb", "postgres", "spark")
TABLES = ("hosts", "exposure", "crashes", "telemetry")


@dataclass
class EngineTables:
    """An Ibis backend and the analytics' tables on it; :meth:`close` frees what it opened."""

    engine: str
    backend: BaseBackend
    tables: dict[str, ibis.Table]
    _closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for closer in reversed(self._closers):
            closer()
        self._closers.clear()


def store_tables(store: Any, engine: str) -> EngineTables:
    """The tables of an open store (``DuckDBStore`` or ``PostgresStore``) on
    its own database; ``engine`` must name that database's kind."""
    from coreepi.store.duckdb_store import DuckDBStore
    from coreepi.store.postgres_store import PostgresStore

    if engine == "duckdb" and isinstance(store, DuckDBStore):
        # a cursor of the store's connection: DuckDB allows one open database
        # per file and process, and a cursor sees the same snapshot rules
        backend = ibis.duckdb.from_connection(store._reader())  # noqa: SLF001 (same package)
        return EngineTables(engine, backend, {t: backend.table(t) for t in TABLES})
    if engine == "postgres" and isinstance(store, PostgresStore):
        import psycopg

        con = psycopg.connect(store.url, autocommit=True, options="-c timezone=UTC",
                              connect_timeout=10)
        backend = ibis.postgres.from_connection(con)
        return EngineTables(engine, backend, {t: backend.table(t) for t in TABLES}, [con.close])
    kind = "PostgreSQL" if isinstance(store, PostgresStore) else "DuckDB"
    hint = "--parquet DIR (see `coreepi export parquet`)" if engine == "spark" else \
        f"a {'postgresql:// ' if engine == 'postgres' else 'DuckDB data dir '}store"
    raise StoreError(f"--engine {engine}: the store is {kind}; this engine needs {hint}")


def spark_session(remote: str | None = None) -> Any:
    """A SparkSession in UTC: Spark Connect to ``remote`` (``sc://…``), else
    local mode on every CPU. Local mode starts a JVM (Java 17+): 10-20 s."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.appName("coreepi")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    if remote:
        if not remote.startswith("sc://"):
            raise StoreError(f"--spark-remote {remote!r}: expected a Spark Connect URL sc://host:port")
        return builder.remote(remote).getOrCreate()
    # Spark's Python workers: this interpreter (its venv has coreepi's dependencies)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (builder.master("local[*]")
               .config("spark.ui.enabled", "false")
               # the aggregated tables are small: few shuffle partitions, and
               # partition discovery of a day-partitioned export in the driver
               .config("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2)))
               .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "100000")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1"))
    with tempfile.TemporaryFile(prefix="coreepi-spark-") as log:
        try:
            with _stderr_to(log):
                return builder.getOrCreate()
        except Exception as exc:  # no Java, a JVM that exits: Spark's own words are in the log
            log.seek(0)
            said = [line for line in log.read().decode("utf-8", "replace").splitlines()
                    if line.strip()]
            why = said[-1].strip() if said else str(exc).strip().splitlines()[0]
            raise StoreError(f"--engine spark: Spark did not start: {why}") from None


@contextmanager
def _stderr_to(log: IO[bytes]) -> Iterator[None]:
    """File descriptor 2 is ``log`` while the local JVM starts. The JVM (and
    the Python workers it starts later) inherit it, so its start-up lines
    (JVM warnings, log4j's "Setting default log level", native-hadoop
    warnings) never reach the user's stderr, which keeps only coreepi's
    own lines; the file is anonymous and goes when the JVM exits."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def parquet_tables(root: str | os.PathLike[str], engine: str,
                   spark_remote: str | None = None) -> EngineTables:
    """The tables of a Parquet export at ``root`` (one folder per table, day
    partitions inside) on ``engine`` (``duckdb`` or ``spark``)."""
    text = os.fspath(root)
    if "://" not in text:
        missing = [t for t in TABLES if not (Path(text) / t).is_dir()]
        if missing:
            raise StoreError(f"{text}: not a coreepi Parquet export (no {missing[0]}/ folder); "
                             "make one with `coreepi export parquet DIR`")
    if engine == "duckdb":
        backend = ibis.duckdb.connect()
        # offline by default: never download an extension (httpfs for s3://)
        backend.raw_sql("SET autoinstall_known_extensions = false")
        backend.raw_sql("SET TimeZone = 'UTC'")
        try:
            tables = {t: backend.read_parquet(f"{text}/{t}/**/*.parquet", table_name=t,
                                              hive_partitioning=True) for t in TABLES}
        except duckdb.Error as exc:  # a corrupt part, a missing extension, an unreachable bucket
            backend.disconnect()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"{text}: cannot read the Parquet export: {first}") from None
        return EngineTables(engine, backend, tables, [backend.disconnect])
    if engine != "spark":
        raise StoreError(f"--engine {engine}: a Parquet export is read by duckdb or spark")
    session = spark_session(spark_remote)
    backend = ibis.pyspark.connect(session)
    tables = {t: backend.read_parquet(f"{text}/{t}", table_name=t) for t in TABLES}
    return EngineTables(engine, backend, tables)
