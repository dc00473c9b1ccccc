"""store: durable crashes, hosts, exposure intervals, telemetry events and blobs.

:class:`Store` is what callers hold: the composition of the interfaces of
:mod:`coreepi.store.interfaces` (one per concern: crashes, hosts + exposure,
telemetry, ledger, tokens, blobs). :class:`DuckDBStore` is the embedded
implementation (one data dir: ``coreepi.duckdb`` + ``blobs/``);
:func:`open_store` opens it. ``docs/store.md`` says what a new backend
implements.
"""

from __future__ import annotations

import os

from coreepi.store.base import Store
from coreepi.store.blobs import DirectoryBlobStore, sha256_file
from coreepi.store.duckdb_store import DuckDBStore, default_data_dir
from coreepi.store.interfaces import (
    BlobStore,
    CrashStore,
    HostStore,
    LedgerStore,
    TelemetryStore,
    TokenStore,
)
from coreepi.store.records import (
    ApiToken,
    CoreStatus,
    CrashRecord,
    ExposureResult,
    LedgerEntry,
    Receipt,
)

__all__ = [
    "ApiToken",
    "BlobStore",
    "CoreStatus",
    "CrashRecord",
    "CrashStore",
    "DirectoryBlobStore",
    "DuckDBStore",
    "ExposureResult",
    "HostStore",
    "LedgerEntry",
    "LedgerStore",
    "Receipt",
    "Store",
    "TelemetryStore",
    "TokenStore",
    "default_data_dir",
    "open_store",
    "sha256_file",
]


def open_store(data_dir: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Store:
    """The store in ``data_dir`` (default: :func:`default_data_dir`), created
    and migrated if needed. Raises :class:`~coreepi.errors.StoreError` when it
    cannot be opened (locked by another process, newer schema, read-only
    without a store)."""
    return DuckDBStore(data_dir, read_only=read_only)
