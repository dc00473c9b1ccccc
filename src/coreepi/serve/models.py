"""Request and response bodies of the HTTP API (besides the CrashReport itself)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coreepi.model.report import HostFacts

__all__ = [
    "CRASH_ID_PATTERN",
    "CoreAccepted",
    "CrashAccepted",
    "Heartbeat",
    "HeartbeatAccepted",
    "TokenCreate",
    "is_crash_id",
    "token_json",
]

CRASH_ID_PATTERN = r"^[0-9a-f]{16,64}$"
"""What the API accepts as a crash_id: 16 to 64 lower-case hex digits
(:func:`coreepi.model.report.stable_crash_id` gives 32). Anything else — ``../``,
slashes, upper case — is refused before it reaches the store or a file name."""

_CRASH_ID = re.compile(CRASH_ID_PATTERN)
MAX_HEARTBEAT_SPAN = timedelta(days=7)


def is_crash_id(value: str) -> bool:
    return _CRASH_ID.fullmatch(value) is not None


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


class CrashAccepted(BaseModel):
    crash_id: str
    status: str = Field(description="created | duplicate")


class CoreAccepted(BaseModel):
    crash_id: str
    status: str = Field(description="stored | duplicate")
    blob_key: str
    core_status: str
    queued: bool = Field(description="the core's analysis is queued (the report lacked "
                         "analysis); GET the crash later for the result")
    signature: str | None = None
    warning: str | None = None


class HeartbeatAccepted(BaseModel):
    host_id: str
    status: str = Field(description="created | duplicate")


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scopes: list[str] = Field(min_length=1)
    name: str | None = Field(default=None, max_length=200)


def token_json(token: Any) -> dict[str, Any]:
    """The public view of an :class:`coreepi.store.ApiToken` (never its hash)."""
    return {
        "token_id": token.token_id, "name": token.name, "scopes": list(token.scopes),
        "created_at": token.created_at.isoformat(),
        "revoked_at": token.revoked_at.isoformat() if token.revoked_at else None,
    }
