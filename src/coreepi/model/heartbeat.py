"""The heartbeat: what a node agent reports every few minutes (exposure).

The contract between the agent (:mod:`coreepi.capture.heartbeat` builds its
body), the HTTP API (``POST /api/v1/heartbeats``) and ingest
(:func:`coreepi.ingest.intake.accept_heartbeats`, which stores it as an
exposure interval and host attributes).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coreepi.model.report import HostFacts

__all__ = ["MAX_HEARTBEAT_SPAN", "Heartbeat"]

MAX_HEARTBEAT_SPAN = timedelta(days=7)
"""The longest interval one heartbeat may cover."""


class Heartbeat(BaseModel):
    """What a node agent reports every few minutes: it was up and observed
    over [start, end) — exposure, the denominator — with its load figures and,
    when they changed, its host facts. Unknown keys are ignored (newer agents)."""

    model_config = ConfigDict(extra="ignore")

    host_id: str = Field(min_length=1, max_length=256)
    boot_id: str | None = Field(default=None, max_length=256)
    start: datetime = Field(description="ISO-8601; UTC when no offset is given")
    end: datetime
    facts: HostFacts | None = Field(default=None, description="only when they changed")
    load: dict[str, float | int | str | bool | None] = Field(
        default_factory=dict,
        description="loadavg_1m, memory_pressure_some_avg10, uptime_seconds, … over the interval",
    )

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        try:
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00; a ValueError is a 422, not a 500
            raise ValueError("time out of range in UTC") from None

    @model_validator(mode="after")
    def _interval(self) -> Heartbeat:
        if not self.start < self.end:
            raise ValueError("start must be before end")
        if self.end - self.start > MAX_HEARTBEAT_SPAN:
            raise ValueError(f"an interval longer than {MAX_HEARTBEAT_SPAN.days} days")
        return self
