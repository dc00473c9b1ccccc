"""The PostgreSQL :class:`~coreepi.store.interfaces.AlertStore` (tables of migration 4).

Every replica evaluates against the same rows: an alert's key is its
primary key, so two replicas firing the same detection write one row.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord
from coreepi.store.alert_sql import (
    ALERT_COLUMNS, DELIVERY_COLUMNS, DRAIN_COLUMNS, SILENCE_COLUMNS, alert_params, alert_row,
    delivery_params, delivery_row, drain_params, drain_row, silence_params, silence_row,
    upsert_alert_sql,
)  # fmt: skip
from coreepi.store.interfaces.alerts import AlertStore
from coreepi.store.postgres_store.gateway import PostgresGateway

__all__ = ["PostgresAlertStore"]


class PostgresAlertStore(PostgresGateway, AlertStore):
    """Alerts, silences, deliveries and drains in PostgreSQL."""

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
