"""store: durable crashes, hosts, exposure intervals, telemetry events and blobs.

:class:`Store` is what callers hold: the composition of the interfaces of
:mod:`coreepi.store.interfaces` (one per concern: crashes, hosts + exposure,
telemetry, ledger, tokens, blobs). :class:`DuckDBStore` is the embedded
implementation (one data dir: ``coreepi.duckdb`` + ``blobs/``),
:class:`PostgresStore` the server one (one database shared by replicas and
workers). :func:`open_store` opens either from a location — a data dir or a
``postgresql://`` URL — with blobs in a directory or an S3 bucket
(:func:`open_blobs`). ``docs/store.md`` says what a new backend implements.
"""

from __future__ import annotations

import os
from pathlib import Path

from coreepi.store.base import Store
from coreepi.store.blobs import DirectoryBlobStore, sha256_file
from coreepi.store.duckdb_store import BLOB_DIR, DuckDBStore, default_data_dir
from coreepi.store.interfaces import (
    AlertStore,
    BlobStore,
    CrashStore,
    HostStore,
    Job,
    JobQueue,
    JobState,
    LedgerStore,
    TelemetryStore,
    TokenStore,
)
from coreepi.store.postgres_store import PostgresStore, is_postgres_url
from coreepi.store.records import (
    ApiToken,
    CoreStatus,
    CrashRecord,
    ExposureResult,
    LedgerEntry,
    Receipt,
)

__all__ = [
    "AlertStore",
    "ApiToken",
    "BlobStore",
    "CoreStatus",
    "CrashRecord",
    "CrashStore",
    "DirectoryBlobStore",
    "DuckDBStore",
    "ExposureResult",
    "HostStore",
    "Job",
    "JobQueue",
    "JobState",
    "LedgerEntry",
    "LedgerStore",
    "PostgresStore",
    "Receipt",
    "Store",
    "TelemetryStore",
    "TokenStore",
    "default_data_dir",
    "open_blobs",
    "open_store",
    "sha256_file",
]


STORE_ENV = "COREEPI_STORE"
BLOBS_ENV = "COREEPI_BLOBS"


def open_blobs(location: str | os.PathLike[str] | None, default: Path) -> BlobStore:
    """The blob store at ``location`` (else ``$COREEPI_BLOBS``, else the
    directory ``default``): ``s3://bucket/prefix`` is an S3-compatible bucket
    (:class:`~coreepi.store.s3_blobs.S3BlobStore`, configured from the
    environment), anything else a local directory. Raises StoreError when the
    bucket cannot be configured."""
    location = location if location is not None else os.environ.get(BLOBS_ENV) or None
    if location is None:
        return DirectoryBlobStore(default)
    text = os.fspath(location)
    if text.startswith("s3://"):
        from coreepi.store.s3_blobs import S3BlobStore

        return S3BlobStore.from_url(text)
    return DirectoryBlobStore(Path(text))


def open_store(location: str | os.PathLike[str] | None = None, *, read_only: bool = False,
               blobs: str | os.PathLike[str] | None = None) -> Store:
    """The store at ``location`` — a ``postgresql://`` URL or a data dir —
    else ``$COREEPI_STORE``, else :func:`default_data_dir`; created and
    migrated if needed. Blobs: :func:`open_blobs` of ``blobs`` (default: the
    data dir's ``blobs/``). Raises :class:`~coreepi.errors.StoreError` when it
    cannot be opened (locked by another process, unreachable database, newer
    schema, read-only without a store)."""
    if location is None:
        location = os.environ.get(STORE_ENV) or None
    if location is not None and is_postgres_url(os.fspath(location)):
        return PostgresStore(os.fspath(location),
                             open_blobs(blobs, default_data_dir() / BLOB_DIR),
                             read_only=read_only)
    data_dir = Path(location) if location is not None else default_data_dir()
    return DuckDBStore(data_dir, read_only=read_only, blobs=open_blobs(blobs, data_dir / BLOB_DIR))
