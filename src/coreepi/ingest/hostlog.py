"""A host's own log into the store, read once: hardware events and kernel crashes.

``coreepi ingest --telemetry LOG --host H`` gives a kernel log (console,
dmesg, journal or syslog text), mcelog or ``ras-mc-ctl --errors`` output of
host H. One pass over its lines (:func:`coreepi.parse.open_input.input_lines`:
plain or compressed, bounded) feeds three readers at once:

* the telemetry scanner (:class:`coreepi.parse.telemetry.logs.TelemetryScanner`):
  hardware events, stored in batches, idempotent by event id;
* the kernel-log parser (:func:`coreepi.parse.kernel.oops.iter_kernel_log`,
  then :func:`coreepi.analyze.analyze`): kernel crashes of host H,
  ``crash_id`` made of the log's id and H; follow-on reports of one incident
  (:mod:`coreepi.ingest.followons`) are counted, not stored as crashes;
* a window of the last lines' prefixes, which gives each kernel crash the
  wall-clock time of its oops line, or of the latest line before it that
  has one (within :data:`LOOKBACK_LINES`); without one, the file's
  modification time is used, with a warning and a kept rejection.

A compressed log cut short keeps what was read before the cut and gets a
``truncated-input`` rejection naming the file and the line where it stops.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO
from datetime import UTC, datetime
from pathlib import Path

from coreepi.analyze import analyze
from coreepi.ingest.followons import follow_on_note, split_follow_ons
from coreepi.ingest.summary import IngestSummary, unchanged
from coreepi.model.events import TelemetryEvent
from coreepi.model.fleet import Rejections
from coreepi.model.limits import TimeRangeError, check_time
from coreepi.model.report import CrashReport, stable_crash_id
from coreepi.parse.kernel.oops import iter_kernel_log
from coreepi.parse.kernel.scan import ScanLimits
from coreepi.parse.kernel.prefixes import split_prefix
from coreepi.parse.open_input import DecompressionError, binary_lines, open_input
from coreepi.parse.sniff import text_head
from coreepi.parse.telemetry.logs import MAX_LINE_BYTES, TelemetryScanner
from coreepi.store import CoreStatus, CrashRecord, LedgerEntry, Store, sha256_file

__all__ = ["EVENT_BATCH", "LOOKBACK_LINES", "NOT_A_LOG", "ingest_host_log", "not_a_log"]

NOT_A_LOG = "not-a-log"
"""The rejection category of a ``--telemetry`` file that is not text: the
command line exits 2 after the rest of the ingest (the user named the file)."""

EVENT_BATCH = 10_000
"""Telemetry events written to the store per statement."""
LOOKBACK_LINES = 200
"""How many lines before an oops line (itself included) may give its time."""
# A line's time prefix fits in this many characters; the window keeps no more.
_PREFIX_CHARS = 256
_SNIFF_BYTES = 1 << 16  # the head judged text or not, as coreepi.parse.sniff.text_head's window


class _OnePass:
    """One read of the log: lines for the kernel parser, events to the
    store as they come, and the window of recent prefixes for crash times."""

    def __init__(self, path: Path, host: str, store_events: Callable[[list[TelemetryEvent]], None],
                 limits: ScanLimits) -> None:
        self.path = path
        self.store_events = store_events
        self.scanner = TelemetryScanner(host_id=host, name=str(path))
        # An oops line is still in the window when its report comes out: a
        # report is at most max_report_lines long, plus its follow-up lines.
        self.window: deque[tuple[int, str]] = deque(
            maxlen=LOOKBACK_LINES + limits.max_report_lines + limits.follow_up_lines)
        self.batch: list[TelemetryEvent] = []
        self.events = self.no_clock = 0
        self.stopped: DecompressionError | None = None
        self.not_a_log: str | None = None  # why, when its head is not text: no lines then
        self.sha256 = hashlib.sha256()  # of the file as on disk: the ledger's checksum

    def _text(self) -> Iterator[str]:
        """The log's lines, unless its first 64 KiB are not text (then none,
        and :attr:`not_a_log` says why): sniffed in the same read."""
        with open_input(self.path, digest=self.sha256) as handle:
            head = handle.read(_SNIFF_BYTES)
            self.not_a_log = _why_not_text(head)
            if self.not_a_log is None:
                yield from binary_lines(_Replay(head, handle), MAX_LINE_BYTES)

    def lines(self) -> Iterator[str]:
        """The log's lines, in order; feeds the scanner and the window on the way."""
        number = 0
        try:
            for text in self._text():
                number += 1
                self.window.append((number, text[:_PREFIX_CHARS]))
                self._add(self.scanner.feed(text))
                yield text
        except DecompressionError as exc:
            self.stopped = exc  # end the lines here: the parsers close what they hold
        self._add(self.scanner.close())
        self.store_events(self.batch)
        self.batch = []

    def _add(self, events: list[TelemetryEvent]) -> None:
        for event in events:
            self.events += 1
            self.no_clock += event.ts is None
            self.batch.append(event)
        if len(self.batch) >= EVENT_BATCH:
            self.store_events(self.batch)
            self.batch = []

    def time_of(self, line: int) -> tuple[datetime, str] | None:
        """(UTC time, how it was found) of log line ``line`` from the log's
        own wall-clock prefixes: the line's, else the latest one in the
        :data:`LOOKBACK_LINES` lines before it; None when there is none (or
        the line left the window)."""
        if not self.window or line < self.window[0][0]:
            return None
        first = self.window[0][0]
        for n in range(min(line, self.window[-1][0]), max(line - LOOKBACK_LINES, first - 1), -1):
            ts = split_prefix(n, self.window[n - first][1]).ts
            if ts is not None:
                return ts, ("the oops line's time" if n == line else f"the time of log line {n}")
        return None


