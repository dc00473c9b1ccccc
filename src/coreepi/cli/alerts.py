"""``coreepi alerts …``, ``coreepi watch``, ``coreepi host drain|undrain``: surveillance from the CLI."""

from __future__ import annotations

import json
import signal
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from coreepi.cli.basics import write_stdout
from coreepi.cli.common import TOKEN_ENV, TokenFile, read_token, store_target
from coreepi.cli.options import BlobsOpt, DataDir, StoreOpt

__all__ = ["register"]

alerts_app = typer.Typer(help="Surveillance alerts: list, silence, send a test.",
                         no_args_is_help=True)
host_app = typer.Typer(help="Act on hosts: drain a hardware-suspect one, undrain it once repaired.",
                       no_args_is_help=True)

RulesOpt = Annotated[Path | None, typer.Option(
    "--rules", envvar="COREEPI_ALERT_RULES", help="Alert rules (TOML; docs/surveillance.md).")]


DrainServer = Annotated[str | None, typer.Option(
    "--server", envvar="COREEPI_SERVER", metavar="URL", show_envvar=True,
    help="Drain (undrain) through a `coreepi serve` at URL instead of the local store "
    f"(an admin token: ${TOKEN_ENV} or --token-file).")]

# `watch --at` may run ahead of this machine's clock by this much (another node's clock)
AT_SKEW = timedelta(minutes=5)

# a silence lasts at most ten years: longer is a mistake (and 1e12 hours overflows a datetime)
MAX_SILENCE_HOURS = 24 * 366 * 10


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"coreepi: error: {message}\n")
    raise typer.Exit(2)


def _utc(text: str | None, name: str) -> datetime | None:
    if text is None:
        return None
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        _fail(f"{name} {text!r}: not an ISO 8601 time")
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


@alerts_app.command("list")
def alerts_list(
    store: StoreOpt = None, blobs: BlobsOpt = None, data_dir: DataDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    state: Annotated[str | None, typer.Option(help="Only firing or resolved alerts.")] = None,
) -> None:
    """Current and past alerts, oldest first, with their evidence."""
    from coreepi.errors import StoreError
    from coreepi.store import open_store

    if state not in (None, "firing", "resolved"):
        _fail(f"--state {state!r}: firing or resolved")
    try:
        with open_store(store_target(store, data_dir), blobs=blobs) as opened:
            alerts = opened.alerts(state)
    except StoreError as exc:
        _fail(str(exc))
    if as_json:
        write_stdout(json.dumps([{
            "key": a.key, "kind": a.kind, "state": a.state, "labels": a.labels,
            "summary": a.summary, "evidence": a.evidence, "starts_at": a.starts_at.isoformat(),
            "ends_at": a.ends_at.isoformat() if a.ends_at else None} for a in alerts],
            indent=2) + "\n")
        return
    for a in alerts:
        sys.stdout.write(f"{a.state:8} {a.starts_at:%Y-%m-%d %H:%M} {a.summary}\n")
    if not alerts:
        sys.stdout.write("no alerts\n")


@alerts_app.command("silence")
def alerts_silence(
    match: Annotated[list[str], typer.Option("--match", help="label=value; repeatable.")],
    hours: Annotated[float, typer.Option(help=f"How long it lasts (0 to {MAX_SILENCE_HOURS:g}).")
                     ] = 24.0,
    comment: Annotated[str, typer.Option(help="Why.")] = "",
    store: StoreOpt = None, blobs: BlobsOpt = None, data_dir: DataDir = None,
) -> None:
    """Mute alerts whose labels match every --match until the silence expires."""
    from coreepi.errors import StoreError
    from coreepi.store import open_store
    from coreepi.store.alert_records import SilenceRecord

    if not 0 <= hours <= MAX_SILENCE_HOURS:  # also NaN; inf or 1e12 overflow a datetime
        _fail(f"--hours {hours!r}: out of range (accepted: 0 to {MAX_SILENCE_HOURS:g})")
    matchers = {}
    for m in match:
        name, eq, value = m.partition("=")
        if not eq or not name:
            _fail(f"--match {m!r}: expected label=value")
        matchers[name] = value
    now = datetime.now(UTC)
    silence = SilenceRecord(uuid.uuid4().hex[:12], matchers, now, now + timedelta(hours=hours),
                            "cli", comment)
    try:
        with open_store(store_target(store, data_dir), blobs=blobs) as opened:
            opened.add_silence(silence)
    except StoreError as exc:
        _fail(str(exc))
    sys.stdout.write(f"silence {silence.silence_id} until {silence.expires_at:%Y-%m-%d %H:%M} UTC\n")


