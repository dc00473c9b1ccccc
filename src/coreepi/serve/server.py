"""``run``: serve the app with uvicorn over a store (a data dir or a PostgreSQL URL)."""

from __future__ import annotations

import os
import sys

from coreepi.serve.config import ServeConfig

__all__ = ["login_url", "run"]


def login_url(host: str, port: int, code: str) -> str:
    """The URL that logs a browser in with a one-time ``code`` (IPv6 hosts bracketed)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/login?code={code}"


def run(location: str | os.PathLike[str] | None, host: str = "127.0.0.1", port: int = 8080,
        config: ServeConfig | None = None, log_level: str = "info",
        blobs: str | None = None) -> None:
    """Open the store at ``location`` (see :func:`coreepi.store.open_store`;
    a data dir makes this process its one writer, a PostgreSQL URL lets
    replicas share it) with its blobs at ``blobs``, and serve until
    interrupted. Prints, on stderr, the web UI's login URL with a one-time
    code (as Jupyter does): opening it sets a read-scope session cookie.
    Warns on stderr, in one line, when the blob store does not answer.
    Raises :class:`coreepi.errors.StoreError` when the store
    cannot be opened (in use by another process, unreachable)."""
    import uvicorn

    from coreepi.serve.app import create_app
    from coreepi.store import open_store

    with open_store(location, blobs=blobs) as store:
        # a warning, not a refusal: the bucket may come up after the server
        # (/readyz keeps the load balancer away until it does)
        unready = store.blobs.check()
        if unready is not None:
            sys.stderr.write(f"coreepi: warning: {unready}: cores cannot be stored until it "
                             "answers (GET /readyz says 503 until then)\n")
        app = create_app(store, config)
        code = app.state.auth.login_code()
        sys.stderr.write("coreepi: web UI — open this link once to log in (it works one time):\n"
                         f"    {login_url(host, port, code)}\n")
        sys.stderr.flush()
        # one "client - "METHOD path" status" line per request at --log-level info
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=True,
                    timeout_graceful_shutdown=30)
