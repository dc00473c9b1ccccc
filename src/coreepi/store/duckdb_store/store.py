"""DuckDBStore: the embedded store, one data dir with ``coreepi.duckdb`` and ``blobs/``."""

from __future__ import annotations

import os

from coreepi.store.base import Store
from coreepi.store.duckdb_store.alerts import DuckDBAlertStore
from coreepi.store.blobs import DirectoryBlobStore
from coreepi.store.duckdb_store.crashes import DuckDBCrashStore
from coreepi.store.duckdb_store.gateway import DuckDBGateway
from coreepi.store.duckdb_store.hosts import DuckDBHostStore
from coreepi.store.duckdb_store.ledger import DuckDBLedgerStore
from coreepi.store.duckdb_store.queue import DuckDBJobQueue
from coreepi.store.duckdb_store.regroup import DuckDBRegroupStore
from coreepi.store.duckdb_store.telemetry import DuckDBTelemetryStore
from coreepi.store.duckdb_store.tokens import DuckDBTokenStore
from coreepi.store.interfaces.blobs import BlobStore

__all__ = ["BLOB_DIR", "DuckDBStore"]

BLOB_DIR = "blobs"


class DuckDBStore(
    DuckDBAlertStore, DuckDBCrashStore, DuckDBHostStore, DuckDBTelemetryStore, DuckDBLedgerStore,
    DuckDBTokenStore, DuckDBJobQueue, DuckDBRegroupStore, Store,
):
    """Every part of the store over one :class:`DuckDBGateway` (one connection,
    one writer), with the blobs in ``data_dir/blobs`` unless ``blobs`` is
    given (an object store). Raises :class:`~coreepi.errors.StoreError` as
    :class:`DuckDBGateway` does."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, read_only: bool = False,
                 blobs: BlobStore | None = None):
        DuckDBGateway.__init__(self, data_dir, read_only=read_only)
        self._blobs = blobs if blobs is not None else DirectoryBlobStore(self.data_dir / BLOB_DIR)

    @property
    def blobs(self) -> BlobStore:
        """The blob store (by default the directory ``data_dir/blobs``)."""
        return self._blobs
