"""AlertStore: alerts, silences, the delivery log and drained hosts.

Written by the surveillance evaluation (``coreepi.surveil``), read by the
CLI and the pages. Every time is UTC; lists come back oldest first.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord
from coreepi.store.interfaces.session import Transactional

__all__ = ["AlertStore"]


class AlertStore(Transactional):
    """Alerts by dedup key, silences, deliveries, drains."""

    @contextmanager
    def evaluation_lock(self) -> Iterator[bool]:
        """Hold the right to evaluate and deliver for the block: True when
        this process has it, False when another evaluator on the same store
        holds it (then it must neither store transitions nor deliver, or the
        receivers are paged twice). An embedded store has one writing process:
        always True. A shared store (PostgreSQL) overrides this."""
        yield True

    @abc.abstractmethod
    def put_alert(self, alert: AlertRecord) -> None:
        """Insert or replace the alert with ``alert.key`` (one row per key:
        a key that fires again after being resolved is the same row, firing again)."""

    @abc.abstractmethod
    def alerts(self, state: str | None = None) -> list[AlertRecord]:
        """Stored alerts (only those in ``state`` when given), by ``starts_at`` then key."""

    @abc.abstractmethod
    def add_silence(self, silence: SilenceRecord) -> None:
        """Store a silence. Raises ValueError naming it when its id is already stored."""

    @abc.abstractmethod
    def silences(self, active_at: datetime | None = None) -> list[SilenceRecord]:
        """Silences (only those active at ``active_at`` when given), by ``starts_at`` then id."""

    @abc.abstractmethod
    def expire_silence(self, silence_id: str, at: datetime) -> bool:
        """End a silence at ``at``; False when no active silence has that id."""

    @abc.abstractmethod
    def add_delivery(self, delivery: DeliveryRecord) -> None:
        """Append one delivery attempt to the log."""

    @abc.abstractmethod
    def deliveries(self, alert_key: str | None = None) -> list[DeliveryRecord]:
        """The delivery log (of one alert when ``alert_key`` is given), by ``at`` then attempt."""

    @abc.abstractmethod
    def signatures_before(self, until: datetime) -> set[str]:
        """Every signature of a crash captured before ``until`` (reads the crash
        table: the new-group detector's memory beyond the frames it reads)."""

    @abc.abstractmethod
    def drain_host(self, drain: DrainRecord) -> bool:
        """Mark a host drained; False (nothing changed) when it already is."""

    @abc.abstractmethod
    def drained_hosts(self) -> list[DrainRecord]:
        """Every drained host, by ``drained_at`` then ``host_id``."""

    @abc.abstractmethod
    def undrain_host(self, host_id: str, at: datetime, by: str) -> DrainRecord | None:
        """Put a drained host back in service at ``at`` (UTC) by ``by``: its
        drain moves to the history, ended. The ended drain; None (nothing
        changed) when the host is not drained."""

    @abc.abstractmethod
    def drain_history(self) -> list[DrainRecord]:
        """Every ended drain (``undrained_at`` set), by ``drained_at`` then ``host_id``."""
