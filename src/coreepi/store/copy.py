"""``coreepi store copy``: copy a store into another, idempotently: a data
dir into PostgreSQL (moving to the multi-server deployment), PostgreSQL into a
data dir (a backup, a test copy, leaving PostgreSQL), a data dir into another
(a backup of an embedded store). Both stores speak the same schema (the
shared migrations), so the rows move raw: ``export_rows`` of one,
``import_rows`` of the other.

Blobs go first (a copied crash row never names a blob the destination lacks),
streamed one at a time through a temporary file, each keeping its time
(retention prunes by age; an object store that sets its own time cannot, and
the result counts those), with the tombstones of the blobs retention deleted
(``pruned/KEY``: a pruned core reads "pruned" in the copy too, not "not
found"); then every table of the
schema (as the migrations create them), raw rows in batches, each kept when
its key is already there (a keyless log: when an equal row is there). Run
it again — after more ingesting into the data dir, or after an interruption
— and only what is missing is added. Ingest rejections have no key: those
of the files being copied are replaced, in one transaction.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coreepi.store.duckdb_store import DuckDBStore
from coreepi.store.migrations import schema_tables
from coreepi.store.postgres_store import PostgresStore

AnyStore = DuckDBStore | PostgresStore  # the two with export_rows/import_rows

__all__ = ["CopyResult", "copy_store"]


@dataclass
class CopyResult:
    """Rows added per table, rows already there, blobs added and bytes."""

    added: dict[str, int] = field(default_factory=dict)
    present: dict[str, int] = field(default_factory=dict)
    blobs_added: int = 0
    blobs_present: int = 0
    blob_bytes: int = 0
    blobs_copy_time: int = 0
    """Blobs added that carry the time of the copy, not their own (the
    destination, an object store, sets it): retention sees them as new."""
    pruned_added: int = 0
    pruned_present: int = 0
    """Tombstones of pruned blobs added, and already there."""

    def __str__(self) -> str:
        tables = ", ".join(f"{t} {self.added[t]} (+{self.present[t]} there)" for t in self.added)
        dated = (f"; {self.blobs_copy_time} dated by the copy, not their own time (the blob "
                 "store sets it): retention counts their age from now"
                 if self.blobs_copy_time else "")
        return (f"copied blobs {self.blobs_added} ({self.blob_bytes} bytes; "
                f"{self.blobs_present} there{dated}); pruned marks {self.pruned_added} "
                f"(+{self.pruned_present} there); rows: {tables}")


def copy_store(src: AnyStore, dst: AnyStore,
               progress: Callable[[str], None] | None = None) -> CopyResult:
    """Copy everything of ``src`` into ``dst`` (see the module docstring):
    a :class:`DuckDBStore` or :class:`PostgresStore` each. Raises StoreError (one line) when
    either cannot be read or written."""
    result = CopyResult()
    say = progress or (lambda _: None)
    with tempfile.TemporaryDirectory(prefix="coreepi-copy-") as tmp:
        spool = Path(tmp) / "blob"
        for info in src.blobs.entries():
            if dst.blobs.has(info.key):
                result.blobs_present += 1
                continue
            with open(spool, "wb") as fh:
                result.blob_bytes += src.blobs.write_to(info.key, fh)
            dst.blobs.put_file(spool, info.key)
            result.blobs_added += 1
            if not dst.blobs.keep_modified(info.key, info.modified):
                result.blobs_copy_time += 1
        for key in src.blobs.pruned_keys():
            if dst.blobs.was_pruned(key):
                result.pruned_present += 1
            else:
                dst.blobs.mark_pruned(key)
                result.pruned_added += 1
    say(f"blobs: {result.blobs_added} added, {result.blobs_present} there; "
        f"pruned marks: {result.pruned_added} added")
    # every table the migrations create, so a table added later is copied too
    for table in schema_tables():
        added = seen = 0
        with dst.transaction():
            if table == "ingest_rejections":
                files = {row[columns.index("file")] for columns, rows in src.export_rows(table)
                         for row in rows}
                dst.add_rejections([], replace_files=files)
            for columns, rows in src.export_rows(table):
                added += dst.import_rows(table, columns, rows)
                seen += len(rows)
        result.added[table], result.present[table] = added, seen - added
        say(f"{table}: {added} added, {seen - added} there")
    return result
