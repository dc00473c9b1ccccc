"""``coreepi reanalyze``: the stored cores analysed again, on Dask distributed.

Data flow: the driver selects the crashes to redo (a stored core, in the
window and filters), Dask maps :func:`analyse_one` over them on its workers,
and the driver writes each result into the store as it arrives — the one
writer DuckDB wants, and the same code for PostgreSQL. Workers never open
the store: each reads cores from the blob store (a directory or S3) and runs
the analysis in the sandbox runner of ingest (a child process with memory,
CPU and wall limits: a hostile core costs one process, never the worker).

Warm workers: a Dask worker process keeps one :class:`WarmAnalyzer` (its
blob store client, its sandbox runner, its scratch folder) for the whole
batch; the runner forks each analysis child from a zygote that imported the
analysis once (:mod:`coreepi.reanalysis.warm`), and the children share the
worker's debug directories, where symbol files are found by build-id.

Idempotent: a result is written with the analyzer version and the rules
version (:func:`rules_version`) as a marker in ``analysis.warnings``; a crash
that already carries the current marker is not selected again, and writing
the same result twice leaves the same row.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from coreepi import __version__
from coreepi.errors import CoreepiError, InputError
from coreepi.model.report import CrashReport
from coreepi.reanalysis.regroup import RegroupHistory, regroup_history

__all__ = ["BatchResult", "Target", "WarmAnalyzer", "analyse_one", "marker", "reanalyze",
           "rules_version", "select_targets"]

WHERE_COLUMNS = ("host_id", "signature", "exe", "app_version", "source", "core_status")
"""Columns ``--where column=value`` may filter on."""


def rules_version() -> str:
    """12 hex digits of SHA-256 over the analysis rules (every file of
    ``coreepi/analyze``: phenotype and signature rules, siglists, case
    definitions) and the lists of ``$COREEPI_SIGLISTS``: changes whenever a
    rule does."""
    import coreepi.analyze
    from coreepi.analyze.signature.config import LIST_NAMES, env_list_dirs

    root = Path(coreepi.analyze.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".txt")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    # the operator's lists ($COREEPI_SIGLISTS) are rules too: a changed list
    # selects every crash again
    for i, directory in enumerate(env_list_dirs()):
        for name in LIST_NAMES:
            path = directory / f"{name}.txt"
            if path.is_file():
                digest.update(f"\0siglists[{i}]/{name}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def marker(rules: str) -> str:
    """The warning a re-analysed report carries: analyzer and rules versions."""
    return f"re-analysed by coreepi {__version__} (rules {rules})"


@dataclass(frozen=True)
class Target:
    """One crash to analyse again: its id, its core's blob key, its signature
    now, its artifact path as stored (kept)."""

    crash_id: str
    blob_key: str
    signature: str | None
    artifact: str | None = None


def _parse_where(where: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for item in where:
        column, sep, value = item.partition("=")
        if not sep or column not in WHERE_COLUMNS:
            raise InputError(f"--where {item!r}", f"expected COLUMN=VALUE with COLUMN one of "
                             f"{', '.join(WHERE_COLUMNS)}")
        out.append((column, value))
    return out


def select_targets(tables: Any, since: datetime | None, where: Sequence[str],
                   rules: str) -> list[Target]:
    """The crashes with a stored core, captured at or after ``since``, matching
    every ``column=value`` of ``where``, not yet re-analysed under ``rules``
    (``tables``: :class:`~coreepi.store.analytics.EngineTables`). Ordered by crash_id."""
    from coreepi.store.analytics import utc_literal

    c = tables.tables["crashes"]
    c = c.filter(c.blob_key.notnull(), ~c.report.contains(marker(rules)))
    if since is not None:
        c = c.filter(c.captured_at >= utc_literal(since))
    for column, value in _parse_where(where):
        c = c.filter(c[column] == value)
    rows = tables.backend.execute(c.select("crash_id", "blob_key", "signature", "artifact"))
    rows = rows.sort_values("crash_id", kind="stable")
    return [Target(r.crash_id, r.blob_key, _text(r.signature), _text(r.artifact))
            for r in rows.itertuples(index=False)]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None  # NaN/None: missing


@dataclass(frozen=True)
class Settings:
    """What a worker needs to analyse (picklable: sent once per task, tiny)."""

    blobs: str
    timeout_seconds: float = 300.0
    memory_limit_mb: int = 4096
    symbol_dirs: tuple[str, ...] = ()
    warm: bool = True
    """Fork each analysis from a pre-imported zygote (:mod:`.warm`); False:
    a fresh Python per core, as ingest does."""
    siglists: tuple[str, ...] = ()
    """The operator's signature-list directories (``--siglists``), as the
    worker's machine sees them."""