def _report_line(report: CrashReport) -> int:
    """The 1-based line of the log where ``report`` starts; 0 when unknown."""
    artifact = report.artifact
    return (artifact.line or 0) if artifact is not None else 0


def _in_range(when: datetime) -> bool:
    """Whether a time read from a log is within the accepted range (docs/limits.md)."""
    try:
        check_time(when, "crash time")
    except TimeRangeError:
        return False
    return True


def _crash_record(report: CrashReport, when: tuple[datetime, str] | None, path: Path, host: str,
                  mtime: datetime, rejections: Rejections) -> CrashRecord:
    """The crash row of one kernel crash of host ``host``, timed by ``when``
    or, failing that, by the log's modification time ``mtime``."""
    number = _report_line(report)
    report.host_id = host
    report.crash_id = stable_crash_id("kernel-log", host, report.crash_id)
    if when is not None and not _in_range(when[0]):
        when = None  # a log clock saying 1970 or year 1: counted at the file's time instead
    if when is not None:
        report.captured_at, how = when
        if not how.startswith("the oops"):
            report.analysis.warnings.append(f"crash time taken from {how}")
    else:
        report.captured_at = mtime
        report.analysis.warnings.append(
            "crash time unknown (no wall-clock time in the log near the report): the log "
            "file's modification time is used")
        title = report.signature.signature if report.signature else "kernel crash"
        rejections.add(path, number or None, "estimated-time",
                       f"kernel crash {title!r} has no wall-clock time in the log: "
                       "counted at the file's modification time", action="kept")
    return CrashRecord(report, {}, CoreStatus.NOT_STORED, None, str(path))


