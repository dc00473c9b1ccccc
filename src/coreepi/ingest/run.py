"""Ingest fleet directories and crash files into a store.

:func:`ingest` reads each fleet directory's hosts, exposure and telemetry
(streaming, bad rows rejected with file:line), then every crash file: cores
and kernel logs are analysed in parallel, one sandboxed child process per
artifact (:mod:`coreepi.ingest.worker`: memory limit, CPU limit, killed at
the wall-time limit), ready-made CrashReport .json files are read in this
process. Every crash is counted, also when its core is missing or cannot be
analysed (a crash row with ``core_status`` ``missing``/``unreadable`` and
the reason).

Idempotent and interruptible: crashes are keyed by ``crash_id``, events by
``event_id``, intervals by ``(host_id, start)``; each analysed artifact is
committed (its crash rows, rejections and ledger row) in one transaction as
soon as its worker finishes, ready-made reports in batches. The ledger
(path, size, mtime_ns, sha256) lets a re-run skip files already ingested
without reading them. Killing ingest at any point and re-running it loses
nothing and duplicates nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from coreepi import __version__
from coreepi.ingest.buildid import BuildIdIndex
from coreepi.ingest.fleet import (
    CrashFile,
    Fleet,
    Sidecar,
    SidecarError,
    is_fleet_dir,
    read_exposure,
    read_hosts,
    read_sidecar,
    read_telemetry,
    scan_crashes,
    sidecar_candidates,
    sidecar_from_object,
)
from coreepi.ingest.pairing import (
    PAIR_WINDOW,
    merge_core_and_hs_err,
    pair_crash_id,
    pairable,
    pairs_with,
)
from coreepi.model.events import TelemetryEvent
from coreepi.model.fleet import Rejection, Rejections
from coreepi.model.report import AnalysisInfo, CoreInfo, CrashReport, Source, stable_crash_id
from coreepi.store import CoreStatus, CrashRecord, LedgerEntry, Store, sha256_file

__all__ = ["IngestObserver", "IngestSummary", "ingest"]

DEFAULT_TIMEOUT_SECONDS = 300.0
DEFAULT_MEMORY_LIMIT_MB = 4096
REPORT_BATCH = 1000


class IngestObserver(Protocol):
    """Progress callbacks (the CLI draws a Rich progress bar with them)."""

    def start(self, total: int) -> None:
        """``total`` crash files will be processed."""

    def advance(self, path: str, outcome: str) -> None:
        """One crash file is done (committed); ``outcome`` is one short line."""


@dataclass
class IngestSummary:
    """What an ingest did. ``crashes_by_status``: new crash rows by core status."""

    files_seen: int = 0
    files_skipped: int = 0
    hosts: int = 0
    exposure_added: int = 0
    exposure_duplicates: int = 0
    events_added: int = 0
    crashes_added: int = 0
    crashes_existing: int = 0
    crashes_paired: int = 0
    crashes_by_status: Counter[str] = field(default_factory=Counter)
    rejections: Rejections = field(default_factory=Rejections)
    notes: list[str] = field(default_factory=list)
    duration_seconds: float = 0.0

    def lines(self) -> list[str]:
        status = ", ".join(f"{k} {v}" for k, v in sorted(self.crashes_by_status.items()))
        out = [
            f"files: {self.files_seen} seen, {self.files_skipped} unchanged since the last ingest",
            f"hosts: {self.hosts}; exposure intervals: {self.exposure_added} added, "
            f"{self.exposure_duplicates} already stored; telemetry events: {self.events_added} added",
            (f"crashes: {self.crashes_added} added" + (f" ({status})" if status else "")
             + f", {self.crashes_existing} already stored"
             + (f", {self.crashes_paired} joined to the stored crash of the same JVM process "
                "(hs_err log + core)" if self.crashes_paired else "")),
            f"problems: {self.rejections.summary()}",
        ]
        return out + [f"note: {n}" for n in self.notes]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _abs(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(path))


def _unchanged(store: Store, path: Path) -> tuple[bool, os.stat_result]:
    st = path.stat()
    entry = store.ledger_entry(str(path))
    return (entry is not None and entry.size == st.st_size
            and entry.mtime_ns == st.st_mtime_ns), st


# --------------------------------------------------------------------------
# hosts, exposure, telemetry


def _ingest_table(
    store: Store, path: Path, kind: str, summary: IngestSummary,
    load: Callable[[Rejections], None],
) -> None:
    summary.files_seen += 1
    same, st = _unchanged(store, path)
    if same:
        summary.files_skipped += 1
        return
    rejections = Rejections()
    load(rejections)
    with store.transaction():
        store.add_rejections(rejections, replace_files=[str(path)])
        store.record_file(LedgerEntry(str(path), st.st_size, st.st_mtime_ns, sha256_file(path),
                                      kind, "done"))
    summary.rejections.extend(rejections)


def _ingest_fleet_tables(store: Store, fleet: Fleet, summary: IngestSummary) -> None:
    if fleet.hosts is not None:
        path = fleet.hosts

        def load_hosts(rej: Rejections) -> None:
            summary.hosts += store.add_hosts(read_hosts(path, rej))

        _ingest_table(store, path, "hosts", summary, load_hosts)
    known = store.host_ids() or None
    if known is None and (fleet.exposure or fleet.telemetry or fleet.crashes):
        summary.notes.append(f"{fleet.root}: no hosts known (no hosts.csv): host ids not checked")
    if fleet.exposure is not None:
        exposure_path = fleet.exposure

        def load_exposure(rej: Rejections) -> None:
            result = store.add_exposure(read_exposure(exposure_path, rej, known), str(exposure_path))
            summary.exposure_added += result.added
            summary.exposure_duplicates += result.duplicates
            for interval, s, e in result.conflicts:
                rej.add(exposure_path, interval.line, "overlap",
                        f"interval of host {interval.host_id!r} overlaps a stored one "
                        f"[{s.isoformat()}, {e.isoformat()})")

        _ingest_table(store, exposure_path, "exposure", summary, load_exposure)
    if fleet.telemetry is not None:
        telemetry_path = fleet.telemetry

        def load_events(rej: Rejections) -> None:
            summary.events_added += store.add_events(read_telemetry(telemetry_path, rej, known))

        _ingest_table(store, telemetry_path, "telemetry", summary, load_events)


# --------------------------------------------------------------------------
# kernel logs / mcelog / ras-mc-ctl output of one host (--telemetry LOG --host H)

EVENT_BATCH = 10_000
_LOOKBACK_LINES = 200


def _kernel_report_times(path: Path, line_numbers: set[int]) -> dict[int, tuple[datetime, str]]:
    """{oops line number: (UTC time, how it was found)} from the log's own
    wall-clock prefixes: the oops line's, else the latest one in the
    :data:`_LOOKBACK_LINES` lines before it."""
    from collections import deque

    from coreepi.parse.kernel.oops import _lines
    from coreepi.parse.telemetry.base import split_prefix
    from coreepi.parse.telemetry.logs import MAX_LINE_BYTES

    out: dict[int, tuple[datetime, str]] = {}
    last = max(line_numbers, default=0)
    window: deque[tuple[int, str]] = deque(maxlen=_LOOKBACK_LINES)
    for number, text in enumerate(_lines(path, MAX_LINE_BYTES), start=1):
        if number > last:
            break
        window.append((number, text))
        if number not in line_numbers:
            continue
        for n, raw in reversed(window):
            try:
                ts = split_prefix(n, raw).ts
            except Exception:  # noqa: BLE001 - a bad prefix is no time
                ts = None
            if ts is not None:
                how = "the oops line's time" if n == number else f"the time of log line {n}"
                out[number] = (ts, how)
                break
    return out


def _report_line(report: CrashReport) -> int:
    """The 1-based line of the log where ``report`` starts; 0 when unknown."""
    artifact = report.artifact
    return (artifact.line or 0) if artifact is not None else 0


def _ingest_telemetry_log(store: Store, path: Path, host: str, summary: IngestSummary,
                          known: set[str] | None) -> None:
    """Hardware events (idempotent by event_id) and kernel crashes of host
    ``host`` from one log; the ledger key is the path and the host."""
    from coreepi.analyze import analyze
    from coreepi.parse.kernel.oops import iter_kernel_log
    from coreepi.parse.telemetry.logs import parse_telemetry

    summary.files_seen += 1
    key = f"{path} (telemetry of host {host})"
    st = path.stat()
    entry = store.ledger_entry(key)
    if entry is not None and entry.size == st.st_size and entry.mtime_ns == st.st_mtime_ns:
        summary.files_skipped += 1
        return
    rejections = Rejections()
    if known is not None and host not in known:
        rejections.add(path, None, "unknown-host",
                       f"unknown host_id {host!r} (not in hosts); log not ingested")
        store.add_rejections(rejections, replace_files=[str(path)])
        summary.rejections.extend(rejections)
        return
    batch: list[TelemetryEvent] = []
    events = no_clock = 0
    for event in parse_telemetry(path, host_id=host, name=str(path)):
        events += 1
        no_clock += event.ts is None
        batch.append(event)
        if len(batch) >= EVENT_BATCH:
            summary.events_added += store.add_events(batch)
            batch = []
    summary.events_added += store.add_events(batch)
    if no_clock:
        summary.notes.append(
            f"{path}: {no_clock} of {events} events have only seconds since boot (no wall-clock "
            "time): stored, but not joined to crashes")
    reports = [analyze(r) for r in iter_kernel_log(path, name=str(path))]
    times = _kernel_report_times(path, {_report_line(r) for r in reports}) if reports else {}
    mtime = datetime.fromtimestamp(st.st_mtime, tz=UTC)
    records = []
    for report in reports:
        number = _report_line(report)
        report.host_id = host
        report.crash_id = stable_crash_id("kernel-log", host, report.crash_id)
        if number in times:
            report.captured_at, how = times[number]
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
        records.append(CrashRecord(report, {}, CoreStatus.NOT_STORED, None, str(path)))
    with store.transaction():
        added = store.add_crashes(records)
        store.add_rejections(rejections, replace_files=[str(path)])
        store.record_file(LedgerEntry(key, st.st_size, st.st_mtime_ns, sha256_file(path),
                                      "telemetry-log", "done"))
    summary.crashes_added += added
    summary.crashes_existing += len(records) - added
    if added:
        summary.crashes_by_status[str(CoreStatus.NOT_STORED)] += added
    summary.rejections.extend(rejections)


# --------------------------------------------------------------------------
# crashes


@dataclass
class _WorkerResult:
    ok: bool
    reports: list[CrashReport] = field(default_factory=list)
    category: str = ""
    error: str = ""


@dataclass
class _CoreJob:
    item: CrashFile
    sidecar: Sidecar
    stat: os.stat_result
    sha256: str = ""
    blob_key: str | None = None
    duplicate: bool = False
    result: _WorkerResult | None = None


class _Runner:
    """Runs ``python -m coreepi.ingest.worker`` children; tracks them so an
    interrupted ingest kills exactly the children it started."""

    def __init__(self, timeout: float, memory_limit_mb: int | None, debug_dirs: Sequence[Path]):
        self.timeout = timeout
        self.memory_limit_mb = memory_limit_mb
        self.debug_dirs = list(debug_dirs)
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def run(self, artifact: Path) -> _WorkerResult:
        argv = [sys.executable, "-m", "coreepi.ingest.worker", "--artifact", str(artifact),
                "--cpu-seconds", str(max(1, int(self.timeout) + 1))]
        if self.memory_limit_mb:
            argv += ["--memory-limit-mb", str(self.memory_limit_mb)]
        for d in self.debug_dirs:
            argv += ["--debug-dir", str(d)]
        # The worker decompresses cores into its TMPDIR; a worker killed for
        # its time or memory limit cannot clean up, so the parent owns the dir.
        with tempfile.TemporaryDirectory(prefix="coreepi-ingest-") as tmp:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    env={**os.environ, "TMPDIR": tmp})
            with self._lock:
                self._procs.add(proc)
            try:
                try:
                    out, err = proc.communicate(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
                    return _WorkerResult(
                        False, category="worker-timeout",
                        error=f"analysis took longer than {self.timeout:g} s; stopped")
            finally:
                with self._lock:
                    self._procs.discard(proc)
        return self._decode(proc.returncode, out, err)

    def _decode(self, rc: int, out: bytes, err: bytes) -> _WorkerResult:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        if rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
            why = "memory or CPU limit" if -rc in (signal.SIGKILL, signal.SIGXCPU) else "a bug"
            return _WorkerResult(False, category="worker-crashed",
                                 error=f"analysis process died of {name} ({why}?) {tail[0]}".strip())
        try:
            obj = json.loads(out)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if "MemoryError" in err.decode("utf-8", "replace"):
                return _WorkerResult(False, category="memory-limit",
                                     error=f"analysis exceeded the memory limit "
                                     f"({self.memory_limit_mb} MiB)")
            return _WorkerResult(False, category="worker-crashed",
                                 error=f"analysis process exited {rc} without a result: {tail[0]}")
        if not obj.get("ok"):
            return _WorkerResult(False, category=obj.get("category", "analysis-error"),
                                 error=obj.get("error", "unknown error"))
        try:
            reports = [CrashReport.model_validate(r) for r in obj["reports"]]
        except ValidationError as exc:
            return _WorkerResult(False, category="analysis-error", error=f"bad report: {exc}")
        return _WorkerResult(True, reports)

    def kill_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            try:
                proc.kill()  # by pid: only children this runner started
            except ProcessLookupError:
                pass


def _placeholder_report(
    sidecar: Sidecar, sha256: str, reason: str, blob_key: str | None, size: int | None
) -> CrashReport:
    """The report of a crash known only from its sidecar (core missing or unreadable)."""
    try:
        source = Source(sidecar.source) if sidecar.source else Source.ELF_CORE
    except ValueError:
        source = Source.ELF_CORE
    return CrashReport(
        crash_id=stable_crash_id("sidecar-only", sidecar.host_id,
                                 sidecar.captured_at.isoformat(), sha256),
        captured_at=sidecar.captured_at,
        host_id=sidecar.host_id,
        source=source,
        core=CoreInfo(stored=blob_key is not None, size_bytes=size, sha256=sha256,
                      blob_key=blob_key, dropped_reason=reason),
        analysis=AnalysisInfo(analyzer_version=__version__, warnings=[reason]),
    )


class _CrashIngest:
    def __init__(self, store: Store, summary: IngestSummary, known: set[str] | None,
                 observer: IngestObserver | None, store_cores: bool) -> None:
        self.store = store
        self.summary = summary
        self.known = known
        self.observer = observer
        self.store_cores = store_cores
        self._batch: list[tuple[list[CrashRecord], Rejections, list[str], LedgerEntry | None,
                                str, str]] = []

    # -- committing

    def _commit(self, records: list[CrashRecord], rejections: Rejections, replace: list[str],
                ledger: LedgerEntry | None, updates: Sequence[CrashRecord] = ()) -> None:
        with self.store.transaction():
            added = self.store.add_crashes(records)
            for record in updates:
                self.store.update_crash(record)
            self.summary.events_added += self.store.add_events(
                _sigbus_events([*records, *updates]))
            self.store.add_rejections(rejections, replace_files=replace)
            if ledger is not None:
                self.store.record_file(ledger)
        self._count(records, added, rejections)

    def _count(self, records: list[CrashRecord], added: int, rejections: Rejections) -> None:
        self.summary.crashes_added += added
        self.summary.crashes_existing += len(records) - added
        if added == len(records):
            self.summary.crashes_by_status.update(str(r.core_status) for r in records)
        elif added:
            self.summary.crashes_by_status["(mixed)"] += added
        self.summary.rejections.extend(rejections)

    def _done(self, path: Path, outcome: str) -> None:
        if self.observer is not None:
            self.observer.advance(str(path), outcome)

    def flush(self) -> None:
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        # one transaction and one statement per table for the whole batch
        # (a commit and a statement per file cost ~10-25 ms each)
        records = [r for recs, *_ in batch for r in recs]
        with self.store.transaction():
            new = self.store.add_crashes_new_ids(records)
            self.summary.events_added += self.store.add_events(_sigbus_events(records))
            self.store.add_rejections([r for _, rej, *_ in batch for r in rej],
                                      replace_files=[f for _, _, rep, *_ in batch for f in rep])
            self.store.record_files(ledger for _, _, _, ledger, *_ in batch if ledger is not None)
        for recs, rejections, _, _, path, outcome in batch:
            added = 0
            for rec in recs:  # a crash id twice in the batch: the first one is new
                if rec.report.crash_id in new:
                    new.discard(rec.report.crash_id)
                    added += 1
            self._count(recs, added, rejections)
            self._done(Path(path), outcome)

    def _queue(self, records: list[CrashRecord], rejections: Rejections, replace: list[str],
               ledger: LedgerEntry | None, path: Path, outcome: str) -> None:
        self._batch.append((records, rejections, replace, ledger, str(path), outcome))
        if len(self._batch) >= REPORT_BATCH:
            self.flush()

    # -- checks

    def _sidecar(self, item: CrashFile, rejections: Rejections) -> Sidecar | None:
        if item.sidecar is None:
            names = " or ".join(p.name for p in sidecar_candidates(item.path))
            rejections.add(item.path, None, "no-sidecar",
                           f"no sidecar ({names}) giving host_id and captured_at; not ingested")
            return None
        try:
            sidecar = read_sidecar(item.sidecar)
        except SidecarError as exc:
            rejections.add(item.sidecar, exc.line, exc.category, f"{exc}; crash not ingested")
            return None
        return self._known_host(sidecar, item.sidecar, rejections)

    def _known_host(self, sidecar: Sidecar, path: Path, rejections: Rejections) -> Sidecar | None:
        if self.known is not None and sidecar.host_id not in self.known:
            rejections.add(path, None, "unknown-host",
                           f"unknown host_id {sidecar.host_id!r} (not in hosts); crash not ingested")
            return None
        return sidecar

    # -- ready-made JSON: a CrashReport, or the sidecar of a crash without core

    def json_file(self, item: CrashFile, st: os.stat_result) -> None:
        path = item.path
        rejections = Rejections()
        replace = [str(path)]
        try:
            raw = path.read_bytes()
        except OSError as exc:
            rejections.add(path, None, "unreadable-file", f"cannot read: {exc.strerror}")
            self._queue([], rejections, replace, None, path, "unreadable")
            return
        sha = _sha256_bytes(raw)
        ledger = LedgerEntry(str(path), st.st_size, st.st_mtime_ns, sha, "crash-json", "done")
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            line = exc.lineno if isinstance(exc, json.JSONDecodeError) else 1
            msg = (exc.msg if isinstance(exc, json.JSONDecodeError)
                   else "nested too deeply" if isinstance(exc, RecursionError) else "not UTF-8")
            rejections.add(path, line, "not-json", f"not JSON: {msg}; not ingested")
            self._queue([], rejections, replace, None, path, "rejected")
            return
        if isinstance(obj, dict) and "crash_id" in obj and "analysis" in obj:
            record = self._report_record(path, obj, rejections)
            records = [record] if record is not None else []
            self._queue(records, rejections, replace, ledger if records else None, path,
                        "report" if records else "rejected")
            return
        try:
            sidecar = sidecar_from_object(path, obj)
        except SidecarError as exc:
            rejections.add(path, exc.line, exc.category,
                           f"neither a CrashReport nor a usable sidecar: {exc}; not ingested")
            self._queue([], rejections, replace, None, path, "rejected")
            return
        if self._known_host(sidecar, path, rejections) is None:
            self._queue([], rejections, replace, None, path, "rejected")
            return
        reason = sidecar.core_dropped_reason or "no core file beside the sidecar"
        report = _placeholder_report(sidecar, sha, f"core missing: {reason}", None, None)
        rejections.add(path, None, "core-missing", f"core missing ({reason}); crash counted",
                       action="kept")
        record = CrashRecord(report, sidecar.attributes, CoreStatus.MISSING, reason, str(path))
        self._queue([record], rejections, replace, ledger, path, "core missing")

    def _report_record(self, path: Path, obj: dict[str, Any],
                       rejections: Rejections) -> CrashRecord | None:
        try:
            report = CrashReport.model_validate(obj)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            rejections.add(path, None, "bad-report",
                           f"not a valid CrashReport: {where}: {first['msg']}; not ingested")
            return None
        if not report.host_id:
            rejections.add(path, None, "missing-value", "CrashReport has no host_id; not ingested")
            return None
        if report.captured_at is None:
            rejections.add(path, None, "missing-value",
                           "CrashReport has no captured_at; not ingested")
            return None
        if self.known is not None and report.host_id not in self.known:
            rejections.add(path, None, "unknown-host",
                           f"unknown host_id {report.host_id!r} (not in hosts); not ingested")
            return None
        status = CoreStatus.STORED if report.core.stored else CoreStatus.NOT_STORED
        return CrashRecord(report, {}, status, report.core.dropped_reason, str(path))

    # -- artifacts (cores, kernel logs): prepared here, analysed in a worker

    def prepare(self, item: CrashFile, st: os.stat_result) -> _CoreJob | None:
        rejections = Rejections()
        sidecar = self._sidecar(item, rejections)
        if sidecar is None:
            replace = [str(item.path)] + ([str(item.sidecar)] if item.sidecar else [])
            self._commit([], rejections, replace, None)
            self._done(item.path, "rejected")
            return None
        return _CoreJob(item, sidecar, st)

    def _pair(self, records: list[CrashRecord]) -> tuple[list[CrashRecord], list[CrashRecord]]:
        """(new rows, updates of stored crashes): an hs_err report and an ELF
        core report of the same JVM process become one crash
        (:mod:`coreepi.ingest.pairing`); pairable reports get the pair's crash id."""
        new: list[CrashRecord] = []
        updates: list[CrashRecord] = []
        for rec in records:
            report = rec.report
            if not pairable(report):
                new.append(rec)
                continue
            assert report.host_id is not None and report.captured_at is not None
            at = report.captured_at
            stored = self.store.crash_records(report.host_id, at - PAIR_WINDOW,
                                              at + PAIR_WINDOW + timedelta(seconds=1))
            sha = report.core.sha256
            same = next((s for s in stored if sha and sha in (
                s.report.core.sha256, s.report.attributes.get("hs_err_sha256"))), None)
            if same is not None:  # this artifact is already part of a stored crash
                report.crash_id = same.report.crash_id
                new.append(rec)
                continue
            matches = [s for s in stored if pairs_with(report, s.report)]
            if matches:
                match = min(matches, key=lambda s: abs(s.report.captured_at - at))  # type: ignore[operator]
                core, hs_err = (rec, match) if report.source is Source.ELF_CORE else (match, rec)
                merged = merge_core_and_hs_err(core.report, hs_err.report, match.report.crash_id)
                updates.append(CrashRecord(merged, {**hs_err.attributes, **core.attributes},
                                           core.core_status, core.core_reason,
                                           core.artifact or hs_err.artifact))
                continue
            pair_id = pair_crash_id(report)
            if pair_id is not None and self.store.get_report(pair_id) is None \
                    and pair_id not in {r.report.crash_id for r in new}:
                report.crash_id = pair_id
            new.append(rec)
        return new, updates

    def finish(self, job: _CoreJob) -> None:
        item, sidecar, result = job.item, job.sidecar, job.result
        ledger = LedgerEntry(str(item.path), job.stat.st_size, job.stat.st_mtime_ns, job.sha256,
                             "crash-artifact", "done")
        replace = [str(item.path)] + ([str(item.sidecar)] if item.sidecar else [])
        rejections = Rejections()
        if job.duplicate:
            self._commit([], rejections, [], ledger)
            self._done(item.path, "same content already ingested")
            return
        assert result is not None
        records: list[CrashRecord] = []
        if result.ok:
            for report in result.reports:
                report.host_id = sidecar.host_id
                if report.captured_at is None:
                    report.captured_at = sidecar.captured_at
                report.core.sha256 = job.sha256
                report.core.stored = job.blob_key is not None
                report.core.blob_key = job.blob_key
                status = CoreStatus.STORED if job.blob_key else CoreStatus.NOT_STORED
                records.append(CrashRecord(report, sidecar.attributes, status, None,
                                           str(item.path)))
            if not records:
                rejections.add(item.path, None, "no-crash-found",
                               "no crash found in this artifact")
            outcome = f"{len(records)} crash(es)"
            records, updates = self._pair(records)
            if updates:
                self.summary.crashes_paired += len(updates)
                outcome += f", {len(updates)} joined to its JVM crash"
            self._commit(records, rejections, replace, ledger, updates)
            self._done(item.path, outcome)
            return
        else:
            reason = f"{result.category}: {result.error}"
            report = _placeholder_report(sidecar, job.sha256, f"core unreadable: {reason}",
                                         job.blob_key, job.stat.st_size)
            records.append(CrashRecord(report, sidecar.attributes, CoreStatus.UNREADABLE, reason,
                                       str(item.path)))
            rejections.add(item.path, None, result.category,
                           f"{result.error}; crash counted with core_status unreadable",
                           action="kept")
            outcome = f"unreadable ({result.category})"
        self._commit(records, rejections, replace, ledger)
        self._done(item.path, outcome)


