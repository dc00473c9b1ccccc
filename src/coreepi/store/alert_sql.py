"""The alert store's SQL and row shapes, shared by the DuckDB and PostgreSQL
implementations (the tables are portable: ``migrations.py`` version 4)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord

__all__ = [
    "ALERT_COLUMNS", "DELIVERY_COLUMNS", "DRAIN_COLUMNS", "SILENCE_COLUMNS", "alert_params",
    "HISTORY_COLUMNS", "alert_row", "delivery_params", "delivery_row", "drain_params",
    "drain_row", "history_params", "history_row",
    "silence_params", "silence_row", "upsert_alert_sql",
]  # fmt: skip

ALERT_COLUMNS = ("alert_key, kind, labels, summary, evidence, state, starts_at, updated_at, "
                 "ends_at")
SILENCE_COLUMNS = "silence_id, matchers, starts_at, expires_at, created_by, comment"
DELIVERY_COLUMNS = ("alert_key, receiver, state, attempt, attempted_at, status, ok, "
                    "error")
DRAIN_COLUMNS = "host_id, drained_at, drained_by, reason, extra"
HISTORY_COLUMNS = DRAIN_COLUMNS + ", undrained_at, undrained_by"


def upsert_alert_sql() -> str:
    """INSERT … ON CONFLICT (alert_key) DO UPDATE: both engines take this form."""
    sets = ", ".join(f"{c} = excluded.{c}" for c in ALERT_COLUMNS.split(", ")[1:])
    return (f"INSERT INTO alerts ({ALERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            f"ON CONFLICT (alert_key) DO UPDATE SET {sets}")


def _utc(ts: datetime | None) -> datetime | None:
    return ts.astimezone(UTC) if ts is not None else None


def alert_params(a: AlertRecord) -> list[Any]:
    return [a.key, a.kind, json.dumps(a.labels, sort_keys=True), a.summary,
            json.dumps(a.evidence, sort_keys=True), a.state, a.starts_at, a.updated_at, a.ends_at]


def alert_row(r: tuple[Any, ...]) -> AlertRecord:
    return AlertRecord(r[0], r[1], json.loads(r[2]), r[3], json.loads(r[4]), r[5],
                       _utc(r[6]), _utc(r[7]), _utc(r[8]))  # type: ignore[arg-type]


def silence_params(s: SilenceRecord) -> list[Any]:
    return [s.silence_id, json.dumps(s.matchers, sort_keys=True), s.starts_at, s.expires_at,
            s.created_by, s.comment]


def silence_row(r: tuple[Any, ...]) -> SilenceRecord:
    return SilenceRecord(r[0], json.loads(r[1]), _utc(r[2]), _utc(r[3]),  # type: ignore[arg-type]
                         r[4], r[5])


def delivery_params(d: DeliveryRecord) -> list[Any]:
    return [d.alert_key, d.receiver, d.state, d.attempt, d.at, d.status, d.ok, d.error]


def delivery_row(r: tuple[Any, ...]) -> DeliveryRecord:
    return DeliveryRecord(r[0], r[1], r[2], int(r[3]), _utc(r[4]), int(r[5]),  # type: ignore[arg-type]
                          bool(r[6]), r[7])


def drain_params(d: DrainRecord) -> list[Any]:
    return [d.host_id, d.drained_at, d.drained_by, d.reason, json.dumps(d.extra, sort_keys=True)]


def drain_row(r: tuple[Any, ...]) -> DrainRecord:
    return DrainRecord(r[0], _utc(r[1]), r[2], r[3], json.loads(r[4]))  # type: ignore[arg-type]


def history_params(d: DrainRecord) -> list[Any]:
    return [*drain_params(d), d.undrained_at, d.undrained_by]


def history_row(r: tuple[Any, ...]) -> DrainRecord:
    return replace(drain_row(r[:5]), undrained_at=_utc(r[5]), undrained_by=r[6])
