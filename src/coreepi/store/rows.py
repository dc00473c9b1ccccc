"""The table rows of the store's records, shared by every backend: one place
decides what a ``crashes`` or ``telemetry`` row holds, and the row logic the
DuckDB and PostgreSQL stores would otherwise each repeat — the statements
they share word for word (``?`` placeholders, :mod:`coreepi.store.sqlbuild`),
first-of-each-id batches, rows back into records, how a batch of exposure
intervals is counted. Only what differs (staging a batch, types, locks)
stays in each backend."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from coreepi.store.records import CoreStatus, CrashRecord, ExposureResult
from coreepi.store.interfaces.crashes import CRASH_SUMMARY_COLUMNS
from coreepi.store.sqlbuild import Where, to_json, utc_now

if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.events import TelemetryEvent
    from coreepi.model.fleet import ExposureInterval

__all__ = [
    "EXPOSURE_CLASH_SQL",
    "EXPOSURE_SAME_SQL",
    "OUTSIDE_EXPOSURE_SQL",
    "batched",
    "count_exposure_batch",
    "crash_frame_query",
    "crash_list_query",
    "crash_records_from",
    "crash_records_query",
    "crash_row",
    "crash_update",
    "event_row",
    "exposure_frame_sql",
    "first_per_crash",
    "hosts_frame_from",
    "outside_exposure_rows",
]

T = TypeVar("T")

EXPOSURE_SAME_SQL = ("SELECT s.i FROM _stage s JOIN exposure e ON e.host_id = s.host_id "
                     "AND e.start_ts = s.start_ts AND e.end_ts = s.end_ts")
"""Staged intervals identical to a stored one: already there (a re-ingest)."""

EXPOSURE_CLASH_SQL = (
    "SELECT s.i, min(e.start_ts), min(e.end_ts) FROM _stage s JOIN exposure e "
    "ON e.host_id = s.host_id AND e.start_ts < s.end_ts AND s.start_ts < e.end_ts "
    "AND NOT (e.start_ts = s.start_ts AND e.end_ts = s.end_ts) GROUP BY s.i")
"""Staged intervals overlapping a stored interval of their host otherwise: conflicts."""

OUTSIDE_EXPOSURE_SQL = (
    "SELECT c.crash_id, c.host_id, c.captured_at, c.artifact FROM crashes c "
    "WHERE c.captured_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM exposure e "
    "WHERE e.host_id = c.host_id AND e.start_ts <= c.captured_at "
    "AND c.captured_at < e.end_ts) ORDER BY c.captured_at, c.crash_id")
"""Crashes no exposure interval of their host covers."""


def exposure_frame_sql(where: str) -> str:
    """The intervals with their host's attributes, ``where`` (a :class:`Where`'s
    SQL over ``e``) applied, by host and start."""
    return ("SELECT e.host_id, e.start_ts AS start, e.end_ts AS \"end\", e.attributes, "
            "h.attributes AS host_attributes FROM exposure e LEFT JOIN hosts h "
            f"ON h.host_id = e.host_id{where} ORDER BY e.host_id, e.start_ts")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter; none when empty)."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def first_per_crash(records: Iterable[CrashRecord],
                    row: Callable[[CrashRecord], T]) -> dict[str, T]:
    """{crash_id: ``row(record)``} of the first record of each crash id, in
    order (a batch repeating a crash writes its first record)."""
    rows: dict[str, T] = {}
    for rec in records:
        if rec.report.crash_id not in rows:
            rows[rec.report.crash_id] = row(rec)
    return rows


def crash_update(record: CrashRecord) -> tuple[str, dict[str, Any]]:
    """(crash_id, the columns an analysis rewrites): the row without its id
    and ``ingested_at`` (kept: the crash was ingested when it first came)."""
    row = crash_row(record)
    del row["ingested_at"]
    return row.pop("crash_id"), row


def crash_records_query(host_id: str, since: datetime,
                        until: datetime) -> tuple[str, list[Any]]:
    """(SQL, parameters) of a host's first 1,000 crash records in [since, until)."""
    where = Where().equals("host_id", host_id).since_until("captured_at", since, until)
    return ("SELECT report, attributes, core_status, core_reason, artifact FROM crashes"
            f"{where.sql} ORDER BY captured_at, crash_id LIMIT 1000", where.params)


def crash_frame_query(since: datetime | None, until: datetime | None) -> tuple[str, list[Any]]:
    """(SQL, parameters) of the rows :func:`coreepi.store.frames.crash_frame_from` shapes."""
    from coreepi.store.frames import CRASH_COLUMNS

    where = Where().since_until("captured_at", since, until)
    return (f"SELECT {', '.join(CRASH_COLUMNS)}, attributes FROM crashes{where.sql} "
            "ORDER BY captured_at, crash_id", where.params)


