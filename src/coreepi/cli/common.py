"""What every ``coreepi`` command shares: the one-line error, the data-dir
option (:mod:`coreepi.cli.options`; one convention: ``--data-dir`` or
``$COREEPI_DATA_DIR``, else the per-user data dir), the server options (``--server URL``, token from
``$COREEPI_TOKEN`` or ``--token-file``) and ISO-8601 time options.

Kept free of heavy imports: every command imports this module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from coreepi.cli.basics import EXIT_INPUT_ERROR, fail, parse_when
from coreepi.cli.options import DataDir

__all__ = [
    "DATA_DIR_ENV",
    "EXIT_INPUT_ERROR",
    "DataDir",
    "Server",
    "TokenFile",
    "data_dir_or_default",
    "existing_store",
    "fail",
    "shown",
    "store_target",
    "store_undo",
    "parse_when",
    "read_token",
    "window",
]

DATA_DIR_ENV = "COREEPI_DATA_DIR"
TOKEN_ENV = "COREEPI_TOKEN"

Server = Annotated[
    str | None,
    typer.Option("--server", envvar="COREEPI_SERVER", metavar="URL", show_envvar=True,
                 help="Read from a `coreepi serve` at URL instead of the local store "
                 f"(token: ${TOKEN_ENV} or --token-file)."),
]
TokenFile = Annotated[
    Path | None,
    typer.Option("--token-file", metavar="FILE",
                 help=f"File whose first line is the bearer token (default: ${TOKEN_ENV})."),
]


def data_dir_or_default(data_dir: Path | None) -> Path:
    """The data dir given, else the default one (:func:`coreepi.store.default_data_dir`)."""
    if data_dir is not None:
        return data_dir
    from coreepi.store import default_data_dir

    return default_data_dir()


def existing_store(data_dir: Path, option: str = "") -> Path:
    """``data_dir`` when it holds an embedded store; else exit 2 with one
    line naming it (``option``: the option it came from, e.g. ``--from``)
    and the command that makes one. A command pointed at a wrong path must
    not create a store there: opening is not creating (only ``ingest``,
    ``store init`` and ``store copy --to`` create)."""
    import shlex

    from coreepi.store.duckdb_store import DB_NAME

    if not (data_dir / DB_NAME).is_file():
        named = f"{option} {data_dir}" if option else str(data_dir)
        fail(f"{named}: no coreepi store here (create one with "
             f"`coreepi store init {shlex.quote(str(data_dir))}`)")
    return data_dir


def store_undo(target: str | Path | None) -> Callable[[], None]:
    """Call before a command that may create the store at ``target`` (a data
    dir, None: the default one; a database URL is left alone); the function
    it returns removes again what the command created there (the folders it
    made, or the files it added to a folder without a store) when no store
    existed before: a failed command must not leave a store behind, which
    later readers would take for a real, empty one."""
    import shutil

    from coreepi.store.duckdb_store import DB_NAME
    from coreepi.store.postgres_store import is_postgres_url

    from coreepi.store import STORE_ENV

    target = target or os.environ.get(STORE_ENV)  # as open_store reads it
    if target and is_postgres_url(str(target)):
        return lambda: None
    home = data_dir_or_default(Path(target) if target else None)
    if (home / DB_NAME).exists():
        return lambda: None
    if not home.exists():
        top = home  # the first folder of the path that opening the store makes
        while not top.parent.exists() and top.parent != top:
            top = top.parent
        return lambda: shutil.rmtree(top, ignore_errors=True)
    before = set(home.iterdir())

    def undo() -> None:
        for made in set(home.iterdir()) - before:
            if made.is_dir() and not made.is_symlink():
                shutil.rmtree(made, ignore_errors=True)
            else:
                made.unlink(missing_ok=True)

    return undo


def store_target(store: str | None, data_dir: Path | None) -> str | Path:
    """The store a command opens: ``--store`` (or ``$COREEPI_STORE``),
    else the data dir. Exit 2 with one line when it is a data dir holding no
    store (:func:`existing_store`: only ingesting creates one)."""
    from coreepi.store import STORE_ENV
    from coreepi.store.postgres_store import is_postgres_url

    target: str | Path = store or os.environ.get(STORE_ENV) or data_dir_or_default(data_dir)
    if not is_postgres_url(str(target)):
        existing_store(Path(target))
    return target


def shown(target: str | Path) -> str:
    """A store location for a message: a database URL without its password."""
    from coreepi.store.postgres_store import redact

    return redact(str(target))


def read_token(token_file: Path | None) -> str | None:
    """The bearer token: the first line of ``token_file``, else ``$COREEPI_TOKEN``,
    else None. An unreadable or empty file is an input error (exit 2)."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV) or None
    try:
        lines = token_file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        fail(f"--token-file {token_file}: {exc.strerror or exc}")
    except UnicodeDecodeError:
        fail(f"--token-file {token_file}: not a text file")
    token = lines[0].strip() if lines else ""
    if not token:
        fail(f"--token-file {token_file}: empty (expected the token on its first line)")
    return token


def window(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """``(--since, --until)`` parsed; exit 2 unless until > since."""
    lo, hi = parse_when(since, "--since"), parse_when(until, "--until")
    if lo is not None and hi is not None and hi <= lo:
        fail("--until must be after --since")
    return lo, hi
