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
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd

from coreepi.events import TelemetryEvent
from coreepi.fleet import ExposureInterval, HostRow, Rejection
from coreepi.report import CrashReport

__all__ = [
    "CoreStatus",
    "CrashRecord",
    "ExposureResult",
    "LedgerEntry",
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


@dataclass(slots=True)
class ExposureResult:
    """What :meth:`Store.add_exposure` did: ``added`` new intervals,
    ``duplicates`` already stored identically, ``conflicts`` overlapping a
    stored interval of the same host (not stored)."""

    added: int = 0
    duplicates: int = 0
    conflicts: list[tuple[ExposureInterval, datetime, datetime]] = field(default_factory=list)


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

    # -- ledger reads

    @abc.abstractmethod
    def ledger_entry(self, path: str) -> LedgerEntry | None: ...

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
