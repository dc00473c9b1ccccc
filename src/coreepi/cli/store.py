"""``coreepi store …``: copy a store (to a server, back to a data dir, a
backup), and blob retention."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from coreepi.cli.options import BlobsOpt, DataDir, StoreOpt

if TYPE_CHECKING:
    from coreepi.store import DuckDBStore, PostgresStore

__all__ = ["store_app"]

store_app = typer.Typer(help="Manage stores: make an empty one, copy one into another (data dir "
                         "and PostgreSQL, either way; backups), blob retention.",
                        no_args_is_help=True)


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"coreepi: error: {message}\n")
    raise typer.Exit(2)


@store_app.command("init")
def store_init(
    location: Annotated[str | None, typer.Argument(
        metavar="[DATA_DIR|URL]", help="Where to make it (before --store and --data-dir).")
    ] = None,
    data_dir: DataDir = None,
    store: StoreOpt = None,
) -> None:
    """Make an empty store (a data dir, or the schema of a PostgreSQL --store),
    e.g. before the first `coreepi serve` or to create API tokens (`serve`,
    `token create` and every reading command refuse a path without a store).
    An existing store is kept as it is."""
    import os

    from coreepi.cli.common import data_dir_or_default, shown
    from coreepi.errors import StoreError
    from coreepi.store import STORE_ENV, open_store

    where = location or store or os.environ.get(STORE_ENV) or data_dir_or_default(data_dir)
    try:
        with open_store(where) as opened:
            crashes = opened.count_crashes()
    except StoreError as exc:
        _fail(str(exc))
    sys.stdout.write(f"store ready: {shown(where)} ({crashes:,} crashes)\n")


@store_app.command("copy")
def store_copy(
    source: Annotated[str, typer.Option("--from", metavar="DATA_DIR|URL",
                                        help="The store to copy: a data dir or postgresql://…")],
    target: Annotated[str, typer.Option("--to", metavar="DATA_DIR|URL",
                                        help="Where to: postgresql://… or a data dir (made "
                                        "if missing).")],
    blobs: BlobsOpt = None,
) -> None:
    """Copy a store into another, blobs included: a data dir into PostgreSQL
    (its cores into --blobs), PostgreSQL into a data dir (a backup or a test
    copy: the cores from --blobs into DATA_DIR/blobs), a data dir into another
    (a backup: stop `coreepi serve` first). Idempotent: run it again and only
    what is missing is added."""
    from coreepi.cli.common import existing_store
    from coreepi.errors import StoreError
    from coreepi.store.copy import copy_store
    from coreepi.store.postgres_store import is_postgres_url

    from_pg, to_pg = is_postgres_url(source), is_postgres_url(target)
    if from_pg and to_pg:
        _fail("--from and --to are both PostgreSQL: copy a database with pg_dump and "
              "pg_restore (docs/deploy.md, Backup and restore)")
    if blobs and not (from_pg or to_pg):
        _fail("--blobs names the PostgreSQL store's cores; a data dir keeps its own (DIR/blobs)")
    if not from_pg:
        existing_store(Path(source), "--from")
        if not to_pg and Path(source).resolve() == Path(target).resolve():
            _fail(f"--to {target}: the same data dir as --from")
    try:
        with _opened(source, blobs, read_only=True) as src, _opened(target, blobs) as dst, \
                _copy_status() as progress:
            result = copy_store(src, dst, progress=progress)
    except StoreError as exc:
        _fail(str(exc))
    sys.stdout.write(f"{result}\n")


@contextmanager
def _copy_status() -> Iterator[Callable[[str], None]]:
    """Where the copy's per-table progress goes: a transient status line on
    a terminal (a long copy shows it is alive), nowhere otherwise. Never kept
    on screen or in a log: the result line on stdout says the same counts once."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda _: None
        return
    with console.status("copying…") as status:
        yield lambda line: status.update(f"copying: {line}")


def _opened(location: str, blobs: str | None, *, read_only: bool = False
            ) -> DuckDBStore | PostgresStore:
    """The store at ``location``: PostgreSQL with its cores in ``blobs``
    (default: the per-user data dir's blobs/, as ``serve``), or a data dir
    with its own blobs/ (made when missing, unless ``read_only``)."""
    from coreepi.store import DuckDBStore, PostgresStore, default_data_dir, open_blobs
    from coreepi.store.duckdb_store import BLOB_DIR
    from coreepi.store.postgres_store import is_postgres_url

    if is_postgres_url(location):
        return PostgresStore(location, open_blobs(blobs, default_data_dir() / BLOB_DIR),
                             read_only=read_only)
    return DuckDBStore(Path(location), read_only=read_only)


@store_app.command("prune")
def store_prune(
    blobs: BlobsOpt = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", envvar="COREEPI_DATA_DIR",
                                                  help="Data dir whose blobs/ to prune "
                                                  "(without --blobs).")] = None,
    max_age_days: Annotated[float | None, typer.Option(
        "--max-age-days", min=0, help="Delete blobs written more than this many days ago.")] = None,
    max_total_gb: Annotated[float | None, typer.Option(
        "--max-total-gb", min=0, help="Then delete the oldest until the rest fit (GiB).")] = None,
) -> None:
    """Blob retention: delete cores by age, then the oldest beyond a total size.
    Crash rows stay (their reports are kept); only the cores go."""
    from coreepi.cli.common import data_dir_or_default, existing_store
    from coreepi.errors import StoreError
    from coreepi.store import open_blobs
    from coreepi.store.duckdb_store import BLOB_DIR

    if max_age_days is None and max_total_gb is None:
        _fail("give --max-age-days and/or --max-total-gb")
    # without --blobs the cores are the data dir's: a wrong path is refused, not pruned as empty
    home = data_dir_or_default(data_dir)
    default = (home if blobs else existing_store(home, "--data-dir")) / BLOB_DIR
    try:
        store = open_blobs(blobs, default)
        result = store.prune(None if max_age_days is None else timedelta(days=max_age_days),
                             None if max_total_gb is None else int(max_total_gb * (1 << 30)))
    except StoreError as exc:
        _fail(str(exc))
    sys.stdout.write(f"deleted {result.deleted} blobs ({result.deleted_for_age} for age, "
                     f"{result.deleted_for_size} for size; {result.deleted_bytes} bytes); "
                     f"kept {result.kept} ({result.kept_bytes} bytes)\n")
