"""One hardware error printed twice in one log counts once.

* **The machine-check notice.** ``mce: [Hardware Error]: Machine check
  events logged`` (``mce_notify_irq``, ``arch/x86/kernel/cpu/mce/core.c``)
  says only that a machine check was logged. The machine check itself is
  printed by whoever decodes it: the kernel's own ``CPU n: Machine Check:
  …`` record, skx_edac / i10nm_edac's print of it, rasdaemon's
  ``mce_record`` line, mcelog — a few lines away, in either order (the
  decoders run from a work queue; GHES and memory-failure lines often come
  between). A notice with a machine-check record of any printer within
  :data:`FOLD_LINES` lines is folded into it (not emitted); a notice with
  none near (the details went only to mcelog's own file) stays an ``mce``
  event of its own (``detail.notice``).
* **rasdaemon's echo of an EDAC line.** The kernel's EDAC core prints
  ``EDAC MC0: 1 CE … on DIMM (…)`` and raises the ``ras:mc_event``
  tracepoint, which rasdaemon prints again as its ``mc_event`` line: in a
  syslog holding both, an ``edac_*`` event of one printer (``source``
  ``kernel`` / ``rasdaemon-syslog``) with the same kind, controller, count
  and DIMM labels as one of the other printer within :data:`FOLD_LINES`
  lines is that error again, folded into the first one (each first one
  takes at most one echo, so repeated errors on one DIMM still count).
* **A GHES record and an EDAC line of one memory error.** With firmware
  first, the APEI GHES driver prints the CPER record (``{N}[Hardware
  Error]: … section_type: memory error … physical_address: …``) and
  ghes_edac prints the same error again as an ``EDAC MC0: 1 CE …`` line
  (``ghes_edac_report_mem_error``, ``drivers/edac/ghes_edac.c``); an MCE
  decoder (skx_edac, i10nm_edac) may print it too. An ``edac_*`` event of
  GHES and one of the EDAC core of the same kind and physical address
  within :data:`FOLD_LINES` lines are one error, folded the same way — but
  the two name the DIMM differently (the EDAC driver's label,
  ``CPU_SrcID#0_MC#3_Chan#0_DIMM#0``; the firmware's SMBIOS slot, ``DIMM
  location: NODE 3 CPU0_DIMM_G1``, the one printed on the board), so the
  event kept takes the other's DIMM name (:func:`_merged`). A first print
  that such an echo may still follow is held until it can no longer come
  (:data:`_HOLD_LINES`), and the events after it with it: the output keeps
  its order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.telemetry.base import MAX_RECORD_LINES, first_line
from coreepi.parse.telemetry.mca import GAP

__all__ = ["FOLD_LINES", "Fold"]

# How far (in lines, either way) two prints of one error may be. A real
# skx_edac print came 17 lines after its notice, a GHES record and
# memory-failure lines between (tests/data/telemetry-wild/linux-5.14-…).
FOLD_LINES: Final = 4 * GAP
# How long a notice waits for a record that starts after it: a record is
# emitted when it closes, up to its own length and a GAP after its start.
_HOLD_LINES: Final = FOLD_LINES + MAX_RECORD_LINES + GAP
_RECENT: Final = 64  # recent records / memory errors kept for the look back
_MEMORY_PRINTERS: Final = frozenset({"kernel", "rasdaemon-syslog", "ghes"})
_MEMORY_KINDS: Final = frozenset({EventKind.EDAC_CE, EventKind.EDAC_UE})


def _memory_printer(event: TelemetryEvent) -> bool:
    """A print of a memory error that another printer may print again (a
    GHES record of another section is no memory error)."""
    source = event.detail.get("source")
    return source in _MEMORY_PRINTERS and (source != "ghes" or event.kind in _MEMORY_KINDS)


def _memory_keys(event: TelemetryEvent) -> frozenset[tuple[Any, ...]]:
    """What names one memory error in two printers' words: the EDAC core's
    and rasdaemon's (kind, controller, count, DIMM labels); the EDAC core's
    and GHES's (kind, physical address: GHES prints it zero-padded)."""
    d = event.detail
    keys: set[tuple[Any, ...]] = set()
    if d.get("source") != "ghes":  # GHES names no controller or DIMM label
        keys.add(("dimm", event.kind, d.get("controller"), d.get("count"),
                  tuple(d.get("dimm_labels") or ())))
    try:
        keys.add(("address", event.kind, int(str(d["physical_address"]), 16)))
    except (KeyError, ValueError):
        pass  # no address printed: the DIMM key alone
    return frozenset(keys)