class WarmAnalyzer:
    """Per worker process: the blob store client and the sandbox runner, kept
    across cores. :meth:`analyse` returns (crash_id, report JSON or None, error)."""

    def __init__(self, settings: Settings) -> None:
        from coreepi.ingest.sandbox import Sandbox, SandboxLimits
        from coreepi.reanalysis.warm import WarmLauncher
        from coreepi.store import open_blobs

        self.settings = settings
        if settings.siglists:
            # a worker of a remote scheduler did not inherit the driver's
            # environment; every analysis child reads the lists from it
            from coreepi.analyze.signature.config import SIGLISTS_ENV

            os.environ[SIGLISTS_ENV] = os.pathsep.join(settings.siglists)
        self.blobs = open_blobs(settings.blobs, Path(settings.blobs))
        self.launcher = WarmLauncher() if settings.warm else None
        self.runner = Sandbox(SandboxLimits(settings.timeout_seconds, settings.memory_limit_mb,
                                            [Path(d) for d in settings.symbol_dirs]),
                              launcher=self.launcher)

    def analyse(self, target: Target) -> tuple[str, str | None, str | None]:
        # the blob as stored (plain or compressed): the sandboxed child sniffs
        # and decompresses it under its own limits
        with tempfile.TemporaryDirectory(prefix="coreepi-reanalyze-") as tmp:
            core = Path(tmp) / "core"
            try:
                with open(core, "wb") as fh:
                    self.blobs.write_to(target.blob_key, fh)
            except KeyError:  # pruned, or kept in another blob store: named, the others go on
                from coreepi.store.blobstate import absent_blob

                _, why = absent_blob(self.blobs, target.blob_key)
                return target.crash_id, None, f"core (blob {target.blob_key}) {why}"
            except (OSError, CoreepiError) as exc:
                return target.crash_id, None, f"blob {target.blob_key}: {exc}"
            result = self.runner.run(core)
        if not result.ok:
            return target.crash_id, None, f"{result.category}: {result.error}"
        if not result.reports:
            return target.crash_id, None, "no crash found in the core"
        return target.crash_id, result.reports[0].model_dump_json(), None


_WARM: dict[Settings, WarmAnalyzer] = {}


def analyse_one(target: Target, settings: Settings) -> tuple[str, str | None, str | None]:
    """A Dask task: analyse ``target`` with this process's warm analyzer."""
    analyzer = _WARM.get(settings)
    if analyzer is None:
        analyzer = _WARM[settings] = WarmAnalyzer(settings)
    return analyzer.analyse(target)


@dataclass
class BatchResult:
    """What a batch did: analysed and written, failed (crash_id: reason), the
    regrouping (also kept in the store: ``Store.group_lineage``)."""

    written: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    history: RegroupHistory = field(default_factory=RegroupHistory)
    seconds: float = 0.0
    """Wall time of the whole batch, seconds (``startup_seconds`` included)."""
    startup_seconds: float = 0.0
    """Wall time to start the local cluster and connect to it, seconds."""
    run_id: str | None = None
    """The run's key in the store's regroup history (None: nothing was written)."""


WRITE_BATCH = 32
"""Results written per store transaction (one commit per crash cost the
driver more CPU than the rest of its work; an interrupted batch loses at most
this many results, which the next run selects again)."""


