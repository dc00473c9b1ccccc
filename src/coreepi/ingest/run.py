"""Ingest fleet directories, host logs and crash files into a store: the entry point.

:func:`ingest` reads each fleet directory's hosts, exposure and telemetry
(:mod:`coreepi.ingest.tables`: streaming, bad rows rejected with file:line),
each host log given with ``--telemetry`` (:mod:`coreepi.ingest.hostlog`),
then every crash file: cores and kernel logs are analysed in parallel, one
sandboxed child process per artifact (:mod:`coreepi.ingest.sandbox`: memory
limit, CPU limit, killed at the wall-time limit), ready-made CrashReport
.json files are read in this process; :mod:`coreepi.ingest.crashes` turns
them into crash rows. Every crash is counted, also when its core is missing
or cannot be analysed. An analysis that hits a resource limit (the memory
limit: ``SandboxResult.retryable``) is tried once more when the rest is done;
a second time it is reported as a limit (``IngestSummary.resource_limited``),
not a rejected input, and left out of the ledger so the next ingest tries it.

Idempotent and interruptible: crashes are keyed by ``crash_id``, events by
``event_id``, intervals by ``(host_id, start)``; each analysed artifact is
committed (its crash rows, rejections and ledger row) in one transaction as
soon as its worker finishes, ready-made reports in batches. The ledger
(path, size, mtime_ns, sha256) lets a re-run skip files already ingested
without reading them. Killing ingest at any point and re-running it loses
nothing and duplicates nothing.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

from coreepi.ingest.boundary import NOT_REGULAR, irregular, refusal
from coreepi.ingest.buildid import BuildIdIndex
from coreepi.ingest.crashes import CoreJob, CrashIngest
from coreepi.ingest.fleet import (
    CrashFile,
    Fleet,
    host_id_problem,
    is_fleet_dir,
    pair_crash_files,
    scan_crashes,
    sidecar_candidates,
)
from coreepi.ingest.hostlog import ingest_host_log
from coreepi.ingest.sandbox import Sandbox, SandboxLimits, SandboxResult
from coreepi.ingest.scratch import scratch_dir
from coreepi.ingest.summary import IngestObserver, IngestSummary
from coreepi.ingest.tables import ingest_fleet_tables
from coreepi.model.fleet import Rejection, Rejections
from coreepi.store import Store, sha256_file

__all__ = ["DEFAULT_MEMORY_LIMIT_MB", "DEFAULT_TIMEOUT_SECONDS", "IngestObserver",
           "IngestSummary", "ingest"]

DEFAULT_TIMEOUT_SECONDS = 300.0
"""Wall-time limit of one artifact's analysis, seconds."""
DEFAULT_MEMORY_LIMIT_MB = 4096
"""Address-space limit of one analysis process, MiB."""


def _abs(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(path))


def _analyse_job(job: CoreJob, store: Store, runner: Sandbox, store_cores: bool) -> CoreJob:
    """In a dispatcher thread: hash, skip known content, keep the blob, run the worker."""
    job.sha256 = sha256_file(job.item.path)
    if store.ledger_has_sha256(job.sha256):
        job.duplicate = True
        return job
    if store_cores:
        try:
            job.blob_new = not store.blobs.has(job.sha256)
            job.blob_key = store.put_blob(job.item.path, job.sha256)
        except (OSError, ValueError) as exc:
            job.result = SandboxResult(False, category="blob-error", error=str(exc))
            return job
    job.result = runner.run(job.item.path)
    return job



def _with_artifacts(loose: list[Path]) -> list[Path]:
    """``loose`` files, each sidecar given without its artifact replaced by
    that artifact when it lies beside it (paired as in a fleet directory):
    the crash is the artifact's, not a crash whose core is missing."""
    listings: dict[Path, dict[Path, Path]] = {}  # directory -> {sidecar: its artifact}
    out: list[Path] = []
    for p in loose:
        if p.suffix == ".json" and p.parent not in listings:
            try:
                names = sorted(p.parent / n for n in os.listdir(p.parent))
            except OSError:
                names = []
            listings[p.parent] = {f.sidecar: f.path for f in pair_crash_files(names)
                                  if f.sidecar is not None}
        artifact = listings.get(p.parent, {}).get(p) if p.suffix == ".json" else None
        out.append(artifact if artifact is not None and artifact.is_file() else p)
    return list(dict.fromkeys(out))