def _dimm_names(event: TelemetryEvent) -> list[str]:
    """How ``event`` names the DIMM: the EDAC driver's labels, or the GHES
    record's ``DIMM location`` (none when the firmware named none)."""
    d = event.detail
    if d.get("source") != "ghes":
        return [str(x) for x in d.get("dimm_labels") or ()]
    location = str(d.get("dimm_location") or "")
    return [] if not location or location.startswith("not present") else [location]


def _merged(kept: TelemetryEvent, echo: TelemetryEvent) -> TelemetryEvent:
    """``kept`` with the DIMM names only ``echo`` prints (``detail.also_dimm``
    and, in its summary, ``; also named <name> (<printer>)``); ``kept``
    itself when it names them all."""
    known = set(_dimm_names(kept))
    more = [name for name in _dimm_names(echo) if name not in known]
    if not more:
        return kept
    printer = "APEI" if echo.detail.get("source") == "ghes" else "EDAC"
    words = ", ".join(more)
    return kept.model_copy(update={
        "summary": f"{kept.summary}; also named {words} ({printer})",
        "detail": {**kept.detail, "also_dimm": more}})


class Fold:
    """Feed it every batch of events in log order (:meth:`take`, with the
    number of the line just read), then :meth:`close`. Bounded: a notice or
    a memory error is held at most :data:`_HOLD_LINES` lines, :data:`_RECENT`
    prints are remembered."""

    def __init__(self) -> None:
        self._pending: deque[tuple[int, TelemetryEvent]] = deque()
        self._records: deque[int] = deque(maxlen=_RECENT)
        self._memory: deque[tuple[int, str, frozenset[tuple[Any, ...]], TelemetryEvent]] = (
            deque(maxlen=_RECENT))
        # the events to emit, in order: (the line number from which it may go, event)
        self._queue: deque[tuple[int, TelemetryEvent]] = deque()

    def take(self, events: Iterable[TelemetryEvent], line_number: int) -> list[TelemetryEvent]:
        """The events to emit now: ``events`` without the second prints,
        plus the held notices no record can reach any more; a memory error
        an echo may still follow waits, and the events after it."""
        for event in events:
            first = first_line(event)
            if first is not None and event.kind is EventKind.MCE:
                self._machine_check(event, first)
            elif first is not None and _memory_printer(event):
                self._memory_error(event, first)
            else:
                self._queue.append((0, event))
        while self._pending and line_number - self._pending[0][0] > _HOLD_LINES:
            self._queue.append((0, self._pending.popleft()[1]))
        out: list[TelemetryEvent] = []
        while self._queue and self._queue[0][0] <= line_number:
            out.append(self._queue.popleft()[1])
        return out

    def close(self, events: Iterable[TelemetryEvent]) -> list[TelemetryEvent]:
        """The last events of the log, and every event and notice still held."""
        out = self.take(events, 0)
        out.extend(event for _, event in self._queue)
        out.extend(event for _, event in self._pending)
        self._queue.clear()
        self._pending.clear()
        return out

    def _machine_check(self, event: TelemetryEvent, first: int) -> None:
        if "notice" in event.detail:
            if not any(abs(first - r) <= FOLD_LINES for r in self._records):
                self._pending.append((first, event))
            return
        self._records.append(first)
        self._pending = deque(p for p in self._pending if abs(p[0] - first) > FOLD_LINES)
        self._queue.append((0, event))

    def _memory_error(self, event: TelemetryEvent, first: int) -> None:
        printer, keys = str(event.detail["source"]), _memory_keys(event)
        for index, (line, other, seen, kept) in enumerate(self._memory):
            if other != printer and seen & keys and abs(first - line) <= FOLD_LINES:
                del self._memory[index]  # that first print has had its echo
                self._merge_into(kept, event)
                return
        self._memory.append((first, printer, keys, event))
        # only an address names the error to both GHES and the EDAC core: only then
        # can an echo bring another DIMM name
        address = any(k[0] == "address" for k in keys)
        self._queue.append((first + _HOLD_LINES if address else 0, event))

    def _merge_into(self, kept: TelemetryEvent, echo: TelemetryEvent) -> None:
        """``kept``, still waiting in the queue, takes ``echo``'s DIMM names;
        gone already (emitted), it stays as it was."""
        for index, (release, queued) in enumerate(self._queue):
            if queued is kept:
                self._queue[index] = (release, _merged(kept, echo))
                return
