"""The store interface: what ingest writes and the analytics read.

One implementation per backend: :class:`coreepi.store.duckdb_store.DuckDBStore`
(embedded, one data dir) now, PostgreSQL + object storage later. Writes are
idempotent (crashes by ``crash_id``, events by ``event_id``, exposure by
``(host_id, start)``, hosts upserted), so a re-run or a retried upload adds
nothing. Reads return pandas DataFrames shaped for :mod:`coreepi.epi`:

``crash_frame``
    ``crash_id, host_id, captured_at`` (UTC), ``source, signature,
    phenotypes`` (list[str]), ``hardware_phenotypes`` (list[str]), ``signal,
    si_code_name, exe, app_version, core_status``, then one column per
    sidecar attribute (a name taken by a column above becomes
    ``sidecar_NAME``).
``exposure_frame``
    ``host_id, start, end`` (UTC; clipped to the window), ``seconds``, then
    one column per attribute: hosts.csv's static ones merged into each
    interval, the interval's overrides winning.
``telemetry_frame``
    ``event_id, host_id, ts`` (UTC), ``kind, severity, component,
    hardware_indicative, summary``.

Attribute values are kept as given: text from CSV files stays text (coreepi
does not guess that ``"2.10"`` is a number, it may be a version), JSON numbers
from sidecars stay numbers; deciding which attributes to bin is the
analytics' job. Missing values are None/NaN.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd

from coreepi.model.events import TelemetryEvent
from coreepi.model.fleet import ExposureInterval, HostRow, Rejection
from coreepi.model.report import CrashReport
from coreepi.store.node_time import NodeTimeFrames

__all__ = [
    "ApiToken",
    "CoreStatus",
    "CrashRecord",
    "ExposureResult",
    "LedgerEntry",
    "Receipt",
    "Store",
]


class CoreStatus(StrEnum):
    """What became of a crash's core (or other artifact).

    ``stored``: analysed, kept as a blob. ``not-stored``: analysed (or the
    report came ready-made), no blob kept. ``missing``: the crash is known
    (sidecar) but its core never arrived or was dropped. ``unreadable``: the
    core is there but could not be analysed (broken, hostile, over the memory
    or time limit); ``core_reason`` says why in the last two cases."""

    STORED = "stored"
    NOT_STORED = "not-stored"
    MISSING = "missing"
    UNREADABLE = "unreadable"


@dataclass(slots=True)
class CrashRecord:
    """One crash to store: the report, the sidecar's attributes and the core's fate."""

    report: CrashReport
    attributes: dict[str, Any] = field(default_factory=dict)
    core_status: CoreStatus = CoreStatus.NOT_STORED
    core_reason: str | None = None
    artifact: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """An input file already ingested (``mtime_ns``: st_mtime_ns, ``size`` bytes)."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    kind: str
    outcome: str


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A bearer token of the HTTP API, as stored: never the token itself,
    only its SHA-256 (lower-case hex). ``scopes``: ingest, read, admin."""

    token_id: str
    name: str
    scopes: tuple[str, ...]
    token_sha256: str
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Receipt:
    """A crash report received over the HTTP API: ``content_sha256`` of the
    report as received, ``core_key`` the blob key of its uploaded core."""

    crash_id: str
    content_sha256: str
    core_key: str | None
    received_at: datetime


@dataclass(slots=True)
class ExposureResult:
    """What :meth:`Store.add_exposure` did: ``added`` new intervals,
    ``duplicates`` already stored identically, ``conflicts`` overlapping a
    stored interval of the same host (not stored)."""

    added: int = 0
    duplicates: int = 0
    conflicts: list[tuple[ExposureInterval, datetime, datetime]] = field(default_factory=list)
    duplicated: list[ExposureInterval] = field(default_factory=list)
    """the intervals already stored identically (``duplicates`` of them)"""


class Store(abc.ABC):
    """Durable crashes, hosts, exposure, telemetry and blobs."""

    # -- writes (each call is one transaction unless inside transaction())

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Group writes: everything inside commits together or not at all."""

    @abc.abstractmethod
    def add_hosts(self, hosts: Iterable[HostRow]) -> int:
        """Insert or update hosts (latest attributes win); returns rows written."""

    @abc.abstractmethod
    def add_exposure(self, intervals: Iterable[ExposureInterval], source: str = "") -> ExposureResult:
        """Insert exposure intervals, idempotent by (host_id, start)."""

    @abc.abstractmethod
    def add_crashes(self, records: Iterable[CrashRecord]) -> int:
        """Insert crashes, idempotent by crash_id; returns how many were new."""

    def add_crashes_new_ids(self, records: Sequence[CrashRecord]) -> set[str]:
        """Like :meth:`add_crashes`, but returns the crash ids that were new
        (one statement per batch in backends that override it)."""
        new: set[str] = set()
        for rec in records:
            if self.add_crashes([rec]):
                new.add(rec.report.crash_id)
        return new

    @abc.abstractmethod
    def add_events(self, events: Iterable[TelemetryEvent]) -> int:
        """Insert telemetry events, idempotent by event_id; returns how many were new."""

    @abc.abstractmethod
    def add_rejections(self, rejections: Iterable[Rejection], replace_files: Iterable[str] = ()) -> int:
        """Record rejections, first deleting earlier ones of ``replace_files``."""

    @abc.abstractmethod
    def replace_rejections(self, category: str, rejections: Iterable[Rejection]) -> int:
        """Replace every rejection of ``category`` (for whole-store checks)."""

    @abc.abstractmethod
    def record_file(self, entry: LedgerEntry) -> None:
        """Remember that an input file was ingested."""

    def record_files(self, entries: Iterable[LedgerEntry]) -> None:
        """:meth:`record_file` of many files (one statement in backends that override it)."""
        for entry in entries:
            self.record_file(entry)

    # -- ledger reads

    @abc.abstractmethod
    def ledger_entry(self, path: str) -> LedgerEntry | None: ...

    def ledger_entries(self, paths: Iterable[str]) -> dict[str, LedgerEntry]:
        """{path: entry} of those ``paths`` that were ingested (one query in
        backends that override it)."""
        return {p: e for p in paths if (e := self.ledger_entry(p)) is not None}

    @abc.abstractmethod
    def ledger_has_sha256(self, sha256: str) -> bool: ...

    # -- reads

    @abc.abstractmethod
    def host_ids(self) -> set[str]: ...

    @abc.abstractmethod
    def crash_ids(self) -> set[str]: ...

    @abc.abstractmethod
    def get_report(self, crash_id: str) -> CrashReport | None: ...

    @abc.abstractmethod
    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        """Crashes with ``since <= captured_at < until`` (see module docstring)."""

    @abc.abstractmethod
    def exposure_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        """Exposure intervals overlapping [since, until), clipped to it."""

    @abc.abstractmethod
    def telemetry_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        """Telemetry events with ``since <= ts < until``."""

    def node_time_frames(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> NodeTimeFrames | None:
        """Crashes of [since, until) with the exposure summed in the database
        (:class:`~coreepi.store.node_time.NodeTimeFrames`): the fast path for big
        fleets. ``None`` when this backend has none; then use
        :meth:`crash_frame` and :meth:`exposure_frame`. Without ``since`` /
        ``until``: the exposure's span widened to cover every crash."""
        return None

    @abc.abstractmethod
    def hosts_frame(self) -> pd.DataFrame:
        """``host_id`` + one column per static attribute."""

    @abc.abstractmethod
    def rejections_frame(self) -> pd.DataFrame:
        """``file, line, category, reason, action, recorded_at``."""

    @abc.abstractmethod
    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int: ...

    @abc.abstractmethod
    def counts(self) -> dict[str, int]:
        """Rows per table: hosts, exposure, crashes, telemetry, ingest_rejections, ingest_ledger."""

    @abc.abstractmethod
    def crashes_outside_exposure(self) -> Iterator[tuple[str, str | None, datetime, str | None]]:
        """(crash_id, host_id, captured_at, artifact) of crashes no exposure
        interval of their host covers (only meaningful once exposure is loaded)."""

    def crash_records(
        self, host_id: str, since: datetime, until: datetime
    ) -> list[CrashRecord]:
        """Stored crashes of ``host_id`` with ``since <= captured_at < until``,
        as records (report, sidecar attributes, core status, artifact); used
        to pair an hs_err log with its core (:mod:`coreepi.ingest.pairing`). This
        generic version loses the attributes; backends override it."""
        out = []
        for row in self.list_crashes(since, until, host_id=host_id, limit=1000):
            report = self.get_report(row["crash_id"])
            if report is not None:
                out.append(CrashRecord(report, {}, CoreStatus(row["core_status"]),
                                       row.get("core_reason"), None))
        return out

    # -- the HTTP API's tables (coreepi serve)

    @abc.abstractmethod
    def update_crash(self, record: CrashRecord) -> bool:
        """Replace a stored crash's report and derived columns (after central
        analysis); ``ingested_at`` is kept. Returns False when unknown."""

    @abc.abstractmethod
    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Crash summaries with ``since <= captured_at < until``, in ingestion
        order (``ingested_at, crash_id``), starting after the ``after`` key."""

    @abc.abstractmethod
    def get_reports(self, crash_ids: Iterable[str]) -> dict[str, CrashReport]:
        """The stored reports of those of ``crash_ids`` that are known."""

    @abc.abstractmethod
    def receipts(self, crash_ids: Iterable[str]) -> dict[str, Receipt]:
        """The receipts of those of ``crash_ids`` that have one."""

    def receipt(self, crash_id: str) -> Receipt | None:
        return self.receipts([crash_id]).get(crash_id)

    @abc.abstractmethod
    def add_receipts(self, receipts: Iterable[Receipt]) -> None:
        """Record received reports (insert or replace, by crash_id)."""

    def add_receipt(self, receipt: Receipt) -> None:
        self.add_receipts([receipt])

    @abc.abstractmethod
    def add_api_token(self, token: ApiToken) -> None: ...

    @abc.abstractmethod
    def api_tokens(self, include_revoked: bool = False) -> list[ApiToken]: ...

    @abc.abstractmethod
    def revoke_api_token(self, token_id_or_name: str) -> int:
        """Revoke the token with this id, or every token with this name;
        returns how many were revoked now."""

    # -- blobs

    @abc.abstractmethod
    def put_blob(self, path: str | Path, key: str | None = None) -> str:
        """Store a file as a content-addressed blob; returns its key (sha256)."""

    @abc.abstractmethod
    def get_blob(self, key: str) -> bytes:
        """The blob's content; KeyError when absent."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
