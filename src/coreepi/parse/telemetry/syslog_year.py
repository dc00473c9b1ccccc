"""The year of a BSD syslog time (``Feb 23 16:24:18 gpu7 kernel: …``, what
``journalctl -k`` and rsyslog's traditional format print), which has none.

The reader (:func:`coreepi.parse.kernel.prefixes.split_prefix`) keeps such a
time as text (an event's ``detail["syslog_time"]``); :class:`SyslogYear`
turns it into a UTC ``ts`` with a year given by the user, or else the
year of the file's modification time under rsyslog's rule for a file that
spans a new year: a month after the modification time's month was written
the year before (a log written to in January holds December's lines).
Times without a zone are taken as UTC, as every wall clock of
:mod:`coreepi.parse.kernel.prefixes`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from coreepi.model.events import TelemetryEvent
from coreepi.parse.kernel.prefixes import MONTHS

__all__ = ["SyslogYear"]

_TIME: Final = re.compile(r"([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


@dataclass(frozen=True)
class SyslogYear:
    """Where the year of year-less syslog times comes from: ``year`` (the
    user's ``--year``), else ``modified`` (the file's modification time,
    UTC); with neither, syslog times stay without a year."""

    year: int | None = None
    modified: datetime | None = None

    def describe(self) -> str:
        """One phrase saying how the year is chosen, for the command's output."""
        if self.year is not None:
            return f"syslog times without a year read as {self.year} (--year)"
        if self.modified is not None:
            return (f"syslog times without a year read as {self.modified.year} (the file's "
                    f"modification time, {self.modified:%Y-%m-%d}; months after "
                    f"{self.modified:%B} as {self.modified.year - 1}); --year to choose")
        return "syslog times without a year are not dated (--year to choose one)"

    def when(self, text: str) -> datetime | None:
        """The UTC time of a syslog time ``text`` (``Feb 23 16:24:18``,
        optionally with a fraction); None when no year is known or the date
        does not exist (``Feb 29`` of a common year)."""
        found = _TIME.fullmatch(text.strip())
        if found is None or found.group(1) not in MONTHS:
            return None
        mon, day, h, mi, s, frac = found.groups()
        month = MONTHS[mon]
        if self.year is not None:
            year = self.year
        elif self.modified is not None:
            year = self.modified.year - (month > self.modified.month)
        else:
            return None
        try:
            return datetime(year, month, int(day), int(h), int(mi), int(s),
                            int((frac or "0")[:6].ljust(6, "0")), tzinfo=UTC)
        except ValueError:
            return None

    def dated(self, event: TelemetryEvent) -> TelemetryEvent:
        """``event`` with its ``ts`` read from its syslog time when it has
        none (the same event otherwise)."""
        text = event.detail.get("syslog_time")
        if event.ts is not None or not isinstance(text, str):
            return event
        ts = self.when(text)
        return event if ts is None else event.model_copy(update={"ts": ts})