def _sigbus_events(records: Iterable[CrashRecord]) -> list[TelemetryEvent]:
    """The ``sigbus_mce`` event of each crash killed by SIGBUS BUS_MCEERR_*."""
    from coreepi.parse.telemetry.logs import event_from_crash

    return [ev for r in records if (ev := event_from_crash(r.report)) is not None]


def _sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _analyse_job(job: _CoreJob, store: Store, runner: _Runner, store_cores: bool) -> _CoreJob:
    """In a dispatcher thread: hash, skip known content, keep the blob, run the worker."""
    job.sha256 = sha256_file(job.item.path)
    if store.ledger_has_sha256(job.sha256):
        job.duplicate = True
        return job
    if store_cores:
        try:
            job.blob_key = store.put_blob(job.item.path, job.sha256)
        except (OSError, ValueError) as exc:
            job.result = _WorkerResult(False, category="blob-error", error=str(exc))
            return job
    job.result = runner.run(job.item.path)
    return job


# --------------------------------------------------------------------------
# the entry point


def _crash_items(paths: Sequence[Path], fleets: list[Fleet]) -> list[CrashFile]:
    items: list[CrashFile] = []
    for fleet in fleets:
        if fleet.crashes is not None:
            items.extend(scan_crashes(fleet.crashes))
    loose = [p for p in paths if p.is_file()]
    loose_set = set(loose)
    claimed: set[Path] = set()
    for p in loose:
        if p.suffix != ".json":
            sidecar = next((c for c in sidecar_candidates(p) if c.is_file()), None)
            if sidecar is not None:
                claimed.add(sidecar)
            items.append(CrashFile(p, "artifact", sidecar))
    items.extend(CrashFile(p, "json") for p in loose if p.suffix == ".json" and p not in claimed)
    for p in paths:
        if p.is_dir() and not is_fleet_dir(p):
            items.extend(scan_crashes(p))
    seen: set[Path] = set()
    out = []
    for it in items:  # a file given twice (as itself and inside a fleet) is read once
        if it.path not in seen and not (it.kind == "json" and it.path in claimed - loose_set):
            seen.add(it.path)
            out.append(it)
    return out