@alerts_app.command("test")
def alerts_test(rules: RulesOpt = None, store: StoreOpt = None, blobs: BlobsOpt = None,
                data_dir: DataDir = None) -> None:
    """Send a sample alert to every receiver of --rules (each attempt in the
    delivery log: `coreepi alerts deliveries`); exit 1 when one failed, with
    one line per failed receiver naming it and the reason."""
    from coreepi.errors import InputError, StoreError
    from coreepi.store import open_store
    from coreepi.surveil import load_rules, send_test

    try:
        loaded = load_rules(rules)
        if not loaded.receivers:
            _fail(f"{rules or 'the default rules'}: no [[receiver]] to send to")
        with open_store(store_target(store, data_dir), blobs=blobs) as opened:
            results = send_test(opened, loaded)
    except (InputError, StoreError) as exc:
        _fail(str(exc))
    urls = {r.name: r.url for r in loaded.receivers}
    for last in results:
        if last.ok:
            sys.stdout.write(f"{last.receiver}: delivered\n")
        else:
            tries = "attempt" if last.attempt == 1 else "attempts"
            sys.stderr.write(f"coreepi: error: receiver {last.receiver} ({urls[last.receiver]}): "
                             f"not delivered after {last.attempt} {tries}: {last.error}\n")
    if not all(last.ok for last in results):
        raise typer.Exit(1)


@alerts_app.command("deliveries")
def alerts_deliveries(
    store: StoreOpt = None, blobs: BlobsOpt = None, data_dir: DataDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    failed: Annotated[bool, typer.Option("--failed", help="Only failed attempts.")] = False,
    receiver: Annotated[str | None, typer.Option(help="Only this receiver's.")] = None,
) -> None:
    """The delivery log: every attempt to send an alert (or `alerts test`'s
    sample) to a receiver, oldest first, with its HTTP status and the reason
    it failed."""
    from coreepi.errors import StoreError
    from coreepi.store import open_store

    try:
        with open_store(store_target(store, data_dir), blobs=blobs, read_only=True) as opened:
            log = opened.deliveries()
    except StoreError as exc:
        _fail(str(exc))
    log = [d for d in log if (not failed or not d.ok) and receiver in (None, d.receiver)]
    if as_json:
        write_stdout(json.dumps([{
            "alert_key": d.alert_key, "receiver": d.receiver, "state": d.state,
            "attempt": d.attempt, "at": d.at.isoformat(), "status": d.status, "ok": d.ok,
            "error": d.error} for d in log], indent=2) + "\n")
        return
    for d in log:
        result = "delivered" if d.ok else f"FAILED {d.error}"
        sys.stdout.write(f"{d.at:%Y-%m-%d %H:%M:%S} {d.receiver} #{d.attempt} {d.state} "
                         f"{d.alert_key}: {result}\n")
    if not log:
        sys.stdout.write("no deliveries\n")


def watch(
    data_dir: DataDir = None, store: StoreOpt = None, blobs: BlobsOpt = None,
    rules: RulesOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Evaluate once and exit.")] = False,
    at: Annotated[str | None, typer.Option("--at", help="Evaluate as of this UTC time "
                                           "(ISO 8601; replays, tests): a dry run unless "
                                           "--deliver.")] = None,
    deliver: Annotated[bool, typer.Option(
        "--deliver", help="With --at: store the replay's alerts and send them to the "
        "receivers (default: print only).")] = False,
) -> None:
    """Evaluate the surveillance rules on a schedule (the embedded store's
    `coreepi serve` without the server), delivering alerts; stop with Ctrl-C."""
    from coreepi.errors import InputError, StoreError
    from coreepi.store import open_store
    from coreepi.surveil import evaluate, load_rules

    when = _utc(at, "--at")
    try:
        loaded = load_rules(rules)
    except InputError as exc:
        _fail(str(exc))
    target = store_target(store, data_dir)
    dry_run = when is not None and not deliver
    if when is not None:
        _check_at(target, blobs, when)
    if dry_run:
        sys.stdout.write("replay: alerts printed, not stored or delivered (--deliver sends "
                         "them)\n")
    stop = threading.Event()
    said: list[str] = []
    if not once:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    while True:
        try:
            with open_store(target, blobs=blobs) as opened:
                ev = evaluate(opened, loaded, when, dry_run=dry_run)
        except StoreError as exc:
            _fail(str(exc))
        if ev.notes != said:  # a warm-up note once, not every interval
            for note in ev.notes:
                sys.stdout.write(f"note: {note}\n")
            said = ev.notes
        for t in ev.transitions:
            mute = " (silenced)" if t.silenced else ""
            sys.stdout.write(f"{t.alert.state}{mute}: {t.alert.summary}\n")
        sys.stdout.flush()
        if once or stop.wait(loaded.interval_seconds):
            return


