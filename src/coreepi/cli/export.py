"""``coreepi export parquet DIR``, and the engine options of ``coreepi report``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coreepi.cli.common import DataDir, fail, store_target
from coreepi.cli.options import StoreOpt

__all__ = ["EngineOpt", "ParquetOpt", "SparkRemoteOpt", "export_app", "report_source"]

EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", metavar="ENGINE",
                 help="Who runs the heavy queries: duckdb (default for a data dir), postgres "
                 "(a postgresql:// store) or spark (reads --parquet). See docs/scale.md."),
]
ParquetOpt = Annotated[
    str | None,
    typer.Option("--parquet", metavar="DIR",
                 help="Read a Parquet export (`coreepi export parquet`) instead of the store: "
                 "with --engine spark or duckdb."),
]
SparkRemoteOpt = Annotated[
    str | None,
    typer.Option("--spark-remote", metavar="URL",
                 help="Spark Connect URL (sc://host:15002) of a cluster; default: local mode."),
]

export_app = typer.Typer(help="Export the store's tables for a data platform.",
                         no_args_is_help=True)


def report_source(store: Any, engine: str | None, parquet: str | None,
                  spark_remote: str | None) -> Any:
    """What ``report`` reads: the store's own SQL when no engine is chosen,
    else an :class:`~coreepi.store.analytics.EngineSource`. Raises
    StoreError (one line) for an engine that does not fit."""
    from coreepi.errors import StoreError
    from coreepi.store.analytics import ENGINES, EngineSource, parquet_tables, store_tables

    if engine is not None and engine not in ENGINES:
        raise StoreError(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    if parquet is not None:
        return EngineSource(parquet_tables(parquet, engine or "duckdb", spark_remote))
    if engine is None:
        return store
    return EngineSource(store_tables(store, engine))


@export_app.command("parquet")
def export_parquet_cmd(
    out: Annotated[str, typer.Argument(metavar="DIR", help="Folder or s3://bucket/prefix.")],
    store: StoreOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Write hosts, exposure, crashes and telemetry as Parquet, one folder per
    table, partitioned by UTC day (day=YYYY-MM-DD), replacing an earlier export
    (never a folder of the user's: refused, exit 2)."""
    from coreepi.errors import StoreError
    from coreepi.store import open_store
    from coreepi.store.analytics import export_parquet, store_tables
    from coreepi.store.postgres_store import PostgresStore

    try:
        with open_store(store_target(store, data_dir), read_only=True) as opened:
            engine = "postgres" if isinstance(opened, PostgresStore) else "duckdb"
            tables = store_tables(opened, engine)
            try:
                result = export_parquet(tables, out)
            finally:
                tables.close()
    except StoreError as exc:
        fail(str(exc))
    rows = ", ".join(f"{t} {n}" for t, n in result.rows.items())
    sys.stdout.write(f"exported to {out}: {rows}\n")