class _Replay:
    """A stream whose first read gives ``head`` (read already, to sniff it),
    then what ``handle`` reads: the log is opened and read once."""

    def __init__(self, head: bytes, handle: IO[bytes]) -> None:
        self._head, self._read = head, getattr(handle, "read1", handle.read)

    def read1(self, n: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return bytes(self._read(n))

    read = read1  # what binary_lines asks for besides read1: a block at a time either way


def _why_not_text(head: bytes) -> str | None:
    """Why content starting with ``head`` is not a log, or None (text, or empty)."""
    if not head or text_head(head) is not None:
        return None
    if head.startswith(b"\x7fELF"):
        return "an ELF file (a core? coreepi inspect reads cores)"
    return "binary content"


def not_a_log(path: Path) -> str | None:
    """Why the file at ``path`` is not a log (``"binary content"``; an ELF
    file named as such), or None when its first 64 KiB, decompressed, are
    text. A content cut short is left to the reading, which says where it
    stops. Raises OSError when it cannot be read."""
    try:
        with open_input(path) as fh:
            return _why_not_text(fh.read(_SNIFF_BYTES))
    except DecompressionError:
        return None


def ingest_host_log(store: Store, path: Path, host: str, summary: IngestSummary,
                    known: set[str] | None) -> None:
    """Hardware events (idempotent by event id) and kernel crashes of host
    ``host`` from the log at ``path``, read once; counts and rejections into
    ``summary``. ``known``: the store's host ids (None: not checked). The
    ledger key is the path and the host, so one log of two hosts is two
    entries. A file that is not text (:func:`not_a_log`) is a ``not-a-log``
    rejection, nothing of it stored. Raises OSError when the log cannot be
    opened."""
    summary.files_seen += 1
    key = f"{path} (telemetry of host {host})"
    st = path.stat()
    if unchanged(store, key, st):
        summary.files_skipped += 1
        return
    rejections = Rejections()
    if known is not None and host not in known:
        rejections.add(path, None, "unknown-host",
                       f"unknown host_id {host!r} (not in hosts); log not ingested")
        store.add_rejections(rejections, replace_files=[str(path)])
        summary.rejections.extend(rejections)
        return

    def store_events(events: list[TelemetryEvent]) -> None:
        summary.events_added += store.add_events(events)

    limits = ScanLimits()
    read = _OnePass(path, host, store_events, limits)
    mtime = datetime.fromtimestamp(st.st_mtime, tz=UTC)
    lines = read.lines()
    # each report's time is read while its line is still in the window of prefixes
    timed = {id(report): (report, read.time_of(_report_line(report)))
             for report in map(analyze, iter_kernel_log(lines, name=str(path), limits=limits))}
    incidents = split_follow_ons([report for report, _ in timed.values()])
    for incident in incidents:
        if incident.follow_ons:
            incident.report.analysis.warnings.append(follow_on_note(incident))
            summary.follow_ons += len(incident.follow_ons)
    records = [_crash_record(inc.report, timed[id(inc.report)][1], path, host, mtime, rejections)
               for inc in incidents]
    for _ in lines:  # the parser read them all; if not, the events of the rest still count
        pass
    if read.not_a_log is not None:  # nothing was read past its head
        rejections.add(path, None, NOT_A_LOG, f"not a text log: {read.not_a_log}; not ingested")
        store.add_rejections(rejections, replace_files=[str(path)])
        summary.rejections.extend(rejections)
        return
    if read.no_clock:
        summary.notes.append(
            f"{path}: {read.no_clock} of {read.events} events have only seconds since boot (no "
            "wall-clock time): stored, but not joined to crashes")
    if read.stopped is not None:
        rejections.add(path, read.stopped.line, "truncated-input",
                       f"{read.stopped.reason}: the log stops at line {read.stopped.line}; the "
                       "events and crashes before it are kept", action="kept")
    # a log read to its end was hashed on the way; one cut short was not read whole
    sha = read.sha256.hexdigest() if read.stopped is None else sha256_file(path)
    with store.transaction():
        added = store.add_crashes(records)
        store.add_rejections(rejections, replace_files=[str(path)])
        store.record_file(LedgerEntry(key, st.st_size, st.st_mtime_ns, sha, "telemetry-log",
                                      "done"))
    summary.crashes_added += added
    summary.crashes_existing += len(records) - added
    if added:
        summary.crashes_by_status[str(CoreStatus.NOT_STORED)] += added
    summary.rejections.extend(rejections)
