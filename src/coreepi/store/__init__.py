"""store: durable crashes, hosts, exposure intervals, telemetry events and blobs.

:class:`Store` is the interface (``store/base.py``); :class:`DuckDBStore` the
embedded implementation (one data dir: ``coreepi.duckdb`` + ``blobs/``).
:func:`open_store` opens the default one.
"""

from __future__ import annotations

import os

from coreepi.store.base import (
    ApiToken,
    CoreStatus,
    CrashRecord,
    ExposureResult,
    LedgerEntry,
    Receipt,
    Store,
)
from coreepi.store.blobs import BlobStore, sha256_file
from coreepi.store.duckdb_store import DuckDBStore, default_data_dir

__all__ = [
    "ApiToken",
    "BlobStore",
    "CoreStatus",
    "CrashRecord",
    "DuckDBStore",
    "ExposureResult",
    "LedgerEntry",
    "Receipt",
    "Store",
    "default_data_dir",
    "open_store",
    "sha256_file",
]


def open_store(data_dir: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Store:
    """The store in ``data_dir`` (default: :func:`default_data_dir`)."""
    return DuckDBStore(data_dir, read_only=read_only)
