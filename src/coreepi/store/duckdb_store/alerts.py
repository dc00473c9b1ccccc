"""The DuckDB :class:`~coreepi.store.interfaces.AlertStore` (tables of migrations 4 and 6)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import duckdb

from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord
from coreepi.store.alert_sql import (
    ALERT_COLUMNS, DELIVERY_COLUMNS, DRAIN_COLUMNS, HISTORY_COLUMNS, SILENCE_COLUMNS,
    alert_params, alert_row,
    delivery_params, delivery_row, drain_params, drain_row, history_params,
    history_row, silence_params, silence_row,
    upsert_alert_sql,
)  # fmt: skip
from coreepi.store.duckdb_store.gateway import DuckDBGateway
from coreepi.store.interfaces.alerts import AlertStore

__all__ = ["DuckDBAlertStore"]


class DuckDBAlertStore(DuckDBGateway, AlertStore):
    """Alerts, silences, deliveries and drains in DuckDB."""

    def _alert_write(self, sql: str, params: list[object]) -> int:
        with self.transaction():
            row = self._con.execute(sql, params).fetchone()
        return int(row[0]) if row and isinstance(row[0], int) else 0

    def put_alert(self, alert: AlertRecord) -> None:
        self._alert_write(upsert_alert_sql(), alert_params(alert))

    def alerts(self, state: str | None = None) -> list[AlertRecord]:
        where, params = ("WHERE state = ? ", [state]) if state else ("", [])
        rows = self._query(f"SELECT {ALERT_COLUMNS} FROM alerts {where}"
                           "ORDER BY starts_at, alert_key", params).fetchall()
        return [alert_row(r) for r in rows]

    def add_silence(self, silence: SilenceRecord) -> None:
        try:
            self._alert_write(f"INSERT INTO alert_silences ({SILENCE_COLUMNS}) "
                              "VALUES (?, ?, ?, ?, ?, ?)", silence_params(silence))
        except duckdb.ConstraintException:
            raise ValueError(f"silence {silence.silence_id!r} is already stored") from None

    def silences(self, active_at: datetime | None = None) -> list[SilenceRecord]:
        where, params = (("WHERE starts_at <= ? AND expires_at > ? ", [active_at, active_at])
                         if active_at else ("", []))
        rows = self._query(f"SELECT {SILENCE_COLUMNS} FROM alert_silences {where}"
                           "ORDER BY starts_at, silence_id", params).fetchall()
        return [silence_row(r) for r in rows]

    def expire_silence(self, silence_id: str, at: datetime) -> bool:
        return self._alert_write("UPDATE alert_silences SET expires_at = ? WHERE silence_id = ? "
                                 "AND expires_at > ?", [at, silence_id, at]) > 0

    def add_delivery(self, delivery: DeliveryRecord) -> None:
        self._alert_write(f"INSERT INTO alert_deliveries ({DELIVERY_COLUMNS}) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", delivery_params(delivery))

    def deliveries(self, alert_key: str | None = None) -> list[DeliveryRecord]:
        where, params = ("WHERE alert_key = ? ", [alert_key]) if alert_key else ("", [])
        rows = self._query(f"SELECT {DELIVERY_COLUMNS} FROM alert_deliveries {where}"
                           "ORDER BY attempted_at, attempt", params).fetchall()
        return [delivery_row(r) for r in rows]

    def signatures_before(self, until: datetime) -> set[str]:
        rows = self._query("SELECT DISTINCT signature FROM crashes WHERE captured_at < ? "
                           "AND signature IS NOT NULL", [until]).fetchall()
        return {r[0] for r in rows}

    def drain_host(self, drain: DrainRecord) -> bool:
        return self._alert_write(f"INSERT INTO drained_hosts ({DRAIN_COLUMNS}) "
                                 "VALUES (?, ?, ?, ?, ?) ON CONFLICT (host_id) DO NOTHING",
                                 drain_params(drain)) > 0

    def drained_hosts(self) -> list[DrainRecord]:
        rows = self._query(f"SELECT {DRAIN_COLUMNS} FROM drained_hosts "
                           "ORDER BY drained_at, host_id").fetchall()
        return [drain_row(r) for r in rows]

    def undrain_host(self, host_id: str, at: datetime, by: str) -> DrainRecord | None:
        with self.transaction():  # one step: a reader sees the host drained or back, never both
            rows = self._query(f"SELECT {DRAIN_COLUMNS} FROM drained_hosts WHERE host_id = ?",
                               [host_id]).fetchall()
            if not rows:
                return None
            ended = replace(drain_row(rows[0]), undrained_at=at, undrained_by=by)
            self._alert_write(f"INSERT INTO drain_history ({HISTORY_COLUMNS}) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", history_params(ended))
            self._alert_write("DELETE FROM drained_hosts WHERE host_id = ?", [host_id])
        return ended

    def drain_history(self) -> list[DrainRecord]:
        return [history_row(r) for r in self._query(
            f"SELECT {HISTORY_COLUMNS} FROM drain_history ORDER BY drained_at, host_id").fetchall()]
