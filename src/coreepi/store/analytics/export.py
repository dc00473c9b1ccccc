"""``coreepi export parquet``: the store's tables as Parquet, partitioned by day.

Layout (Hive-style, what Spark, Trino, BigQuery external tables and DuckDB
read as partitions)::

    DIR/hosts/part-0.parquet
    DIR/exposure/day=2024-05-01/part-0.parquet      day of start_ts (UTC)
    DIR/crashes/day=2024-05-01/part-0.parquet       day of captured_at (UTC)
    DIR/telemetry/day=2024-05-01/part-0.parquet     day of ts (UTC)

Rows are streamed from the engine as Arrow batches (memory: one batch and the
open partition files), written by ``pyarrow.dataset``. ``DIR`` may be local
or ``s3://bucket/prefix`` (credentials from the usual AWS environment).
Re-exporting empties the table folders first, so an export is a snapshot,
never a mix of two (nor a day left over from an earlier export); a table
folder is emptied only when it is an export's (its :data:`MARKER` file) or
empty already, never a folder of the user's. A table
without rows is one empty ``part-0.parquet`` with the table's columns, so
every table's folder is there for a reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from coreepi.errors import StoreError
from coreepi.store.analytics.engines import TABLES, EngineTables

__all__ = ["DAY_COLUMN", "ExportResult", "export_parquet"]

DAY_COLUMN = {"exposure": "start_ts", "crashes": "captured_at", "telemetry": "ts"}
"""The timestamp whose UTC day partitions each table (hosts: not partitioned)."""

BATCH_ROWS = 200_000


@dataclass
class ExportResult:
    """Rows written per table."""

    rows: dict[str, int]


def _filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    try:
        return pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(),
                                                                     os.path.abspath(root))
    except (pa.ArrowInvalid, OSError) as exc:
        raise StoreError(f"{root}: cannot write a Parquet export there: {exc}") from None


MARKER = ".coreepi-export"
"""The empty file each table folder of an export holds: a folder re-export may
empty (readers skip dot files: pyarrow, Spark, DuckDB's ``*.parquet`` globs)."""


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_folders(fs: pafs.FileSystem, base: str, root: str) -> None:
    """Refuse (StoreError naming the folder) to replace a table folder that
    holds anything but is not a coreepi export: a user's files are never
    deleted by an export."""
    for name in TABLES:
        folder = f"{base}/{name}"
        try:
            if fs.get_file_info(folder).type == pafs.FileType.NotFound:
                continue
            held = fs.get_file_info(pafs.FileSelector(folder, recursive=False))
            marked = fs.get_file_info(f"{folder}/{MARKER}").type == pafs.FileType.File
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{root}: cannot write the {name} table: {_first_line(exc)}") from None
        if held and not marked:
            raise StoreError(f"{folder}: holds files that are not a coreepi export (no "
                             f"{MARKER}); refusing to replace them: empty it or export to "
                             f"another folder than {root}")


def _batches(et: EngineTables, table: Any) -> pa.RecordBatchReader:
    """``table``'s rows as Arrow batches of ``BATCH_ROWS``. On DuckDB read from
    a relation of the compiled SQL: ibis 12's ``to_pyarrow_batches`` calls
    ``fetch_record_batch``, which DuckDB 2.0 renamed ``to_arrow_reader``."""
    if et.engine != "duckdb":
        return et.backend.to_pyarrow_batches(table, chunk_size=BATCH_ROWS)
    relation = et.backend.con.sql(et.backend.compile(table))
    if hasattr(relation, "to_arrow_reader"):
        return relation.to_arrow_reader(BATCH_ROWS)
    return relation.record_batch(BATCH_ROWS)  # DuckDB 1.x


def export_parquet(et: EngineTables, root: str | os.PathLike[str]) -> ExportResult:
    """Write ``et``'s four tables under ``root`` (see the module docstring).
    Raises StoreError (one line naming ``root``) when it cannot be written."""
    fs, base = _filesystem(os.fspath(root))
    _check_folders(fs, base, os.fspath(root))
    written: dict[str, int] = {}
    for name in TABLES:
        table = et.tables[name]
        column = DAY_COLUMN.get(name)
        if column is not None:
            # the day as text: a date partition value reads back as a string
            # on some engines and a date on others; text is the same everywhere
            table = table.mutate(day=table[column].date().cast("string"))
        reader = _batches(et, table)
        count = 0

        def counted(batches: pa.RecordBatchReader) -> object:
            nonlocal count
            for batch in batches:
                count += batch.num_rows
                yield batch

        folder = f"{base}/{name}"
        try:
            fs.delete_dir_contents(folder, missing_dir_ok=True)
            ds.write_dataset(
                counted(reader), folder, schema=reader.schema, format="parquet",
                filesystem=fs, partitioning=["day"] if column else None,
                partitioning_flavor="hive" if column else None,
                existing_data_behavior="overwrite_or_ignore",
                basename_template="part-{i}.parquet", max_partitions=100_000,
            )
            if not count:  # no row, no file: keep the folder and the columns for readers
                fs.create_dir(folder)
                pq.write_table(reader.schema.empty_table(), f"{folder}/part-0.parquet",
                               filesystem=fs)
            with fs.open_output_stream(f"{folder}/{MARKER}"):
                pass
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{os.fspath(root)}: cannot write the {name} table: "
                             f"{_first_line(exc)}") from None
        written[name] = count
    return ExportResult(written)
