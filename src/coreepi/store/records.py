"""The values the store's interfaces take and return (no I/O, no backend).

Every backend reads and writes these; they are defined once here so an
interface module, an implementation and a caller all name the same class.
Times are timezone-aware UTC ``datetime``s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    from coreepi.model.fleet import ExposureInterval
    from coreepi.model.report import CrashReport


__all__ = [
    "ApiToken",
    "CoreStatus",
    "CrashRecord",
    "ExposureResult",
    "LedgerEntry",
    "Receipt",
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
    """One crash to store: the report, the sidecar's attributes (JSON-able
    scalars by name), the core's fate and the artifact's path (None when the
    report came without one, e.g. over the HTTP API)."""

    report: CrashReport
    attributes: dict[str, Any] = field(default_factory=dict)
    core_status: CoreStatus = CoreStatus.NOT_STORED
    core_reason: str | None = None
    artifact: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """An input file already ingested: ``size`` in bytes, ``mtime_ns`` its
    st_mtime_ns, ``sha256`` of its content (lower-case hex), ``kind`` what
    ingest took it for (``crash-artifact``, ``crash-json`` …), ``outcome``
    what became of it (``done`` …)."""

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
    """What :meth:`~coreepi.store.interfaces.HostStore.add_exposure` did:
    ``added`` new intervals, ``duplicates`` already stored identically,
    ``conflicts`` overlapping a stored interval of the same host (not stored),
    each as (interval, stored start, stored end)."""

    added: int = 0
    duplicates: int = 0
    conflicts: list[tuple[ExposureInterval, datetime, datetime]] = field(default_factory=list)
    duplicated: list[ExposureInterval] = field(default_factory=list)
    """the intervals already stored identically (``duplicates`` of them)"""
