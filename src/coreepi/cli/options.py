"""Options shared by every command that opens a store: where it is and where its blobs are."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["BlobsOpt", "DataDir", "SiglistsOpt", "StoreOpt", "store_location"]

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="COREEPI_DATA_DIR", metavar="DIR", show_envvar=True,
                 help="Store directory (default: the per-user data dir, "
                 "~/.local/share/coreepi)."),
]
StoreOpt = Annotated[
    str | None,
    typer.Option("--store", envvar="COREEPI_STORE", metavar="URL",
                 help="The store: postgresql://user@host/db (a server store shared by "
                 "replicas and workers) or a data dir; default: --data-dir."),
]
BlobsOpt = Annotated[
    str | None,
    typer.Option("--blobs", envvar="COREEPI_BLOBS", metavar="URL",
                 help="Where cores are kept: s3://bucket/prefix (credentials, region, endpoint "
                 "from AWS_* variables) or a directory; default: DATA_DIR/blobs."),
]


def store_location(store: str | None, data_dir: Path | None) -> str | Path | None:
    """What to open: ``--store`` when given, else ``--data-dir`` (None: the default)."""
    return store if store else data_dir


SiglistsOpt = Annotated[
    Path | None,
    typer.Option("--siglists", envvar="COREEPI_SIGLISTS", metavar="DIR", show_envvar=True,
                 help="Your own signature lists (prefix.txt, irrelevant.txt, "
                 "trim_modules.txt, unusable_stack.txt; siglists/README.md), added to the "
                 "built-in ones in every analysis this command starts."),
]

