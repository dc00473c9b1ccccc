"""The values of the alert store (:class:`~coreepi.store.interfaces.AlertStore`).

An alert is one detection's life: fired once per dedup ``key`` (kind +
subject labels), kept ``firing`` while the detector still sees it, then
``resolved``. A silence mutes matching alerts (their delivery, not their
record) until it expires. A delivery is one attempt to post one alert
transition to one receiver. A drain marks a host taken out of service.
Times are timezone-aware UTC ``datetime``s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["AlertRecord", "DeliveryRecord", "DrainRecord", "SilenceRecord"]


@dataclass(frozen=True)
class AlertRecord:
    """``state``: ``firing`` or ``resolved``; ``ends_at`` is set once resolved;
    ``labels`` the subject plus ``kind``; ``evidence`` the detector's numbers;
    ``summary`` the rendered sentence."""

    key: str
    kind: str
    labels: dict[str, str]
    summary: str
    evidence: dict[str, Any]
    state: str
    starts_at: datetime
    updated_at: datetime
    ends_at: datetime | None = None


@dataclass(frozen=True)
class SilenceRecord:
    """Mutes alerts whose labels contain every ``matchers`` item, from
    ``starts_at`` until ``expires_at``."""

    silence_id: str
    matchers: dict[str, str]
    starts_at: datetime
    expires_at: datetime
    created_by: str = ""
    comment: str = ""

    def matches(self, labels: dict[str, str], at: datetime) -> bool:
        """True when active at ``at`` and every matcher equals the label."""
        return (self.starts_at <= at < self.expires_at
                and all(labels.get(k) == v for k, v in self.matchers.items()))


@dataclass(frozen=True)
class DeliveryRecord:
    """One delivery attempt: ``status`` is the HTTP status (0: no response),
    ``ok`` whether it counted as delivered, ``error`` the reason otherwise."""

    alert_key: str
    receiver: str
    state: str
    attempt: int
    at: datetime
    status: int
    ok: bool
    error: str = ""


@dataclass(frozen=True)
class DrainRecord:
    """Host ``host_id`` drained at ``drained_at`` by ``drained_by``; ``reason`` free text.
    A drain that ended (the host back in service) has ``undrained_at`` and
    ``undrained_by``; a current one None and ""."""

    host_id: str
    drained_at: datetime
    drained_by: str = ""
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    undrained_at: datetime | None = None
    undrained_by: str = ""
