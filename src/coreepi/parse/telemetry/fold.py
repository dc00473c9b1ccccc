"""The kernel's "Machine check events logged" notice, folded into the record
of the same machine check.

``mce: [Hardware Error]: Machine check events logged`` (``mce_notify_irq``,
``arch/x86/kernel/cpu/mce/core.c``) says only that a machine check was
logged. The machine check itself is printed by whoever decodes it: the
kernel's own ``CPU n: Machine Check: …`` record, skx_edac / i10nm_edac's
print of it, rasdaemon's ``mce_record`` line, mcelog — a few lines away, in
either order (the decoders run from a work queue, GHES and memory-failure
lines often come between). Counting the notice beside that record would
count one machine check twice, so a notice with a machine-check record of
any printer within :data:`FOLD_LINES` lines is folded into it (not emitted);
a notice with none near (the details went only to mcelog's own file) stays
an ``mce`` event of its own (``detail.notice``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.telemetry.base import MAX_RECORD_LINES, first_line
from coreepi.parse.telemetry.mca import GAP

__all__ = ["FOLD_LINES", "NoticeFold"]

# How far (in lines, either way) a notice and its machine check's record may
# be. A real skx_edac print came 17 lines after its notice, a GHES record and
# memory-failure lines between (tests/data/telemetry-wild/linux-5.14-…).
FOLD_LINES: Final = 4 * GAP
# How long a notice waits for a record that starts after it: a record is
# emitted when it closes, up to its own length and a GAP after its start.
_HOLD_LINES: Final = FOLD_LINES + MAX_RECORD_LINES + GAP
_RECENT: Final = 64  # first lines of the latest records kept for the look back


class NoticeFold:
    """Feed it every batch of events in log order (:meth:`take`, with the
    number of the line just read), then :meth:`close`. Bounded: a notice is
    held at most :data:`_HOLD_LINES` lines."""

    def __init__(self) -> None:
        self._pending: deque[tuple[int, TelemetryEvent]] = deque()
        self._records: deque[int] = deque(maxlen=_RECENT)

    def take(self, events: Iterable[TelemetryEvent], line_number: int) -> list[TelemetryEvent]:
        """The events to emit now: ``events`` without the notices that a
        near record folds, plus the held notices no record can reach any
        more."""
        out: list[TelemetryEvent] = []
        for event in events:
            first = first_line(event) if event.kind is EventKind.MCE else None
            if first is None:
                out.append(event)
            elif "notice" in event.detail:
                if not any(abs(first - r) <= FOLD_LINES for r in self._records):
                    self._pending.append((first, event))
            else:
                self._records.append(first)
                self._pending = deque(p for p in self._pending if abs(p[0] - first) > FOLD_LINES)
                out.append(event)
        while self._pending and line_number - self._pending[0][0] > _HOLD_LINES:
            out.append(self._pending.popleft()[1])
        return out

    def close(self, events: Iterable[TelemetryEvent]) -> list[TelemetryEvent]:
        """The last events of the log, and every notice still held."""
        out = self.take(events, 0)
        out.extend(event for _, event in self._pending)
        self._pending.clear()
        return out
