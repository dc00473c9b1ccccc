"""Crash files into crash rows: checks, pairing, batching, commits.

:class:`CrashIngest` takes each crash file of an ingest once it is read or
analysed: a ready-made CrashReport ``.json`` (batched, one transaction per
:data:`REPORT_BATCH` files), the sidecar of a crash whose core is missing,
or an artifact analysed in the sandbox (:mod:`coreepi.ingest.sandbox`; one
transaction per artifact). Every crash is counted, also when its core is
missing or cannot be analysed (a crash row with ``core_status``
``missing``/``unreadable`` and the reason).

Crash ids: a crash with a sidecar takes the sidecar's id
(:meth:`Sidecar.crash_id`: host, capture time, attributes), whether its core
is there, missing or unreadable, so a crash counted with its core missing is
completed (its row replaced, not a second row added) when the core arrives
later, and a sidecar read without its core never adds a second crash. The
crashes of an artifact holding several (a kernel log) take the
artifact's own id (from its content: build-id, pid, tid, registers … — see
the parsers) hashed with the host and the capture time by
:func:`crash_id_on_host`, so that identical crashes on two hosts
(containers with the same pid, no ASLR) stay two, while the same artifact
ingested again keeps its id. Every crash of a kernel log takes that
content id, the first one too (:func:`_many`: the sidecar of a log gives the
time it was picked up, not a crash's), so two logs picked up with the same
host and time stay two sets of crashes; the sidecar's id is a kernel log's
first crash only when it completes a crash counted with its log missing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coreepi import __version__
from coreepi.errors import InputError
from coreepi.ingest.fleet import (
    BAD_HOST_ID,
    CrashFile,
    RepeatedKeyError,
    Sidecar,
    SidecarError,
    host_id_problem,
    read_sidecar,
    sidecar_candidates,
    sidecar_from_object,
    unique_keys,
)
from coreepi.ingest.followons import follow_on_note, follow_ons_outcome, split_follow_ons
from coreepi.ingest.pairing import PAIR_WINDOW, merge_core_and_hs_err, pair_crash_id, pairable, pairs_with
from coreepi.ingest.sandbox import SandboxResult
from coreepi.ingest.summary import IngestObserver, IngestSummary
from coreepi.model.events import TelemetryEvent
from coreepi.model.fleet import Rejections
from coreepi.model.limits import (
    MAX_CLOCK_SKEW_SECONDS,
    AttributeLimitError,
    TimeRangeError,
    check_attributes,
    check_time,
)
from coreepi.model.report import AnalysisInfo, CoreInfo, CrashReport, Source, stable_crash_id
from coreepi.store import CoreStatus, CrashRecord, LedgerEntry, Store

__all__ = ["REPORT_BATCH", "CoreJob", "CrashIngest", "crash_events", "crash_id_on_host"]

REPORT_BATCH = 1000
"""Ready-made reports committed per transaction."""


@dataclass
class CoreJob:
    """An artifact on its way through the sandbox: its file and sidecar,
    its stat, then its sha256, blob key and analysis result (``duplicate``:
    the same content was ingested before under another path)."""

    item: CrashFile
    sidecar: Sidecar
    stat: os.stat_result
    sha256: str = ""
    blob_key: str | None = None
    blob_new: bool = False
    """This job wrote the blob (it was not stored before): no crash row can name it yet."""
    duplicate: bool = False
    result: SandboxResult | None = None
    rejections: Rejections = field(default_factory=Rejections)
    """Problems found before the analysis (a sidecar's attributes over a limit)."""


def crash_id_on_host(report: CrashReport) -> str:
    """The crash id of an analysed artifact once its host and capture time
    are set: its own ``crash_id`` (which its content gives) hashed with
    ``host_id`` and ``captured_at`` (UTC, ISO-8601). 32 hex characters.
    Identical cores of two hosts get two ids; the same artifact with the
    same sidecar gets the same id again (re-ingests are idempotent)."""
    at = report.captured_at.isoformat() if report.captured_at is not None else None
    return stable_crash_id("on-host", report.crash_id, report.host_id, at)


def crash_events(records: Iterable[CrashRecord]) -> list[TelemetryEvent]:
    """The ``sigbus_mce`` telemetry event of each crash killed by SIGBUS
    BUS_MCEERR_* (see :func:`coreepi.parse.telemetry.logs.event_from_crash`)."""
    from coreepi.parse.telemetry.logs import event_from_crash

    return [ev for r in records if (ev := event_from_crash(r.report)) is not None]


def _placeholder_report(
    sidecar: Sidecar, sha256: str, reason: str, blob_key: str | None, size: int | None
) -> CrashReport:
    """The report of a crash known only from its sidecar (core missing or unreadable)."""
    try:
        source = Source(sidecar.source) if sidecar.source else Source.ELF_CORE
    except ValueError:
        source = Source.ELF_CORE
    return CrashReport(
        crash_id=sidecar.crash_id(),
        captured_at=sidecar.captured_at,
        host_id=sidecar.host_id,
        source=source,
        core=CoreInfo(stored=blob_key is not None, size_bytes=size, sha256=sha256,
                      blob_key=blob_key, dropped_reason=reason),
        analysis=AnalysisInfo(analyzer_version=__version__, warnings=[reason]),
    )


def _time_apart(apart: timedelta) -> str:
    """``apart`` (non-negative) for a person: "5.2 hours", "3.0 days",
    "1,467 days (4.0 years)" (a year of 365.25 days)."""
    hours = apart.total_seconds() / 3600
    if hours < 48:
        return f"{hours:,.1f} hours"
    days = hours / 24
    if days < 365.25:
        return f"{days:,.1f} days"
    return f"{days:,.0f} days ({days / 365.25:,.1f} years)"


def _sidecar_time(report: CrashReport, sidecar: Sidecar, path: Path,
                  rejections: Rejections) -> None:
    """Set the capture time of a report of an artifact with a sidecar. A
    report without a time of its own takes the sidecar's; an hs_err log's
    own ``time:`` line (one report, written by the dying JVM with the host's
    zone) gives way to the sidecar's, which is what the collector saw and what
    the host's exposure was written for. A kernel log's reports keep their own
    times (one log spans hours, the sidecar gives one time). Either way a
    difference over the clock-skew limit
    (:data:`~coreepi.model.limits.MAX_CLOCK_SKEW_SECONDS`) is kept as a
    ``time-mismatch`` note and a warning of the crash: the crash may then lie
    outside the exposure written for the sidecar's time."""
    own = report.captured_at
    keep_own = own is not None and report.source is not Source.HS_ERR
    if not keep_own:
        report.captured_at = sidecar.captured_at
    if own is None:
        return
    apart = abs(own - sidecar.captured_at)
    if apart > timedelta(seconds=MAX_CLOCK_SKEW_SECONDS):
        kept = "the log's own is kept" if keep_own else "the sidecar's is kept"
        note = (f"the log's own time {own.isoformat()} is {_time_apart(apart)} away from the "
                f"sidecar's captured_at {sidecar.captured_at.isoformat()}: {kept}")
        rejections.add(path, None, "time-mismatch", note, action="kept")
        report.analysis.warnings.append(note)


def _many(report: CrashReport) -> bool:
    """Whether ``report`` comes from an artifact that holds crashes of
    their own times (a kernel log): its sidecar gives the time the log was
    picked up (pstore and dmesg at boot, a batch rsync, all stamped alike),
    not a crash's, so the sidecar's id names none of its crashes and two
    such logs must not share it. A core or hs_err log is one crash: its
    sidecar's id is that crash's (the same crash re-sent, recompressed, is
    one crash)."""
    return report.source is Source.KERNEL_OOPS


def _kind_words(path: Path) -> str:
    """What the artifact at ``path`` is, in the words of a rejection line
    ("kernel log"), as :func:`coreepi.ingest.artifacts.sniff` tells it."""
    from coreepi.ingest.artifacts import ArtifactKind, sniff

    try:
        kind, _ = sniff(path)
    except (InputError, OSError):
        return "artifact"
    return {ArtifactKind.KERNEL_LOG: "kernel log", ArtifactKind.HS_ERR: "JVM hs_err log",
            ArtifactKind.ELF: "ELF core"}.get(kind, "artifact")


class CrashIngest:
    """Turns the crash files of one ingest into committed crash rows, counted
    into ``summary``. ``known``: the store's host ids (None: not checked);
    ``observer``: told of each file done; ``store_cores``: cores are kept as
    blobs. Call :meth:`flush` after the last file."""

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
                crash_events([*records, *updates]))
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

    def rejected(self, rejections: Rejections) -> None:
        """Commit rejections of files that could not even be read (each
        replaces the earlier rejections of its file)."""
        self._commit([], rejections, [r.file for r in rejections], None)

    def flush(self) -> None:
        """Commit the ready-made reports queued so far (one transaction)."""
        if not self._batch:
            return
        batch, self._batch = self._batch, []
        # one transaction and one statement per table for the whole batch
        # (a commit and a statement per file cost ~10-25 ms each)
        records = [r for recs, *_ in batch for r in recs]
        with self.store.transaction():
            new = self.store.add_crashes_new_ids(records)
            self.summary.events_added += self.store.add_events(crash_events(records))
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
        if sidecar.attributes_note is not None:
            rejections.add(path, None, "attribute-limit", sidecar.attributes_note, action="kept")
        return sidecar

    # -- ready-made JSON: a CrashReport, or the sidecar of a crash without core

    def json_file(self, item: CrashFile, st: os.stat_result) -> None:
        """Queue the crash of a ``.json`` crash file: a CrashReport, or the
        sidecar of a crash whose core is missing; anything else is rejected."""
        path = item.path
        rejections = Rejections()
        replace = [str(path)]
        try:
            raw = path.read_bytes()
        except OSError as exc:
            rejections.add(path, None, "unreadable-file", f"cannot read: {exc.strerror}")
            self._queue([], rejections, replace, None, path, "unreadable")
            return
        sha = hashlib.sha256(raw).hexdigest()
        ledger = LedgerEntry(str(path), st.st_size, st.st_mtime_ns, sha, "crash-json", "done")
        try:
            obj = json.loads(raw, object_pairs_hook=unique_keys)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError,
                RepeatedKeyError) as exc:
            line = exc.lineno if isinstance(exc, json.JSONDecodeError) else 1
            msg = (exc.msg if isinstance(exc, json.JSONDecodeError)
                   else str(exc) if isinstance(exc, RepeatedKeyError)
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
        if self._stored_status(sidecar) not in (None, CoreStatus.MISSING):
            # its core was ingested before (and is gone from beside it now):
            # the crash is stored with its core, nothing is missing
            self.summary.crashes_existing += 1
            self._queue([], rejections, replace, ledger, path, "crash already stored with its core")
            return
        rejections.add(path, None, "core-missing", f"core missing ({reason}); crash counted",
                       action="kept")
        record = CrashRecord(report, sidecar.attributes, CoreStatus.MISSING, reason, str(path))
        self._queue([record], rejections, replace, ledger, path, "core missing")

    def _stored(self, sidecar: Sidecar) -> CrashRecord | None:
        """The stored crash holding the id of ``sidecar`` (None: none). Looked
        up by id first: a kernel log's crash keeps its own time, not the sidecar's."""
        crash_id = sidecar.crash_id()
        report = self.store.get_report(crash_id)
        if report is None or report.captured_at is None or report.host_id is None:
            return None
        at = report.captured_at
        stored = self.store.crash_records(report.host_id, at, at + timedelta(seconds=1))
        return next((s for s in stored if s.report.crash_id == crash_id), None)

    def _stored_status(self, sidecar: Sidecar) -> CoreStatus | None:
        """The core status of the stored crash of ``sidecar`` (None: not stored)."""
        held = self._stored(sidecar)
        return held.core_status if held is not None else None

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
        problem = host_id_problem(report.host_id)
        if problem is not None:
            rejections.add(path, None, BAD_HOST_ID,
                           f"CrashReport host_id {report.host_id!r} {problem}; not ingested")
            return None
        if report.captured_at is None:
            rejections.add(path, None, "missing-value",
                           "CrashReport has no captured_at; not ingested")
            return None
        try:
            check_time(report.captured_at, "captured_at")
            check_attributes(report.attributes)
        except (TimeRangeError, AttributeLimitError) as exc:
            rejections.add(path, None, "bad-value", f"{exc}; not ingested")
            return None
        if self.known is not None and report.host_id not in self.known:
            rejections.add(path, None, "unknown-host",
                           f"unknown host_id {report.host_id!r} (not in hosts); not ingested")
            return None
        status = CoreStatus.STORED if report.core.stored else CoreStatus.NOT_STORED
        return CrashRecord(report, {}, status, report.core.dropped_reason, str(path))

    # -- artifacts (cores, kernel logs): prepared here, analysed in a worker

    def prepare(self, item: CrashFile, st: os.stat_result) -> CoreJob | None:
        """The job of an artifact to analyse, or None (committed as rejected)
        when its sidecar is missing, bad, or names an unknown host."""
        rejections = Rejections()
        sidecar = self._sidecar(item, rejections)
        if sidecar is None:
            replace = [str(item.path)] + ([str(item.sidecar)] if item.sidecar else [])
            self._commit([], rejections, replace, None)
            self._done(item.path, "rejected")
            return None
        return CoreJob(item, sidecar, st, rejections=rejections)

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

    def _drop_blob(self, job: CoreJob) -> None:
        """Delete the blob of an artifact that holds no crash, when this job
        wrote it: no crash row names it, so nothing would ever read or prune
        it by a crash. A blob stored before (a crash of the same content,
        another path) stays."""
        if job.blob_key is not None and job.blob_new:
            self.store.blobs.delete(job.blob_key)
            job.blob_key = None

    def finish(self, job: CoreJob) -> None:
        """Commit an analysed artifact: its crashes (host, time and id set,
        paired with a stored JVM crash when they belong together), or one
        crash with ``core_status`` unreadable and the reason."""
        item, sidecar, result = job.item, job.sidecar, job.result
        ledger = LedgerEntry(str(item.path), job.stat.st_size, job.stat.st_mtime_ns, job.sha256,
                             "crash-artifact", "done")
        replace = [str(item.path)] + ([str(item.sidecar)] if item.sidecar else [])
        rejections = job.rejections
        if job.duplicate:
            self._commit([], rejections, [], ledger)
            self._done(item.path, "same content already ingested")
            return
        assert result is not None
        records: list[CrashRecord] = []
        if result.ok:
            incidents = split_follow_ons(result.reports)
            follow_ons = sum(len(inc.follow_ons) for inc in incidents)
            for i, incident in enumerate(incidents):
                report = incident.report
                if incident.follow_ons:
                    report.analysis.warnings.append(follow_on_note(incident))
                report.host_id = sidecar.host_id
                _sidecar_time(report, sidecar, item.path, rejections)
                report.crash_id = (sidecar.crash_id() if i == 0 and not _many(report)
                                   else crash_id_on_host(report))
                report.core.sha256 = job.sha256
                report.core.stored = job.blob_key is not None
                report.core.blob_key = job.blob_key
                status = CoreStatus.STORED if job.blob_key else CoreStatus.NOT_STORED
                records.append(CrashRecord(report, sidecar.attributes, status, None,
                                           str(item.path)))
            if not records:
                rejections.add(item.path, None, "no-crash-found",
                               f"{_kind_words(item.path)}, no crash found; not ingested")
                self._drop_blob(job)
            outcome = f"{len(records)} crash(es)" if records else "no crash found"
            if follow_ons:
                self.summary.follow_ons += follow_ons
                outcome = follow_ons_outcome(len(result.reports), incidents)
            completed: list[CrashRecord] = []
            waiting = ((CoreStatus.MISSING,) if _many(records[0].report) else
                       (CoreStatus.MISSING, CoreStatus.UNREADABLE)) if records else ()
            if records and self._stored_status(sidecar) in waiting:
                # counted before with its core missing (or unreadable): this is that crash
                records[0].report.crash_id = sidecar.crash_id()
                completed, records = records[:1], records[1:]
                self.summary.crashes_completed += 1
                outcome += ", completing the crash counted without its core"
            records, updates = self._pair(records)
            updates = [*completed, *updates]
            if len(updates) > len(completed):
                self.summary.crashes_paired += len(updates) - len(completed)
                outcome += f", {len(updates) - len(completed)} joined to its JVM crash"
            self._commit(records, rejections, replace, ledger, updates)
            self._done(item.path, outcome)
            return
        reason = f"{result.category}: {result.error}"
        if result.retryable:
            # a resource limit says nothing against the input (as the queue
            # worker judges it): no rejection row and no ledger entry, so the
            # next ingest analyses the artifact again and completes the crash
            reason += "; not judged: the next ingest tries again"
            ledger = None
            self.summary.resource_limited.append(f"{item.path}: {result.error}")
        else:
            rejections.add(item.path, None, result.category,
                           f"{result.error}; crash counted with core_status unreadable",
                           action="kept")
        report = _placeholder_report(sidecar, job.sha256, f"core unreadable: {reason}",
                                     job.blob_key, job.stat.st_size)
        record = CrashRecord(report, sidecar.attributes, CoreStatus.UNREADABLE, reason,
                             str(item.path))
        if self._stored_status(sidecar) is CoreStatus.MISSING:  # the core arrived, unreadable
            self.summary.crashes_completed += 1
            self._commit([], rejections, replace, ledger, [record])
        else:
            self._commit([record], rejections, replace, ledger)
        self._done(item.path, f"unreadable ({result.category})")