def _check_at(target: str | Path, blobs: Path | None, when: datetime) -> None:
    """Exit 2 unless ``when`` (``--at``) is within the store's data: not
    after now (a replay evaluates the past), not before its first crash or
    node-time (nothing to evaluate: every detector would stay silent)."""
    from coreepi.errors import StoreError
    from coreepi.store import open_store

    shown = when.isoformat()
    if when > datetime.now(UTC) + AT_SKEW:
        _fail(f"--at {shown}: in the future (a replay evaluates a past time)")
    try:
        with open_store(target, blobs=blobs, read_only=True) as opened:
            empty = (opened.count_crashes(until=when) == 0
                     and opened.exposure_frame(until=when).empty)
    except StoreError as exc:
        _fail(str(exc))
    if empty:
        _fail(f"--at {shown}: before the store's first crash and node-time (nothing to evaluate)")


def _drain_remote(server: str, token: str | None, host: str, reason: str,
                  at: datetime | None) -> bool:
    """``POST /api/v1/hosts/HOST/drain`` on ``server`` (``at`` in the body
    when given): True when newly drained. Raises InputError (unreachable,
    refused token, unknown host, a drain time the server refuses …)."""
    from urllib.parse import quote

    from coreepi.cli.client import ApiClient

    body: dict[str, str] = {"reason": reason}
    if at is not None:
        body["at"] = at.isoformat()
    with ApiClient(server, token) as client:
        _, answer = client.post_json(f"/hosts/{quote(host, safe='')}/drain",
                                     json.dumps(body).encode())
    return not answer.get("already", False)


DrainAt = Annotated[str | None, typer.Option(
    "--at", metavar="TIME",
    help="When the host was taken out of service (ISO 8601, e.g. 2024-05-31T08:00; "
    "no zone means UTC; at most 5 minutes ahead of now). Default: now.")]


@host_app.command("drain")
def host_drain(
    host: Annotated[str, typer.Argument(help="The host_id to drain.")],
    reason: Annotated[str, typer.Option(help="Why (kept with the drain).")] = "",
    at: DrainAt = None,
    store: StoreOpt = None, blobs: BlobsOpt = None, data_dir: DataDir = None,
    server: DrainServer = None, token_file: TokenFile = None,
) -> None:
    """Mark a host drained: its exposure stops counting from --at (default
    now), and the surveillance re-checks whether its crash groups stopped
    with it."""
    from coreepi.errors import InputError, StoreError
    from coreepi.store import open_store
    from coreepi.surveil.drains import drain, drain_start

    when = _utc(at, "--at")
    try:
        if when is not None:
            drain_start(when, name="--at")  # refused before a store or a server is opened
        if server:
            new: bool | None = _drain_remote(server, read_token(token_file), host, reason, when)
        else:
            with open_store(store_target(store, data_dir), blobs=blobs) as opened:
                new = drain(opened, host, "cli", reason, when, name="--at")
    except (InputError, StoreError) as exc:
        _fail(str(exc))
    if new is None:
        _fail(f"host {host!r}: not in the store")
    sys.stdout.write(f"{host}: {'drained' if new else 'already drained'}\n")


def _undrain_remote(server: str, token: str | None, host: str) -> bool:
    """``DELETE /api/v1/hosts/HOST/drain`` on ``server``: True when it was drained.
    Raises InputError (unreachable, refused token, unknown host …)."""
    from urllib.parse import quote

    from coreepi.cli.client import ApiClient

    with ApiClient(server, token) as client:
        _, answer = client.delete_json(f"/hosts/{quote(host, safe='')}/drain")
    return bool(answer.get("was_drained", False))


@host_app.command("undrain")
def host_undrain(
    host: Annotated[str, typer.Argument(help="The host_id to put back in service.")],
    store: StoreOpt = None, blobs: BlobsOpt = None, data_dir: DataDir = None,
    server: DrainServer = None, token_file: TokenFile = None,
) -> None:
    """Put a drained host back in service (repaired): its exposure counts
    again from now; the drained span stays cut and kept in the drain history."""
    from coreepi.errors import InputError, StoreError
    from coreepi.store import open_store

    if server:
        try:
            was = _undrain_remote(server, read_token(token_file), host)
        except InputError as exc:
            _fail(str(exc))
    else:
        try:
            with open_store(store_target(store, data_dir), blobs=blobs) as opened:
                if host not in opened.host_ids():
                    _fail(f"host {host!r}: not in the store")
                was = opened.undrain_host(host, datetime.now(UTC), "cli") is not None
        except StoreError as exc:
            _fail(str(exc))
    sys.stdout.write(f"{host}: {'back in service' if was else 'was not drained'}\n")


def register(app: typer.Typer) -> None:
    """Add ``alerts``, ``host`` and ``watch`` to the ``coreepi`` app."""
    app.add_typer(alerts_app, name="alerts")
    app.add_typer(host_app, name="host")
    app.command("watch")(watch)
