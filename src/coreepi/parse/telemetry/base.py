"""Shared pieces of the hardware-telemetry parsers: one log line with its
time, and how a family parser turns lines into :class:`TelemetryEvent` s.

A :class:`LogLine` is a line of a kernel log or tool output with the
collector's prefix taken off (``dmesg`` / ``dmesg -T`` / ``dmesg -x`` /
``/dev/kmsg`` / syslog / journal / ISO-8601 prefixes) and its time kept:
``uptime`` (seconds since boot, from ``[  123.456789]`` or a kmsg record)
and ``ts`` (UTC wall clock, when the prefix has one with a year).

Each family parser (``telemetry_mce``, ``telemetry_edac``,
``telemetry_xid``, ``telemetry_aer``) implements :class:`FamilyParser`: it
is fed every line, returns the events it completed, and returns the rest on
``flush()`` at the end of the input. Multi-line records are held in bounded
buffers (:data:`MAX_RECORD_LINES`, :data:`MAX_RAW_CHARS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final, Protocol

from coreepi.model.events import EventKind, TelemetryEvent, event_id

__all__ = [
    "MAX_RAW_CHARS",
    "MAX_RECORD_LINES",
    "Context",
    "FamilyParser",
    "LogLine",
    "Record",
    "hex_int",
    "make_event",
    "split_prefix",
]

MAX_RAW_CHARS: Final = 4096  # TelemetryEvent.raw cap
MAX_RECORD_LINES: Final = 64  # lines kept per multi-line record
MAX_MESSAGE_CHARS: Final = 8192  # longer messages are cut before matching

_KMSG: Final = re.compile(r"^(\d{1,3}),(\d+),(\d+),[^;]{0,16};")
_DMESG_X: Final = re.compile(r"^[a-z]{2,8} *:[a-z]{2,8} *: ")
_LEVEL: Final = re.compile(r"^<\d{1,3}>")
_ISO: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})? +"
)
_DMESG_T: Final = re.compile(
    r"^\[(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))? (\d{4})\] ?"
)
_BSD: Final = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))? +")
_CONSOLE: Final = re.compile(r"^\[ *(\d{1,10}\.\d{1,9})\](?:\[ *[CT]\d{1,7}\])? ?")
# "host kernel: ", "host mcelog[665]: " after a syslog / journal time; the tag
# must be "kernel" or carry a pid so that "EDAC MC0: " is never taken for one.
_HOST_TAG: Final = re.compile(r"^(\S{1,255}) (kernel|[\w.\-/@]{1,64}\[\d{1,10}\]|mcelog|rasdaemon): ")
_TAG_ONLY: Final = re.compile(r"^(kernel|[\w.\-/@]{1,64}\[\d{1,10}\]|mcelog|rasdaemon): ")
_MONTHS: Final = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


@dataclass(frozen=True, slots=True)
class LogLine:
    """One input line. ``message`` is the text without the collector's and
    the console's prefixes; ``raw`` the line as read (capped)."""

    number: int
    raw: str
    message: str
    ts: datetime | None = None
    uptime: float | None = None
    program: str | None = None  # syslog tag without pid: "kernel", "mcelog" …
    wallclock_text: str | None = None  # a time without a year (BSD syslog)


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


def _fraction(text: str | None) -> int:
    return int((text or "0")[:6].ljust(6, "0"))


def _tz(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)))


def _iso(match: re.Match[str]) -> datetime | None:
    y, mo, d, h, mi, s, frac, zone = match.groups()
    try:
        when = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _fraction(frac), tzinfo=_tz(zone))
        return when.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _dmesg_t(match: re.Match[str]) -> datetime | None:
    mon, day, h, mi, s, frac, year = match.groups()
    try:
        return datetime(int(year), _MONTHS[mon], int(day), int(h), int(mi), int(s), _fraction(frac), tzinfo=UTC)
    except (KeyError, ValueError, OverflowError):
        return None


def split_prefix(number: int, raw: str) -> LogLine:
    """Take a line's prefixes off and read its time. Never raises.

    Understood: ``/dev/kmsg`` records (``6,3964,206764307,-;msg``), ``dmesg
    -x`` (``kern  :warn  : ``), ``<4>`` levels, ISO-8601 times (journal
    ``-o short-iso``, rsyslog RFC 3339, ``dmesg --time-format iso`` with its
    comma), ``dmesg -T`` (``[Sun Feb 23 16:24:18 2025]``), BSD syslog
    (``Mar 19 10:32:12 host kernel:``; no year, so no ``ts``), console
    ``[  123.456789]`` with an optional ``[ T123]`` caller, and the ``host
    tag:`` that follows a syslog time. Wall clocks without a zone are taken
    as UTC (``dmesg -T`` prints the host's local time: set TZ=UTC).
    """
    text = raw[:MAX_MESSAGE_CHARS].rstrip("\r")
    ts: datetime | None = None
    uptime: float | None = None
    program: str | None = None
    wall_text: str | None = None
    match = _KMSG.match(text)
    if match is not None:
        uptime = int(match.group(3)) / 1e6
        text = text[match.end():]
    elif text[:1].islower():
        match = _DMESG_X.match(text)
        if match is not None:
            text = text[match.end():]
    if text.startswith("<"):
        match = _LEVEL.match(text)
        if match is not None:
            text = text[match.end():]
    after_time = False
    first = text[:1]
    if first.isdigit():
        match = _ISO.match(text)
        if match is not None:
            ts = _iso(match)
            text = text[match.end():]
            after_time = True
    elif first == "[":
        match = _DMESG_T.match(text)
        if match is not None:
            ts = _dmesg_t(match)
            text = text[match.end():]
        else:
            match = _CONSOLE.match(text)
            if match is not None:
                uptime = float(match.group(1))
                text = text[match.end():]
                after_time = True  # journalctl -o short-monotonic: "[ 1.2] host kernel: "
    elif first.isupper():
        match = _BSD.match(text)
        if match is not None and match.group(1) in _MONTHS:
            wall_text = text[: match.end()].strip()
            text = text[match.end():]
            after_time = True
    if after_time:
        match = _HOST_TAG.match(text)
        if match is not None:
            program = match.group(2).split("[", 1)[0]
            text = text[match.end():]
        elif wall_text is not None or ts is not None:
            match = _TAG_ONLY.match(text)
            if match is not None:
                program = match.group(1).split("[", 1)[0]
                text = text[match.end():]
    if text.startswith("[") and uptime is None:
        match = _CONSOLE.match(text)
        if match is not None:
            uptime = float(match.group(1))
            text = text[match.end():]
    elif text.startswith("<"):
        match = _LEVEL.match(text)
        if match is not None:
            text = text[match.end():]
            match = _CONSOLE.match(text)
            if match is not None and uptime is None:
                uptime = float(match.group(1))
                text = text[match.end():]
    return LogLine(number, raw[:MAX_RAW_CHARS], text, ts, uptime, program, wall_text)


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