def ingest(
    paths: Iterable[str | os.PathLike[str]],
    store: Store,
    *,
    jobs: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
    symbol_dirs: Sequence[str | os.PathLike[str]] = (),
    store_cores: bool = True,
    observer: IngestObserver | None = None,
    telemetry_logs: Sequence[tuple[str | os.PathLike[str], str]] = (),
) -> IngestSummary:
    """Ingest fleet directories, directories of crash files, and crash files.

    ``jobs``: analysis processes at once (default: CPU count). ``timeout``:
    wall-time limit per artifact, seconds. ``memory_limit_mb``: address-space
    limit per analysis process, MiB (None: no limit). ``symbol_dirs``:
    directories in ``.build-id/xx/rest[.debug]`` layout searched besides each
    fleet's ``symbols/``. ``store_cores``: keep each core as a blob.
    ``telemetry_logs``: (log, host_id) pairs: a kernel log, mcelog or
    ``ras-mc-ctl --errors`` output of that host, read into telemetry events
    (idempotent by event id) and kernel crashes of that host.

    Raises :class:`coreepi.errors.InputError` when a path does not exist;
    every problem inside the inputs is a row of ``summary.rejections``.
    """
    from coreepi.errors import InputError

    started = time.monotonic()
    summary = IngestSummary()
    resolved = [_abs(p) for p in paths]
    logs = [(_abs(p), host) for p, host in telemetry_logs]
    for p in [*resolved, *(p for p, _ in logs)]:
        if not p.exists():
            raise InputError(str(p), "no such file or directory")
    for p, _ in logs:
        if not p.is_file():
            raise InputError(str(p), "not a file (--telemetry takes a log file)")
    fleets = [Fleet.open(p) for p in resolved if is_fleet_dir(p)]
    for fleet in fleets:
        _ingest_fleet_tables(store, fleet, summary)
    known = store.host_ids() or None
    for log, host in logs:
        _ingest_telemetry_log(store, log, host, summary, known)

    items = _crash_items(resolved, fleets)
    with tempfile.TemporaryDirectory(prefix="coreepi-symbols-") as tmp:
        index = BuildIdIndex.build(tmp, [f.symbols for f in fleets if f.symbols], symbol_dirs)
        if len(index):
            summary.notes.append(f"symbols: {len(index)} build-ids indexed")
        runner = _Runner(timeout, memory_limit_mb, index.debug_dirs)
        _run_crashes(items, store, summary, known, observer, store_cores, runner,
                     jobs or os.cpu_count() or 1)
    _check_exposure_coverage(store, summary)
    summary.duration_seconds = round(time.monotonic() - started, 3)
    return summary


