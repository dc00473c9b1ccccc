"""Request and response bodies of the HTTP API (besides the CrashReport itself)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CRASH_ID_PATTERN",
    "CoreAccepted",
    "CrashAccepted",
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


def is_crash_id(value: str) -> bool:
    return _CRASH_ID.fullmatch(value) is not None


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
