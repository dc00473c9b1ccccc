"""``coreepi serve`` and ``coreepi token …``: thin commands over :mod:`coreepi.serve`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from coreepi.cli.basics import use_siglists
from coreepi.cli.common import fail as _fail
from coreepi.cli.common import store_target
from coreepi.cli.options import BlobsOpt, DataDir, SiglistsOpt, StoreOpt

__all__ = ["serve", "token_app"]

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")

token_app = typer.Typer(
    help="Bearer tokens of the HTTP API (scopes: ingest, read, admin). On a data dir, work "
    "while `coreepi serve` is stopped (or use the admin API, /api/v1/tokens); on a "
    "PostgreSQL store (--store), any time.",
    no_args_is_help=True,
)


def check_port_free(host: str, port: int) -> None:
    """Exit 2 with one line when ``host:port`` cannot be listened on (in use,
    not an address of this machine, privileged), before anything is created."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        _fail(f"--host {host}: {exc.strerror}")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # as uvicorn binds: a port left in TIME_WAIT by a previous server is free
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


def serve(
    data_dir: DataDir = None,
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8080,
    max_body_mb: Annotated[
        float, typer.Option("--max-body-mb", min=0.001, help="Largest JSON body, MiB.")
    ] = 16.0,
    max_core_mb: Annotated[
        float, typer.Option("--max-core-mb", min=0.001,
                            help="Largest core upload (compressed), MiB.")
    ] = 2048.0,
    analysis_timeout: Annotated[
        float, typer.Option("--analysis-timeout", min=1,
                            help="Wall-time limit of one core's central analysis, seconds.")
    ] = 300.0,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=0,
                                 help="Cores analysed at once by this server's worker threads "
                                 "(0: none; `coreepi worker` processes analyse them).")
    ] = None,
    symbol_dir: Annotated[
        list[Path] | None,
        typer.Option("--symbol-dir", help="Symbol directory (.build-id layout); repeatable."),
    ] = None,
    read_cpu_seconds: Annotated[
        float, typer.Option("--read-cpu-seconds",
                            help="CPU budget of one read request, seconds (at least 0.05, how "
                            "often it is checked); past it the read's queries are cancelled "
                            "(503). docs/limits.md.")
    ] = 10.0,
    log_level: Annotated[str, typer.Option(
        "--log-level", metavar="LEVEL",
        help="critical, error, warning, info (one access-log line per request) or debug.")
    ] = "info",
    alert_rules: Annotated[Path | None, typer.Option(
        "--alert-rules", envvar="COREEPI_ALERT_RULES",
        help="Evaluate these surveillance rules (TOML) on their schedule.")] = None,
    metrics_top_groups: Annotated[int, typer.Option(
        "--metrics-top-groups", min=0,
        help="/metrics: per-group gauges for this many groups (by rate) plus 'other'.")] = 20,
    siglists: SiglistsOpt = None,
) -> None:
    """Run the server over the store: HTTP API, web UI (prints a one-time login link), /docs,
    /metrics. Binds to 127.0.0.1 unless --host says otherwise."""
    if log_level not in LOG_LEVELS:
        _fail(f"--log-level {log_level!r}: one of {', '.join(LOG_LEVELS)}")
    check_port_free(host, port)
    use_siglists(siglists)
    from dataclasses import replace

    from coreepi.errors import InputError, StoreError
    from coreepi.model.limits import LimitEnvError
    from coreepi.serve import ServeConfig, run
    from coreepi.serve.config import MiB
    from coreepi.surveil import load_rules

    try:
        rules = load_rules(alert_rules) if alert_rules else None
    except InputError as exc:
        _fail(str(exc))
    try:
        config = ServeConfig(alert_rules=rules, max_body_bytes=int(max_body_mb * MiB),
                             max_core_bytes=int(max_core_mb * MiB),
                             analysis_timeout_seconds=analysis_timeout,
                             read_cpu_seconds=read_cpu_seconds,
                             symbol_dirs=tuple(symbol_dir or ()),
                             metrics_top_groups=metrics_top_groups)
    except LimitEnvError as exc:  # a COREEPI_* limit that is not a positive integer
        _fail(exc.line())
    except ValueError as exc:  # the one setting ServeConfig checks: the read budget
        _fail(f"--read-cpu-seconds: {exc}")
    if jobs is not None:
        config = replace(config, analysis_jobs=jobs)
    # serving opens a store, it does not make one: a mistyped path would
    # otherwise be served as an empty store (exit 2 names `store init`)
    where = store_target(store, data_dir)
    try:
        run(where, host, port, config, log_level=log_level, blobs=blobs)
    except StoreError as exc:
        _fail(str(exc))


@token_app.command("create")
def token_create(
    scope: Annotated[
        list[str], typer.Option("--scope", help="ingest, read or admin; repeatable.")
    ],
    name: Annotated[str | None, typer.Option("--name", help="A name to recognize it by.")] = None,
    data_dir: DataDir = None,
    store: StoreOpt = None,
) -> None:
    """Create a token and print it (once: only its hash is kept). The store
    must exist (`coreepi store init` makes an empty one): a mistyped --data-dir
    is refused, not made a store."""
    from coreepi.errors import StoreError
    from coreepi.serve.tokens import create_token
    from coreepi.store import open_store

    try:
        with open_store(store_target(store, data_dir)) as opened:
            record, token = create_token(opened, scope, name)
    except (StoreError, ValueError) as exc:
        _fail(str(exc))
    sys.stderr.write(f"coreepi: token {record.token_id} ({record.name}, scopes "
                     f"{','.join(record.scopes)}); it is shown only now:\n")
    sys.stdout.write(token + "\n")


@token_app.command("list")
def token_list(
    data_dir: DataDir = None,
    store: StoreOpt = None,
    all_tokens: Annotated[bool, typer.Option("--all", help="Include revoked tokens.")] = False,
) -> None:
    """List tokens (id, name, scopes, created, revoked); never the tokens themselves."""
    from coreepi.errors import StoreError
    from coreepi.serve.tokens import list_tokens
    from coreepi.store import open_store

    try:
        with open_store(store_target(store, data_dir)) as opened:
            tokens = list_tokens(opened, include_revoked=all_tokens)
    except StoreError as exc:
        _fail(str(exc))
    for t in tokens:
        revoked = f"\trevoked {t.revoked_at.isoformat()}" if t.revoked_at else ""
        sys.stdout.write(f"{t.token_id}\t{t.name}\t{','.join(t.scopes)}\t"
                         f"{t.created_at.isoformat()}{revoked}\n")


@token_app.command("revoke")
def token_revoke(
    token: Annotated[str, typer.Argument(help="Token id, or a name (revokes all of that name).")],
    data_dir: DataDir = None,
    store: StoreOpt = None,
) -> None:
    """Revoke a token (every server on the store stops accepting it within its token
    cache time, 5 s by default)."""
    from coreepi.errors import StoreError
    from coreepi.serve.tokens import revoke_token
    from coreepi.store import open_store

    try:
        with open_store(store_target(store, data_dir)) as opened:
            n = revoke_token(opened, token)
    except StoreError as exc:
        _fail(str(exc))
    if not n:
        _fail(f"no active token {token!r}")
    sys.stdout.write(f"revoked {n} token(s)\n")
