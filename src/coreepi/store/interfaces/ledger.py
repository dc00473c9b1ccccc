"""LedgerStore: what ingest has already done, so doing it again adds nothing.

Three tables of bookkeeping, none of them epidemiology:

- the **ingest ledger**: input files already ingested, by path; ingest skips
  a file whose (path, size, mtime_ns) or content SHA-256 it finds here;
- the **rejections**: input rows or files refused, or kept with a problem,
  each naming file, line and reason (nothing is dropped silently);
- the **receipts**: crash reports received over the HTTP API, by
  ``crash_id``, with the SHA-256 of the report as received, so a retried
  POST is told from a different report reusing a ``crash_id``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import abc
from collections.abc import Iterable

from coreepi.store.interfaces.session import Transactional
from coreepi.store.records import LedgerEntry, Receipt

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.fleet import Rejection

__all__ = ["REJECTION_COLUMNS", "LedgerStore"]

REJECTION_COLUMNS = ("file", "line", "category", "reason", "action", "recorded_at")
"""The columns of :meth:`LedgerStore.rejections_frame`, in this order."""


class LedgerStore(Transactional):
    """Ingest ledger, rejections and API receipts."""

    # -- ingest ledger

    @abc.abstractmethod
    def record_files(self, entries: Iterable[LedgerEntry]) -> None:
        """Remember that input files were ingested: insert or replace by
        ``path`` (the last entry of a path wins, also within ``entries``),
        stamped with now (UTC). One statement per call where the backend can."""

    def record_file(self, entry: LedgerEntry) -> None:
        """:meth:`record_files` of one file."""
        self.record_files([entry])

    @abc.abstractmethod
    def ledger_entries(self, paths: Iterable[str]) -> dict[str, LedgerEntry]:
        """{path: entry} of those ``paths`` that were ingested (unknown paths
        are left out). Must take hundreds of thousands of paths in a few
        queries: ingest asks for a whole fleet directory at once."""

    def ledger_entry(self, path: str) -> LedgerEntry | None:
        """The ledger entry of ``path``, or None."""
        return self.ledger_entries([path]).get(path)

    @abc.abstractmethod
    def ledger_has_sha256(self, sha256: str) -> bool:
        """Whether a file with this content (SHA-256, lower-case hex) was ingested,
        under any path."""

    # -- rejections

    @abc.abstractmethod
    def add_rejections(self, rejections: Iterable[Rejection], replace_files: Iterable[str] = ()) -> int:
        """Record rejections, first deleting the stored ones of ``replace_files``
        (a file read again replaces its rejections), in one transaction;
        returns how many were recorded. Not idempotent by itself: a re-read
        passes its file in ``replace_files``."""

    @abc.abstractmethod
    def replace_rejections(self, category: str, rejections: Iterable[Rejection]) -> int:
        """Replace every stored rejection of ``category`` by ``rejections`` (for
        whole-store checks, e.g. crashes outside exposure), in one
        transaction; returns how many were recorded."""

    @abc.abstractmethod
    def rejections_frame(self) -> pd.DataFrame:
        """Every rejection, by ``file`` then ``line``. Columns
        :data:`REJECTION_COLUMNS`: ``file, category, reason, action`` (str),
        ``line`` (1-based number; missing when the whole file is meant),
        ``recorded_at`` (UTC)."""

    # -- receipts of the HTTP API

    @abc.abstractmethod
    def add_receipts(self, receipts: Iterable[Receipt]) -> None:
        """Record received reports: insert, or replace ``content_sha256`` and
        ``core_key`` of a stored receipt of the same ``crash_id`` (the last of
        a ``crash_id`` wins); the first ``received_at`` is kept."""

    def add_receipt(self, receipt: Receipt) -> None:
        """:meth:`add_receipts` of one receipt."""
        self.add_receipts([receipt])

    @abc.abstractmethod
    def receipts(self, crash_ids: Iterable[str]) -> dict[str, Receipt]:
        """{crash_id: receipt} of those of ``crash_ids`` that have one
        (``received_at`` UTC)."""

    def receipt(self, crash_id: str) -> Receipt | None:
        """The receipt of ``crash_id``, or None."""
        return self.receipts([crash_id]).get(crash_id)