def crash_list_query(since: datetime | None, until: datetime | None, host_id: str | None,
                     signature: str | None, limit: int,
                     after: tuple[datetime, str] | None) -> tuple[str, list[Any]]:
    """(SQL, parameters) of one page of :meth:`CrashStore.list_crashes`
    (columns :data:`CRASH_SUMMARY_COLUMNS`, in ingestion order)."""
    where = (Where().since_until("captured_at", since, until)
             .equals("host_id", host_id).equals("signature", signature))
    if after is not None:
        where.add("(ingested_at, crash_id) > (?, ?)", *after)
    return (f"SELECT {', '.join(CRASH_SUMMARY_COLUMNS)} FROM crashes{where.sql} "
            "ORDER BY ingested_at, crash_id LIMIT ?", [*where.params, limit])


def crash_records_from(rows: Iterable[Sequence[Any]]) -> list[CrashRecord]:
    """The records of :func:`crash_records_query`'s rows."""
    from coreepi.model.report import CrashReport

    return [
        CrashRecord(CrashReport.model_validate_json(rep), json.loads(attrs or "{}"),
                    CoreStatus(status), reason, artifact)
        for rep, attrs, status, reason, artifact in rows
    ]


def outside_exposure_rows(rows: Iterable[Sequence[Any]]
                          ) -> Iterator[tuple[str, str | None, datetime, str | None]]:
    """:data:`OUTSIDE_EXPOSURE_SQL`'s rows, times in UTC."""
    for crash_id, host_id, captured_at, artifact in rows:
        yield crash_id, host_id, captured_at.astimezone(UTC), artifact


def hosts_frame_from(rows: Iterable[Sequence[Any]]) -> pd.DataFrame:
    """The hosts frame of (host_id, attributes JSON) rows: one column per attribute."""
    import pandas as pd

    records = [{"host_id": h, **json.loads(a)} for h, a in rows]
    return pd.DataFrame.from_records(records, columns=None if records else ["host_id"])


def count_exposure_batch(result: ExposureResult, batch: list[ExposureInterval], added: int,
                         same: Iterable[Sequence[Any]],
                         clash: Iterable[Sequence[Any]]) -> None:
    """Add what became of ``batch`` to ``result``: ``added`` rows written,
    ``same`` (:data:`EXPOSURE_SAME_SQL`'s rows: duplicates) and ``clash``
    (:data:`EXPOSURE_CLASH_SQL`'s rows: conflicts, in the order given)."""
    same = list(same)
    result.added += added
    result.duplicates += len(same)
    result.duplicated.extend(batch[r[0]] for r in same)
    result.conflicts.extend((batch[i], s.astimezone(UTC), e.astimezone(UTC))
                            for i, s, e in clash)


def crash_row(rec: CrashRecord) -> dict[str, Any]:
    """The ``crashes`` row of a record: every column, ``phenotypes`` lists, times UTC."""
    r = rec.report
    attrs = rec.attributes
    exe = attrs.get("exe") if attrs.get("exe") is not None else r.process.exe
    return {
        "crash_id": r.crash_id,
        "host_id": r.host_id,
        "captured_at": r.captured_at,
        "source": str(r.source),
        "signature": r.signature.signature if r.signature else None,
        "phenotypes": [p.name for p in r.phenotypes],
        "hardware_phenotypes": [p.name for p in r.phenotypes if p.hardware_indicative],
        "signal": r.signal.name if r.signal else None,
        "signal_number": r.signal.number if r.signal else None,
        "si_code_name": r.signal.si_code_name if r.signal else None,
        "exe": None if exe is None else str(exe),
        "app_version": None if attrs.get("app_version") is None
        else str(attrs["app_version"]),
        "attributes": to_json(attrs),
        "core_status": str(rec.core_status),
        "core_reason": rec.core_reason,
        "core_sha256": r.core.sha256,
        "blob_key": r.core.blob_key,
        "artifact": rec.artifact,
        "report": r.model_dump_json(),
        "ingested_at": utc_now(),
    }


def event_row(ev: TelemetryEvent) -> dict[str, Any]:
    """The ``telemetry`` row of an event (every column)."""
    return {
        "event_id": ev.event_id, "host_id": ev.host_id, "ts": ev.ts,
        "uptime_seconds": ev.uptime_seconds, "kind": str(ev.kind),
        "severity": ev.severity, "component": ev.component,
        "hardware_indicative": ev.hardware_indicative, "summary": ev.summary,
        "detail": to_json(ev.detail), "source": ev.source, "raw": ev.raw,
    }