def _run_crashes(items: list[CrashFile], store: Store, summary: IngestSummary,
                 known: set[str] | None, observer: IngestObserver | None, store_cores: bool,
                 runner: _Runner, jobs: int) -> None:
    crashes = _CrashIngest(store, summary, known, observer, store_cores)
    todo: list[tuple[CrashFile, os.stat_result]] = []
    ledger = store.ledger_entries([str(item.path) for item in items])
    unreadable = Rejections()
    for item in items:
        summary.files_seen += 1
        try:
            st = item.path.stat()
        except OSError as exc:  # a dangling symlink, a symlink loop, a file gone meanwhile
            unreadable.add(item.path, None, "unreadable-file",
                           f"cannot read: {exc.strerror}; not ingested")
            continue
        entry = ledger.get(str(item.path))
        if entry is not None and entry.size == st.st_size and entry.mtime_ns == st.st_mtime_ns:
            summary.files_skipped += 1
        else:
            todo.append((item, st))
    if unreadable:
        crashes._commit([], unreadable, [r.file for r in unreadable], None)
    if observer is not None:
        observer.start(len(todo))
    pending: set[Future[_CoreJob]] = set()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="coreepi-ingest")

    def drain(block: bool) -> None:
        nonlocal pending
        if not pending:
            return
        done, pending = wait(pending, timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for fut in done:
            crashes.finish(fut.result())

    try:
        for item, st in todo:
            if item.kind == "json":
                crashes.json_file(item, st)
            else:
                job = crashes.prepare(item, st)
                if job is not None:
                    while len(pending) >= 2 * jobs:
                        drain(block=True)
                    pending.add(pool.submit(_analyse_job, job, store, runner, store_cores))
            drain(block=False)
        crashes.flush()
        while pending:
            drain(block=True)
    except BaseException:
        for fut in pending:
            fut.cancel()
        runner.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _check_exposure_coverage(store: Store, summary: IngestSummary) -> None:
    """Note (not reject) every crash that no exposure interval of its host covers."""
    if not store.counts().get("exposure"):
        return
    outside = [
        Rejection(artifact or crash_id, None, "outside-exposure",
                  f"crash {crash_id} of host {host_id!r} at {at.isoformat()} is outside every "
                  "exposure interval of its host (counted, but adds to no rate)", "kept")
        for crash_id, host_id, at, artifact in store.crashes_outside_exposure()
    ]
    store.replace_rejections("outside-exposure", outside)
    summary.rejections.extend(Rejections(outside))
