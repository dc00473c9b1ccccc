"""Shared pieces of the hardware-telemetry parsers: how a family parser
turns log lines into :class:`TelemetryEvent` s.

Lines come in as :class:`~coreepi.parse.kernel.prefixes.LogLine` s, read by
the one prefix reader of kernel logs
(:func:`~coreepi.parse.kernel.prefixes.split_prefix`: ``dmesg`` / ``dmesg
-T`` / ``dmesg -x`` / ``/dev/kmsg`` / syslog / journal / ISO-8601
prefixes, stacked or not), with their times: ``uptime`` (seconds since
boot) and ``ts`` (UTC wall clock, when the prefix has one with a year).

Each family parser (``telemetry_mce``, ``telemetry_edac``,
``telemetry_xid``, ``telemetry_aer``) implements :class:`FamilyParser`: it
is fed every line, returns the events it completed, and returns the rest on
``flush()`` at the end of the input. Multi-line records are held in bounded
buffers (:data:`MAX_RECORD_LINES`; ``raw`` capped at
:data:`~coreepi.parse.kernel.prefixes.MAX_RAW_CHARS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from coreepi.model.events import EventKind, TelemetryEvent, event_id
from coreepi.parse.kernel.prefixes import MAX_RAW_CHARS, LogLine

__all__ = [
    "MAX_RECORD_LINES",
    "Context",
    "FamilyParser",
    "Record",
    "first_line",
    "hex_int",
    "make_event",
]

MAX_RECORD_LINES: Final = 64  # lines kept per multi-line record
# make_event's "source": "NAME:FIRST[-LAST]" or "line FIRST[-LAST]"
_WHERE: Final = re.compile(r"(?:^line |:)(\d{1,12})(?:-\d{1,12})?$")


@dataclass(frozen=True, slots=True)
class Context:
    """Who the events belong to and where they were read."""

    host_id: str | None = None
    name: str | None = None


class FamilyParser(Protocol):
    """``busy``: the parser has a record open that continues on lines with
    none of the family keywords, so it must see every line."""

    busy: bool

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        """Read one line; the events of the records it closed (often [])."""
        ...

    def flush(self) -> list[TelemetryEvent]:
        """The end of the log: the events of the records still open."""
        ...


def hex_int(text: str | None) -> int | None:
    """``"0x1f"`` / ``"1f"`` as an int; None for anything else."""
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def _position(first: LogLine) -> tuple[str, str] | None:
    """A precise time of the line (uptime and / or sub-second wall clock),
    or None when only the line number can place it."""
    parts = []
    if first.uptime is not None:
        parts.append(f"{first.uptime:.6f}")
    if first.ts is not None and (first.ts.microsecond or first.uptime is not None):
        parts.append(first.ts.isoformat())
    return ("time", " ".join(parts)) if parts else None


def make_event(
    ctx: Context,
    lines: list[LogLine],
    kind: EventKind,
    summary: str,
    *,
    severity: str | None = None,
    component: str | None = None,
    hardware_indicative: bool = True,
    detail: dict[str, Any] | None = None,
    ts: datetime | None = None,
) -> TelemetryEvent:
    """Build an event from the line(s) it was read from.

    The id is stable: with a precise time on the first line (uptime or a
    sub-second wall clock) it is ``event_id(host, kind, time, message)``, so
    the same kernel message read again from a rotated or re-collected file
    collides; otherwise ``event_id(host, name, line number, raw)``.
    """
    first = lines[0]
    raw = "\n".join(line.raw for line in lines)[:MAX_RAW_CHARS]
    position = _position(first)
    if position is not None:
        eid = event_id(ctx.host_id, kind.value, position[1], first.message)
    else:
        eid = event_id(ctx.host_id, ctx.name, first.number, raw)
    where = f"{ctx.name}:{first.number}" if ctx.name else f"line {first.number}"
    if len(lines) > 1:
        where += f"-{lines[-1].number}"
    info = dict(detail or {})
    if first.wallclock_text and first.ts is None and ts is None:
        info.setdefault("syslog_time", first.wallclock_text)
    return TelemetryEvent(
        event_id=eid,
        host_id=ctx.host_id,
        ts=ts or first.ts,
        uptime_seconds=first.uptime,
        kind=kind,
        severity=severity,
        component=component,
        summary=summary[:500],
        hardware_indicative=hardware_indicative,
        detail=info,
        source=where,
        raw=raw,
    )


def first_line(event: TelemetryEvent) -> int | None:
    """The number of the line an event read by :func:`make_event` starts
    at (read back from its ``source``); None for an event from elsewhere
    (a crash report)."""
    match = _WHERE.search(event.source or "")
    return int(match.group(1)) if match is not None else None


@dataclass
class Record:
    """A multi-line record being collected (bounded)."""

    key: str
    lines: list[LogLine] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    last: int = 0

    def add(self, line: LogLine) -> None:
        """Add ``line`` to the record (kept up to ``MAX_RECORD_LINES``)."""
        if len(self.lines) < MAX_RECORD_LINES:
            self.lines.append(line)
        self.last = line.number
