"""Store: what callers hold — every interface of the store over one database.

ingest writes into it, reporting and serve read from it, each through the
methods of one concern (:mod:`coreepi.store.interfaces`):

==================  ==========================================================
CrashStore          crash records, the crash frame, core status
HostStore           hosts, exposure intervals, summed node-time frames
TelemetryStore      hardware / kernel telemetry events
LedgerStore         ingest ledger, rejections, HTTP API receipts
TokenStore          HTTP API tokens
JobQueue            the analysis queue (cores awaiting central analysis)
AlertStore          surveillance alerts, silences, the delivery log, drained hosts
RegroupStore        what each re-analysis did to the groups (splits, merges)
BlobStore           cores and large artifacts (``Store.blobs``)
==================  ==========================================================

A backend implements each interface (``docs/store.md`` lists what that
takes) and this class's own three members (:attr:`Store.blobs`,
:meth:`Store.counts`, :meth:`Store.schema_version`). Writes are idempotent
(crashes by ``crash_id``, events by ``event_id``, exposure by ``(host_id,
start)``, hosts and ledger entries replaced by key), so a re-run or a retried
upload adds nothing.

Attribute values are kept as given: text from CSV files stays text (coreepi
does not guess that ``"2.10"`` is a number, it may be a version), JSON numbers
from sidecars stay numbers; deciding which attributes to bin is the
analytics' job. Missing values are None/NaN.
"""

from __future__ import annotations

import abc
import os
from pathlib import Path

from coreepi.store.interfaces import (
    AlertStore,
    BlobStore,
    CrashStore,
    HostStore,
    JobQueue,
    LedgerStore,
    RegroupStore,
    TelemetryStore,
    TokenStore,
)

__all__ = ["COUNTED_TABLES", "Store"]

COUNTED_TABLES = ("hosts", "exposure", "crashes", "telemetry", "ingest_rejections",
                  "ingest_ledger")
"""The keys of :meth:`Store.counts`, in this order."""


class Store(
    CrashStore, HostStore, TelemetryStore, LedgerStore, TokenStore, JobQueue, AlertStore,
    RegroupStore,
):
    """Durable crashes, hosts, exposure, telemetry, bookkeeping and blobs."""

    @property
    @abc.abstractmethod
    def blobs(self) -> BlobStore:
        """The blob store kept with this store (cores, artifacts)."""

    @abc.abstractmethod
    def counts(self) -> dict[str, int]:
        """Rows per table, keys :data:`COUNTED_TABLES` (``ingest_rejections``:
        rejections, ``ingest_ledger``: ledger entries)."""

    @abc.abstractmethod
    def schema_version(self) -> int:
        """The version of the store's schema (its last migration applied; 0: none)."""

    def put_blob(self, path: str | os.PathLike[str] | Path, key: str | None = None) -> str:
        """:meth:`BlobStore.put_file` on :attr:`blobs`: store a file, return its key."""
        return self.blobs.put_file(path, key)

    def get_blob(self, key: str) -> bytes:
        """:meth:`BlobStore.get` on :attr:`blobs`: the content; KeyError when absent."""
        return self.blobs.get(key)
