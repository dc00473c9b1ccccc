"""CrashStore: the crash table — one row per crash, counted even without its core.

Identity is ``CrashReport.crash_id``: writes are idempotent by it. Times are
UTC. The analytics' frame (:meth:`CrashStore.crash_frame`) has the columns
of :data:`coreepi.store.frames.CRASH_COLUMNS`, built by
:func:`coreepi.store.frames.crash_frame_from` (a backend reads rows, the
shared function shapes them, so every backend returns the same frame).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.interfaces.session import Transactional
from coreepi.store.records import CrashRecord

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.report import CrashReport

__all__ = ["CRASH_SUMMARY_COLUMNS", "MIN_CRASH_ID_PREFIX", "CrashStore"]

MIN_CRASH_ID_PREFIX = 4
"""Fewest hex digits of a short crash id (:meth:`CrashStore.crash_ids_starting`)
that the CLI and the pages resolve: fewer would name a sixteenth of the store."""

CRASH_SUMMARY_COLUMNS = (
    "crash_id", "host_id", "captured_at", "source", "signature", "phenotypes",
    "hardware_phenotypes", "signal", "si_code_name", "exe", "app_version", "core_status",
    "core_reason", "blob_key", "ingested_at",
)  # fmt: skip
"""The keys of one :meth:`CrashStore.list_crashes` row, in this order."""


class CrashStore(Transactional):
    """Crash records: write, rewrite after analysis, read back as reports or frames."""

    # -- writes

    @abc.abstractmethod
    def add_crashes_new_ids(self, records: Sequence[CrashRecord]) -> set[str]:
        """Insert crashes, idempotent by ``crash_id``; returns the ids that were new.

        A crash already stored is left as it is (its first report wins); a
        crash given twice in ``records`` is stored once. The row keeps the
        report (JSON), the sidecar ``attributes``, ``core_status``,
        ``core_reason``, ``artifact`` and an ``ingested_at`` of now (UTC).
        A sidecar's ``exe`` / ``app_version`` fill the columns of those names
        (over the report's ``process.exe``). One statement per call where the
        backend can: ingest calls it with batches of thousands."""

    def add_crashes(self, records: Iterable[CrashRecord]) -> int:
        """:meth:`add_crashes_new_ids`, returning how many crashes were new."""
        return len(self.add_crashes_new_ids(list(records)))

    @abc.abstractmethod
    def update_crash(self, record: CrashRecord) -> bool:
        """Replace a stored crash's report, attributes, core status and derived
        columns (after central analysis); ``ingested_at`` is kept. Returns
        False, changing nothing, when ``crash_id`` is not stored."""

    # -- reads

    @abc.abstractmethod
    def crash_ids(self) -> set[str]:
        """Every stored ``crash_id``."""

    def crash_ids_starting(self, prefix: str, limit: int = 4) -> list[str]:
        """Up to ``limit`` stored crash ids starting with ``prefix``
        (lower-case hex), sorted: how a short id (``coreepi list`` shows 12
        digits) is resolved, as git resolves a short hash. A scan of
        :meth:`crash_ids`; a backend may answer it from an index instead."""
        prefix = prefix.lower()
        return sorted(i for i in self.crash_ids() if i.startswith(prefix))[:limit]

    @abc.abstractmethod
    def get_reports(self, crash_ids: Iterable[str]) -> dict[str, CrashReport]:
        """{crash_id: stored report} of those of ``crash_ids`` that are stored
        (unknown ids are left out, never an error)."""

    def get_report(self, crash_id: str) -> CrashReport | None:
        """The stored report of ``crash_id``, or None."""
        return self.get_reports([crash_id]).get(crash_id)

    @abc.abstractmethod
    def crash_records(self, host_id: str, since: datetime, until: datetime) -> list[CrashRecord]:
        """Stored crashes of ``host_id`` with ``since <= captured_at < until``, as
        the records they were written as (report, sidecar attributes, core
        status and reason, artifact), by ``captured_at`` then ``crash_id``, at
        most 1000. Used to pair an hs_err log with its core
        (:mod:`coreepi.ingest.pairing`)."""

    @abc.abstractmethod
    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        """Crashes with ``since <= captured_at < until`` (None: unbounded), by
        ``captured_at`` then ``crash_id``.

        Columns: ``crash_id, host_id`` (str), ``captured_at``
        (datetime64[…, UTC]), ``source, signature`` (str), ``phenotypes,
        hardware_phenotypes`` (list[str], never None), ``signal,
        si_code_name, exe, app_version, core_status`` (str or None), then one
        column per sidecar attribute in order of first appearance (a name
        taken by a column above becomes ``sidecar_NAME``; values as given:
        text stays text, numbers stay numbers; missing is None/NaN). An empty
        store gives the fixed columns and no rows."""

    @abc.abstractmethod
    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int:
        """How many crashes have ``since <= captured_at < until`` and, when
        given, this ``core_status`` (a :class:`~coreepi.store.CoreStatus` value)."""

    @abc.abstractmethod
    def last_crash_at(self, host_id: str, before: datetime) -> datetime | None:
        """The latest ``captured_at`` (UTC) of ``host_id``'s crashes with
        ``captured_at < before``; None when it has none. What a drain's
        re-check says of a host whose crashes all predate its baseline."""

    @abc.abstractmethod
    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        """One page of crash summaries (the HTTP API's listing).

        Crashes with ``since <= captured_at < until``, of ``host_id`` and with
        ``signature`` when given, in ingestion order (``ingested_at,
        crash_id``), strictly after the key ``after`` (the last row's
        ``(ingested_at, crash_id)`` of the previous page), at most ``limit``.
        Each row: a dict with the keys :data:`CRASH_SUMMARY_COLUMNS`;
        ``captured_at`` and ``ingested_at`` UTC datetimes, ``phenotypes``
        and ``hardware_phenotypes`` lists of str."""