def _write(store: Any, done: list[tuple[Target, str]], rules: str) -> list[str | None]:
    """Merge each new analysis into its stored crash, all in one transaction;
    returns their new signatures, in order."""
    from coreepi.ingest.intake import merge_analysis
    from coreepi.store import CrashRecord
    from coreepi.store.records import CoreStatus

    stored = store.get_reports([t.crash_id for t, _ in done])
    note = marker(rules)
    news: list[str | None] = []
    with store.transaction():
        for target, report_json in done:
            merged = merge_analysis(stored[target.crash_id],
                                    CrashReport.model_validate_json(report_json))
            merged.analysis.analyzer_version = __version__
            merged.analysis.warnings = [w for w in merged.analysis.warnings
                                        if not w.startswith("re-analysed by coreepi")] + [note]
            store.update_crash(CrashRecord(merged, dict(merged.attributes), CoreStatus.STORED,
                                           None, target.artifact))
            news.append(merged.signature.signature if merged.signature else None)
    return news


def _flush(store: Any, done: list[tuple[Target, str]],
           rules: str) -> list[tuple[str, str | None, str | None]]:
    """Write ``done`` (then empty it); returns its (crash_id, old, new signature) triples."""
    if not done:
        return []
    news = _write(store, done, rules)
    triples = [(t.crash_id, t.signature, new) for (t, _), new in zip(done, news, strict=True)]
    done.clear()
    return triples


def reanalyze(store: Any, targets: Iterable[Target], settings: Settings, *,
              scheduler: str | None = None, workers: int = 2,
              progress: Callable[[str, str | None], None] | None = None) -> BatchResult:
    """Analyse ``targets`` again on Dask (``scheduler``: a ``tcp://`` address,
    else a LocalCluster of ``workers`` single-threaded processes) and write
    each result into ``store`` as it arrives. Returns :class:`BatchResult`."""
    import time

    from dask.distributed import Client, LocalCluster, as_completed

    rules = rules_version()
    todo = {t.crash_id: t for t in targets}
    result = BatchResult()
    triples = []
    t0 = time.perf_counter()
    # the scheduler's HTTP server starts whatever dashboard_address says (None
    # means the default 0.0.0.0:8787, with a warning when that is taken):
    # loopback, any free port
    cluster = None if scheduler else LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True,
        dashboard_address="127.0.0.1:0", host="127.0.0.1", silence_logs=40)
    try:
        client_cm = Client(scheduler or cluster, timeout="20s")
    except (OSError, ValueError, TimeoutError) as exc:  # a bad address, nobody listening
        if cluster is not None:
            _close_local(cluster)
        raise InputError(f"--scheduler {scheduler}", f"cannot connect ({exc})") from None
    with client_cm as client:
        result.startup_seconds = time.perf_counter() - t0
        futures = client.map(analyse_one, list(todo.values()), settings=settings, pure=False)
        done: list[tuple[Target, str]] = []
        for _, (crash_id, report_json, error) in as_completed(futures, with_results=True):
            if report_json is None:
                result.failed[crash_id] = error or "unknown error"
            else:
                done.append((todo[crash_id], report_json))
            if len(done) >= WRITE_BATCH:
                triples += _flush(store, done, rules)
            if progress:
                progress(crash_id, error)
        triples += _flush(store, done, rules)
    result.written = len(triples)
    if cluster is not None:
        _close_local(cluster)
    result.history = regroup_history(triples)
    if triples:
        result.run_id = _record(store, result.history, rules)
    result.seconds = time.perf_counter() - t0
    return result


def _close_local(cluster: Any, wait_seconds: float = 30.0) -> None:
    """Close a LocalCluster workers first, then its scheduler (the client is
    closed before). ``cluster.close()`` alone stops the scheduler while the
    workers still send heartbeats, and a worker that loses that race logs
    "Failed to communicate with scheduler during heartbeat" at ERROR with a
    traceback on our stderr (in about 1 run in 4 on 2 CPUs) after a run
    that succeeded. The scheduler and nannies run in this process: what
    they log while closing (a comm closed under them) is silenced too."""
    import logging
    import time

    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        cluster.scale(0)  # each nanny stops its worker; they leave cluster.workers when gone
        deadline = time.monotonic() + wait_seconds
        while cluster.workers and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.close()
    finally:
        quiet.setLevel(level)


def _record(store: Any, history: RegroupHistory, rules: str) -> str:
    """Keep the run's regroup history in the store; returns its run id
    (its UTC start to the second, then 8 random hex digits)."""
    import uuid
    from datetime import UTC

    at = datetime.now(UTC)
    run_id = f"{at:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    store.record_regroup(history.store_rows(run_id, __version__, rules, at))
    return run_id
