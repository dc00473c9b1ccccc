"""``coreepi worker``: analyse queued cores of a shared store, in the sandbox runner.

Each worker thread forks its analysis children from its own warm zygote
(:class:`coreepi.reanalysis.warm.WarmLauncher`, as ``coreepi reanalyze``
does): the imports are paid once per thread, not once per core, and each
core still runs in its own child with the sandbox's limits, so a core that
kills its analysis costs that child only. ``--cold`` starts a new Python
per core instead.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coreepi.cli.basics import use_siglists
from coreepi.cli.common import fail, store_target
from coreepi.cli.options import BlobsOpt, DataDir, SiglistsOpt, StoreOpt

if TYPE_CHECKING:
    from coreepi.serve.analysis import AnalysisWorker

__all__ = ["register", "worker"]


def worker(
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    data_dir: DataDir = None,
    threads: Annotated[int, typer.Option("--threads", "-j", min=1,
                                         help="Cores analysed at once by this process.")] = 1,
    analysis_timeout: Annotated[float, typer.Option(
        "--analysis-timeout", min=1, help="Wall-time limit of one analysis, seconds.")] = 300.0,
    memory_limit: Annotated[int, typer.Option(
        "--memory-limit", min=64, help="Memory limit of one analysis, MiB.")] = 4096,
    symbol_dir: Annotated[list[Path] | None, typer.Option(
        "--symbol-dir", help="Symbol directory (.build-id layout); repeatable.")] = None,
    tmp_dir: Annotated[Path | None, typer.Option(
        "--tmp-dir", help="Where cores are decompressed for analysis (default: the system's).")
    ] = None,
    stale_after: Annotated[float, typer.Option(
        "--stale-after", min=1, help="Seconds without a heartbeat before another worker "
        "takes a job over.")] = 60.0,
    once: Annotated[bool, typer.Option(
        "--once", help="Run the jobs queued now, then exit (batch mode, tests).")] = False,
    cold: Annotated[bool, typer.Option(
        "--cold", help="A new Python per core instead of a child forked from a "
        "pre-imported one (slower; for comparison).")] = False,
    siglists: SiglistsOpt = None,
) -> None:
    """Take analysis jobs from the store's queue (a PostgreSQL store shared with
    `coreepi serve --jobs 0` replicas) until stopped with SIGTERM or Ctrl-C."""
    from coreepi.errors import StoreError
    from coreepi.model.limits import LimitEnvError
    from coreepi.serve import ServeConfig
    from coreepi.serve.analysis import AnalysisWorker
    from coreepi.store import open_store

    use_siglists(siglists)
    try:
        config = ServeConfig(analysis_timeout_seconds=analysis_timeout,
                             analysis_memory_limit_mb=memory_limit,
                             symbol_dirs=tuple(symbol_dir or ()), analysis_jobs=threads)
    except LimitEnvError as exc:  # a COREEPI_* limit that is not a positive integer
        fail(exc.line())
    from coreepi.ingest.scratch import scratch_dir

    if tmp_dir is not None and not tmp_dir.is_dir():
        fail(f"--tmp-dir {tmp_dir}: no such directory")
    target = store_target(store, data_dir)
    scratch = scratch_dir(tmp_dir)  # removed at exit, swept by the next worker if killed
    from coreepi.reanalysis.warm import WarmLauncher

    # one zygote per thread: a WarmLauncher serves one child at a time
    launchers = [] if cold else [WarmLauncher() for _ in range(threads)]
    try:
        with open_store(target, blobs=blobs) as opened:
            workers = [AnalysisWorker(opened, config, scratch, stale_after=stale_after,
                                      launcher=launchers[i] if launchers else None)
                       for i in range(threads)]
            for launcher in launchers:
                launcher.start()  # imports while the store is read
            sys.stderr.write(f"coreepi: worker: {workers[0].runner.capabilities()}"
                             f"{'' if cold else '; forked from a warm zygote per thread'}\n")
            if once:
                ran = sum(_drain(w) for w in workers)
                counts = ", ".join(f"{state} {n}" for state, n in opened.job_counts().items())
                sys.stdout.write(f"ran {ran} jobs; {counts}\n")
                return
            _serve_forever(workers)
    except StoreError as exc:
        sys.stderr.write(f"coreepi: error: {exc}\n")
        raise typer.Exit(2) from None
    finally:
        for launcher in launchers:
            launcher.close()


def _drain(worker: AnalysisWorker) -> int:
    ran = 0
    while n := worker.run_once():
        ran += n
    return ran


def _serve_forever(workers: list[AnalysisWorker]) -> None:
    """Run each worker in a thread until SIGTERM/SIGINT; then stop taking jobs,
    kill the analyses still running (their jobs go to another worker)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threads = [threading.Thread(target=w.run, args=(stop,), name=f"worker-{i}")
               for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    sys.stderr.write(f"coreepi: worker: {len(threads)} thread(s) taking jobs\n")
    stop.wait()
    for w in workers:
        w.close()
    for t in threads:
        t.join(30)


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
