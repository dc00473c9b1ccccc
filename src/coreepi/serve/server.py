"""``run``: serve the app with uvicorn over a store (a data dir or a PostgreSQL URL)."""

from __future__ import annotations

import os

from coreepi.serve.config import ServeConfig

__all__ = ["run"]


def run(location: str | os.PathLike[str] | None, host: str = "127.0.0.1", port: int = 8080,
        config: ServeConfig | None = None, log_level: str = "info",
        blobs: str | None = None) -> None:
    """Open the store at ``location`` (see :func:`coreepi.store.open_store`;
    a data dir makes this process its one writer, a PostgreSQL URL lets
    replicas share it) with its blobs at ``blobs``, and serve until
    interrupted. Raises :class:`coreepi.errors.StoreError` when the store
    cannot be opened (in use by another process, unreachable)."""
    import uvicorn

    from coreepi.serve.app import create_app
    from coreepi.store import open_store

    with open_store(location, blobs=blobs) as store:
        app = create_app(store, config)
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    timeout_graceful_shutdown=30)
