"""``coreepi reanalyze``: analyse the stored cores again (after a rule change) on Dask."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from coreepi.cli.basics import use_siglists
from coreepi.cli.common import DataDir, fail, parse_when, store_target
from coreepi.cli.options import BlobsOpt, SiglistsOpt, StoreOpt

__all__ = ["reanalyze", "register"]


def reanalyze(
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    data_dir: DataDir = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only crashes captured at or after this time (ISO-8601).")] = None,
    where: Annotated[list[str] | None, typer.Option(
        "--where", metavar="COLUMN=VALUE", help="Only crashes with this value (host_id, "
        "signature, exe, app_version, source, core_status); repeatable, all must hold.")] = None,
    scheduler: Annotated[str | None, typer.Option(
        "--scheduler", metavar="tcp://HOST:PORT",
        help="A Dask scheduler; default: a local cluster of --workers processes.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1,
                                         help="Local cluster size (processes).")] = 2,
    symbol_dir: Annotated[list[Path] | None, typer.Option(
        "--symbol-dir", help="Symbol directory (.build-id layout); repeatable.")] = None,
    analysis_timeout: Annotated[float, typer.Option(
        "--analysis-timeout", min=1, help="Wall-time limit of one analysis, seconds.")] = 300.0,
    cold: Annotated[bool, typer.Option(
        "--cold", help="A fresh Python per core, as ingest does (default: each analysis "
        "forked from a worker's pre-imported one; same sandbox limits).")] = False,
    history: Annotated[Path | None, typer.Option(
        "--history", help="Write the regroup history (old -> new signature, crashes) "
        "here as JSON.")] = None,
    siglists: SiglistsOpt = None,
) -> None:
    """Analyse every stored core again with today's analyzer and rules (and
    --siglists DIR's lists), write the results in place (idempotent: a crash
    already done under these rules is skipped), and print which groups split,
    merged or were renamed."""
    from coreepi.analyze.signature.config import SIGLISTS_ENV
    from coreepi.errors import InputError, StoreError
    from coreepi.ingest.sandbox import Sandbox, SandboxLimits
    from coreepi.reanalysis.batch import Settings, rules_version, select_targets
    from coreepi.reanalysis.batch import reanalyze as run
    from coreepi.store import open_store
    from coreepi.store.analytics import store_tables
    from coreepi.store.postgres_store import PostgresStore

    lo = parse_when(since, "--since")
    use_siglists(siglists)  # before rules_version(): the lists are part of the rules
    if history is not None and not history.parent.is_dir():  # checked before hours of work
        fail(f"--history {history}: no such directory {history.parent}")
    where_at = store_target(store, data_dir)
    try:
        with open_store(where_at, blobs=blobs) as opened:
            engine = "postgres" if isinstance(opened, PostgresStore) else "duckdb"
            tables = store_tables(opened, engine)
            try:
                targets = select_targets(tables, lo, where or [], rules_version())
            finally:
                tables.close()
            # workers open the blob store themselves: its URL, or the directory
            blob_root = blobs or str(opened.blobs.root)  # type: ignore[attr-defined]
            settings = Settings(blobs=blob_root, timeout_seconds=analysis_timeout,
                                symbol_dirs=tuple(str(d) for d in symbol_dir or ()),
                                warm=not cold, siglists=tuple(
                                    filter(None, [os.environ.get(SIGLISTS_ENV)])))
            if scheduler is None:  # the local cluster's children run on this machine
                limits = SandboxLimits(analysis_timeout, settings.memory_limit_mb)
                sys.stderr.write(f"coreepi: reanalyze: {Sandbox(limits).capabilities()}\n")
            result = run(opened, targets, settings, scheduler=scheduler, workers=workers)
    except (StoreError, InputError) as exc:
        fail(str(exc))
    for line in result.history.lines():
        sys.stdout.write(line + "\n")
    if result.run_id:
        sys.stdout.write(f"regroup history stored as run {result.run_id} (shown on the group "
                         "pages)\n")
    for crash_id, why in sorted(result.failed.items()):
        sys.stdout.write(f"failed: {crash_id}: {why}\n")
    busy = result.seconds - result.startup_seconds
    rate = (result.written + len(result.failed)) / busy if busy > 0 else 0.0
    sys.stdout.write(f"{result.written} written, {len(result.failed)} failed in "
                     f"{result.seconds:.1f} s ({rate:.2f} cores/s after a cluster start of "
                     f"{result.startup_seconds:.1f} s)\n")
    if history is not None:
        history.write_text(json.dumps(result.history.as_rows(), indent=1) + "\n")


def register(app: typer.Typer) -> None:
    app.command("reanalyze")(reanalyze)
