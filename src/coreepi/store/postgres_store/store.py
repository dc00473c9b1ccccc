"""PostgresStore: the server store, one PostgreSQL database shared by every
``coreepi serve`` replica and ``coreepi worker``; blobs kept beside it."""

from __future__ import annotations

from coreepi.store.base import Store
from coreepi.store.postgres_store.alerts import PostgresAlertStore
from coreepi.store.interfaces.blobs import BlobStore
from coreepi.store.postgres_store.crashes import PostgresCrashStore
from coreepi.store.postgres_store.gateway import PostgresGateway
from coreepi.store.postgres_store.hosts import PostgresHostStore
from coreepi.store.postgres_store.ledger import PostgresLedgerStore
from coreepi.store.postgres_store.queue import PostgresJobQueue
from coreepi.store.postgres_store.regroup import PostgresRegroupStore
from coreepi.store.postgres_store.telemetry import PostgresTelemetryStore
from coreepi.store.postgres_store.tokens import PostgresTokenStore

__all__ = ["PostgresStore"]


class PostgresStore(
    PostgresAlertStore, PostgresCrashStore, PostgresHostStore, PostgresTelemetryStore, PostgresLedgerStore,
    PostgresTokenStore, PostgresJobQueue, PostgresRegroupStore, Store,
):
    """Every part of the store over one :class:`PostgresGateway` (a connection
    pool), with ``blobs`` (a directory or an object store; a database keeps
    no core). Raises :class:`~coreepi.errors.StoreError` as the gateway does."""

    def __init__(self, url: str, blobs: BlobStore, *, read_only: bool = False,
                 pool_size: int = 10) -> None:
        PostgresGateway.__init__(self, url, read_only=read_only, pool_size=pool_size)
        self._blobs = blobs

    @property
    def blobs(self) -> BlobStore:
        return self._blobs