def _crash_items(paths: Sequence[Path], fleets: list[Fleet]) -> list[CrashFile]:
    items: list[CrashFile] = []
    for fleet in fleets:
        if fleet.crashes is not None:
            items.extend(scan_crashes(fleet.crashes, fleet.root))
    loose = _with_artifacts([p for p in paths if p.is_file()])
    loose_set = set(loose)
    claimed: set[Path] = set()
    for p in loose:
        if p.suffix != ".json":
            sidecar = next((c for c in sidecar_candidates(p) if c.is_file()), None)
            if sidecar is not None:
                claimed.add(sidecar)
                why = refusal(sidecar, p.parent)  # a sidecar found, not named: stay beside it
                if why is not None:
                    items.append(CrashFile(sidecar, "refused", refused=why))
                    sidecar = None
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
        if irregular(p):
            raise InputError(str(p), NOT_REGULAR)
    for p, host in logs:
        if not p.is_file():
            raise InputError(str(p), "not a file (--telemetry takes a log file)")
        problem = host_id_problem(host)
        if problem is not None:
            raise InputError(f"--host {host!r}", f"a host id that {problem}")
    fleets = [Fleet.open(p) for p in resolved if is_fleet_dir(p)]
    for fleet in fleets:
        ingest_fleet_tables(store, fleet, summary)
    known = store.host_ids() or None
    for log, host in logs:
        ingest_host_log(store, log, host, summary, known)

    items = _crash_items(resolved, fleets)
    with tempfile.TemporaryDirectory(prefix="symbols-", dir=scratch_dir()) as tmp:
        index = BuildIdIndex.build(tmp, [f.symbols for f in fleets if f.symbols], symbol_dirs)
        if len(index):
            summary.notes.append(f"symbols: {len(index)} build-ids indexed")
        runner = Sandbox(SandboxLimits(timeout, memory_limit_mb, index.debug_dirs))
        _run_crashes(items, store, summary, known, observer, store_cores, runner,
                     jobs or os.cpu_count() or 1)
    _check_exposure_coverage(store, summary)
    summary.duration_seconds = round(time.monotonic() - started, 3)
    return summary


def _run_crashes(items: list[CrashFile], store: Store, summary: IngestSummary,
                 known: set[str] | None, observer: IngestObserver | None, store_cores: bool,
                 runner: Sandbox, jobs: int) -> None:
    crashes = CrashIngest(store, summary, known, observer, store_cores)
    todo: list[tuple[CrashFile, os.stat_result]] = []
    ledger = store.ledger_entries([str(item.path) for item in items])
    unreadable = Rejections()
    for item in items:
        summary.files_seen += 1
        if item.refused is not None:
            also = f"; its sidecar {item.sidecar.name} is not ingested" if item.sidecar else ""
            unreadable.add(item.path, None, "symlink", item.refused + also)
            continue
        try:
            st = item.path.stat()
        except OSError as exc:  # a dangling symlink, a symlink loop, a file gone meanwhile
            unreadable.add(item.path, None, "unreadable-file",
                           f"cannot read: {exc.strerror}; not ingested")
            continue
        if not stat.S_ISREG(st.st_mode):
            unreadable.add(item.path, None, "not-a-file", NOT_REGULAR)
            continue
        entry = ledger.get(str(item.path))
        if entry is not None and entry.size == st.st_size and entry.mtime_ns == st.st_mtime_ns:
            summary.files_skipped += 1
        else:
            todo.append((item, st))
    if unreadable:
        crashes.rejected(unreadable)
    if observer is not None:
        observer.start(len(todo))
    pending: set[Future[CoreJob]] = set()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="coreepi-ingest")
    limited: list[CoreJob] = []  # hit a resource limit: tried again once the rest is done

    def drain(block: bool) -> None:
        nonlocal pending
        if not pending:
            return
        done, pending = wait(pending, timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for fut in done:
            job = fut.result()
            if job.result is not None and job.result.retryable:
                limited.append(job)
            else:
                crashes.finish(job)

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
        # one at a time, nothing else running: the queue worker's retry after
        # a backoff; a second limit is filed by finish() as not judged
        for job in limited:
            job.result = runner.run(job.item.path)
            crashes.finish(job)
    except BaseException:
        for fut in pending:
            fut.cancel()
        runner.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)



def _check_exposure_coverage(store: Store, summary: IngestSummary) -> None:
    """Note (not reject) every crash that no exposure interval of its host
    covers, in the words of the rule of docs/epidemiology.md ("Exposure
    rules"), which ``report`` applies and states in its note."""
    if not store.counts().get("exposure"):
        return
    stored = store.rejections_frame()
    known = set(stored.loc[stored["category"] == "outside-exposure", "reason"])
    outside = [
        Rejection(artifact or crash_id, None, "outside-exposure",
                  f"crash {crash_id} of host {host_id!r} at {at.isoformat()} is outside every "
                  "exposure interval of its host (counted in the crash totals; left out of "
                  "the rates, the per-host tests and attribute ratios, see "
                  "docs/epidemiology.md)", "kept")
        for crash_id, host_id, at, artifact in store.crashes_outside_exposure()
    ]
    store.replace_rejections("outside-exposure", outside)
    # the store keeps every crash's note; this run's summary tells only the
    # ones it found (a crash ingested earlier was told then)
    summary.rejections.extend(Rejections([r for r in outside if r.reason not in known]))

