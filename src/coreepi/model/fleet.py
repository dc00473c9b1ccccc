"""Fleet rows: hosts, exposure intervals and the rejections of a read.

The contracts between the readers (:mod:`coreepi.ingest.fleet`, the HTTP
intake), the store and the epidemiology: plain frozen dataclasses, no I/O.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["ExposureInterval", "HostRow", "Rejection", "Rejections", "parse_utc"]

# --------------------------------------------------------------------------
# rejections


@dataclass(frozen=True, slots=True)
class Rejection:
    """One problem with one input row or file.

    ``line`` is 1-based (None when the problem is the whole file);
    ``category`` is a short stable key (``bad-timestamp``, ``overlap`` …) for
    counting; ``action`` says what became of the row: ``rejected`` (not
    ingested) or ``kept`` (ingested, with the problem noted, e.g. a crash
    whose core is unreadable).
    """

    file: str
    line: int | None
    category: str
    reason: str
    action: str = "rejected"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.reason}"


@dataclass
class Rejections:
    """Every :class:`Rejection` of a read or an ingest, with counts by category."""

    items: list[Rejection] = field(default_factory=list)

    def add(
        self, file: str | os.PathLike[str], line: int | None, category: str, reason: str,
        action: str = "rejected",
    ) -> Rejection:
        r = Rejection(os.fspath(file), line, category, reason, action)
        self.items.append(r)
        return r

    def extend(self, other: Rejections) -> None:
        self.items.extend(other.items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Rejection]:
        return iter(self.items)

    @property
    def rejected(self) -> list[Rejection]:
        return [r for r in self.items if r.action == "rejected"]

    @property
    def kept(self) -> list[Rejection]:
        return [r for r in self.items if r.action == "kept"]

    def counts(self) -> Counter[str]:
        """Rejected rows by category (rows kept with a problem are not counted)."""
        return Counter(r.category for r in self.items if r.action == "rejected")

    def summary(self) -> str:
        """One line: ``"3 rejected (bad-timestamp 1, overlap 2); 1 kept with a problem"``."""
        counts = self.counts()
        total = sum(counts.values())
        text = f"{total} rejected"
        if counts:
            text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"
        if kept := len(self.kept):
            text += f"; {kept} kept with a problem"
        return text


# --------------------------------------------------------------------------
# values


def parse_utc(text: str) -> datetime:
    """An ISO-8601 time as an aware UTC datetime. A time without an offset is
    taken as UTC (the format says every time is UTC); a date alone is
    midnight UTC. Raises ValueError naming the text."""
    value = text.strip()
    if not value:
        raise ValueError("empty timestamp")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"not an ISO-8601 timestamp: {text!r}") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00: before year 1 in UTC
        raise ValueError(f"timestamp out of range in UTC: {text!r}") from None


# --------------------------------------------------------------------------
# hosts and exposure


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host of hosts.csv and its static attributes (None: unknown)."""

    host_id: str
    attributes: dict[str, str | None]
    line: int


@dataclass(frozen=True, slots=True)
class ExposureInterval:
    """The host was observed (up, able to crash and report) over [start, end).

    ``attributes`` override the host's static ones for this interval; a
    missing or empty cell does not override.
    """

    host_id: str
    start: datetime
    end: datetime
    attributes: dict[str, str]
    line: int = 0

    @property
    def seconds(self) -> float:
        """Length of the interval in seconds."""
        return (self.end - self.start).total_seconds()
