"""The PostgreSQL :class:`~coreepi.store.interfaces.AlertStore` (tables of migrations 4 and 6).

Every replica evaluates against the same rows: an alert's key is its
primary key, so two replicas firing the same detection write one row. One
evaluation at a time takes the store (:meth:`PostgresAlertStore.evaluation_lock`,
a session advisory lock), so two replicas never deliver the same transition.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime

import psycopg

from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord
from coreepi.store.alert_sql import (
    ALERT_COLUMNS, DELIVERY_COLUMNS, DRAIN_COLUMNS, HISTORY_COLUMNS, SILENCE_COLUMNS,
    alert_params, alert_row,
    delivery_params, delivery_row, drain_params, drain_row, history_params,
    history_row, silence_params, silence_row,
    upsert_alert_sql,
)  # fmt: skip
from coreepi.store.interfaces.alerts import AlertStore
from coreepi.store.postgres_store.gateway import PostgresGateway

__all__ = ["PostgresAlertStore"]


# advisory lock key ("eval"): one surveillance evaluation on the database at a time
EVALUATION_LOCK = 0x6576616C


class PostgresAlertStore(PostgresGateway, AlertStore):
    """Alerts, silences, deliveries and drains in PostgreSQL."""

    @contextmanager
    def evaluation_lock(self) -> Iterator[bool]:
        """``pg_try_advisory_lock`` on a connection held for the block: False
        at once when another replica's evaluation holds it (no waiting: that
        one delivers this round). A session lock, so a replica that dies
        releases it with its connection."""
        with self._connection() as con:
            got = bool(con.execute("SELECT pg_try_advisory_lock(%s)",
                                   [EVALUATION_LOCK]).fetchone()[0])  # type: ignore[index]
            try:
                yield got
            finally:
                if got:
                    con.execute("SELECT pg_advisory_unlock(%s)", [EVALUATION_LOCK])

    def put_alert(self, alert: AlertRecord) -> None:
        self._write(upsert_alert_sql(), alert_params(alert))

    def alerts(self, state: str | None = None) -> list[AlertRecord]:
        where, params = ("WHERE state = ? ", [state]) if state else ("", [])
        return [alert_row(r) for r in self._query(
            f"SELECT {ALERT_COLUMNS} FROM alerts {where}ORDER BY starts_at, alert_key", params)]

    def add_silence(self, silence: SilenceRecord) -> None:
        try:
            self._write(f"INSERT INTO alert_silences ({SILENCE_COLUMNS}) "
                        "VALUES (?, ?, ?, ?, ?, ?)", silence_params(silence))
        except psycopg.errors.UniqueViolation:
            raise ValueError(f"silence {silence.silence_id!r} is already stored") from None

    def silences(self, active_at: datetime | None = None) -> list[SilenceRecord]:
        where, params = (("WHERE starts_at <= ? AND expires_at > ? ", [active_at, active_at])
                         if active_at else ("", []))
        return [silence_row(r) for r in self._query(
            f"SELECT {SILENCE_COLUMNS} FROM alert_silences {where}ORDER BY starts_at, silence_id",
            params)]

    def expire_silence(self, silence_id: str, at: datetime) -> bool:
        return self._write("UPDATE alert_silences SET expires_at = ? WHERE silence_id = ? "
                           "AND expires_at > ?", [at, silence_id, at]).rowcount > 0

    def add_delivery(self, delivery: DeliveryRecord) -> None:
        self._write(f"INSERT INTO alert_deliveries ({DELIVERY_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", delivery_params(delivery))

    def deliveries(self, alert_key: str | None = None) -> list[DeliveryRecord]:
        where, params = ("WHERE alert_key = ? ", [alert_key]) if alert_key else ("", [])
        return [delivery_row(r) for r in self._query(
            f"SELECT {DELIVERY_COLUMNS} FROM alert_deliveries {where}"
            "ORDER BY attempted_at, attempt", params)]

    def signatures_before(self, until: datetime) -> set[str]:
        return {r[0] for r in self._query(
            "SELECT DISTINCT signature FROM crashes WHERE captured_at < ? "
            "AND signature IS NOT NULL", [until])}

    def drain_host(self, drain: DrainRecord) -> bool:
        return self._write(f"INSERT INTO drained_hosts ({DRAIN_COLUMNS}) VALUES (?, ?, ?, ?, ?) "
                           "ON CONFLICT (host_id) DO NOTHING", drain_params(drain)).rowcount > 0

    def drained_hosts(self) -> list[DrainRecord]:
        return [drain_row(r) for r in self._query(
            f"SELECT {DRAIN_COLUMNS} FROM drained_hosts ORDER BY drained_at, host_id")]

    def undrain_host(self, host_id: str, at: datetime, by: str) -> DrainRecord | None:
        with self.transaction():  # one step: a reader sees the host drained or back, never both
            rows = self._query(f"SELECT {DRAIN_COLUMNS} FROM drained_hosts WHERE host_id = ?",
                               [host_id])
            if not rows:
                return None
            ended = replace(drain_row(rows[0]), undrained_at=at, undrained_by=by)
            self._write(f"INSERT INTO drain_history ({HISTORY_COLUMNS}) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", history_params(ended))
            self._write("DELETE FROM drained_hosts WHERE host_id = ?", [host_id])
        return ended

    def drain_history(self) -> list[DrainRecord]:
        return [history_row(r) for r in self._query(
            f"SELECT {HISTORY_COLUMNS} FROM drain_history ORDER BY drained_at, host_id")]
