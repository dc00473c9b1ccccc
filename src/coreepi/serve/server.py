"""``run``: serve the app with uvicorn over the store of a data dir."""

from __future__ import annotations

import os
from pathlib import Path

from coreepi.serve.config import ServeConfig

__all__ = ["run"]


def run(data_dir: str | os.PathLike[str] | None, host: str = "127.0.0.1", port: int = 8080,
        config: ServeConfig | None = None, log_level: str = "info") -> None:
    """Open the store (this process becomes its one writer) and serve until
    interrupted. Raises :class:`coreepi.errors.StoreError` when the store is
    in use by another process."""
    import uvicorn

    from coreepi.serve.app import create_app
    from coreepi.store import open_store

    with open_store(Path(data_dir) if data_dir is not None else None) as store:
        app = create_app(store, config)
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    timeout_graceful_shutdown=30)
