"""The capture commands of the ``coreepi`` CLI: ``collect`` and ``agent``.

Thin, as the rest of the CLI: each command calls one library function.
Registered on the main Typer app by :func:`register`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from coreepi.capture.config import CaptureConfig

__all__ = ["register"]

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="Capture config (TOML; default /etc/coreepi/capture.toml)."),
]


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"coreepi: error: {message}\n")
    raise typer.Exit(2)


def _config(path: Path | None) -> CaptureConfig:
    """The capture configuration at ``path``; a bad file is one line, exit 2."""
    from coreepi.capture.config import load_config
    from coreepi.errors import InputError

    try:
        return load_config(path)
    except InputError as exc:
        _fail(str(exc))


def collect(
    specifiers: Annotated[
        list[str] | None,
        typer.Argument(help="The kernel's expansion of %P %i %I %s %t %h %e %u %g %c "
                       "(after `--`).", metavar="[-- %P %i %I %s %t %h %e %u %g %c]"),
    ] = None,
    config: ConfigOption = None,
    from_systemd_coredump: Annotated[
        bool, typer.Option("--from-systemd-coredump",
                           help="Import systemd-coredump's journal entries and cores instead.")
    ] = False,
    journal_json: Annotated[
        Path | None, typer.Option("--journal-json",
                                  help="With --from-systemd-coredump: read this `journalctl -o "
                                  "json` output instead of the journal.")
    ] = None,
) -> None:
    """The core_pattern pipe handler: read a core from stdin into the spool.

    Installed by `coreepi agent install` as
    `|python -m coreepi collect [--config F] -- %P %i %I %s %t %h %e %u %g %c`.
    Always exits 0 and reads stdin to its end (errors go to <spool>/collect.log).
    """
    if from_systemd_coredump:
        from coreepi.capture.config import load_config
        from coreepi.capture.coredump_import import import_coredumps
        from coreepi.errors import InputError

        try:
            summary = import_coredumps(load_config(config), journal_json)
        except InputError as exc:
            _fail(str(exc))
            return
        sys.stdout.write(f"imported {summary.imported}, already imported {summary.skipped}, "
                         f"failed {len(summary.errors)}\n")
        for error in summary.errors:
            sys.stderr.write(f"coreepi: {error}\n")
        return
    from coreepi.capture.collect import run_collect

    raise typer.Exit(run_collect(list(specifiers or []), config))


agent_app = typer.Typer(
    help="The node agent: ship the spool to `coreepi serve`, send heartbeats; set up capture.",
    no_args_is_help=False,
    invoke_without_command=True,
)


@agent_app.callback(invoke_without_command=True)
def agent(
    ctx: typer.Context,
    config: ConfigOption = None,
    once: Annotated[
        bool, typer.Option("--once", help="Ship what is ready, send one heartbeat, exit.")
    ] = False,
) -> None:
    """Run the agent (until SIGTERM), or one of its sub-commands."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = config
        return
    from coreepi.capture.agent import Agent
    from coreepi.capture.config import load_config
    from coreepi.errors import InputError

    try:
        cfg = load_config(config)
        runner = Agent(cfg)
    except (InputError, ValueError) as exc:
        _fail(str(exc))
        return
    if once:
        stats = runner.run_once()
        sys.stdout.write(f"delivered {stats.delivered}, quarantined {stats.quarantined}, "
                         f"heartbeats {stats.heartbeats}, failures {stats.failures}\n")
        for error in dict.fromkeys(stats.errors):  # each reason once, in order
            if not error.startswith("token refused"):  # already said by the agent
                sys.stderr.write(f"coreepi agent: server unavailable: {error}\n")
        raise typer.Exit(0 if stats.failures == 0 else 1)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.stop.set())
    runner.run()


@agent_app.command()
def status(
    ctx: typer.Context,
    config: ConfigOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="The counts as one JSON object.")
                           ] = False,
) -> None:
    """Show the spool's counts (queued, pending analysis, quarantined, bytes)."""
    from coreepi.capture.agent import spool_status

    counts = spool_status(_config(config or ctx.obj))
    sys.stdout.write(json.dumps(counts, indent=2) + "\n" if json_output
                     else _status_text(counts))


def _status_text(s: dict[str, Any]) -> str:
    """The spool counts of :func:`coreepi.capture.agent.spool_status` as
    lines for a person (``--json`` gives the dict itself)."""
    if not s["exists"]:
        return f"spool {s['spool_dir']}: does not exist yet (nothing captured)\n"
    stuck = s["stuck"]
    mib = 1 << 20
    return (f"spool {s['spool_dir']}\n"
            f"queued: {s['queued']} ({s['pending_analysis']} pending analysis, "
            f"{s['reported_awaiting_core']} reported and awaiting their core)\n"
            f"stuck: {len(stuck)}{': ' + ', '.join(stuck) if stuck else ''}\n"
            f"quarantined: {s['quarantined']}\n"
            f"space: {s['spool_bytes'] / mib:,.1f} MiB of a {s['quota_bytes'] / mib:,.0f} "
            "MiB quota\n"
            + (f"token refused: {s['token_refused']}\n" if s.get("token_refused") else ""))


@agent_app.command()
def install(
    ctx: typer.Context,
    config: ConfigOption = None,
    apply: Annotated[bool, typer.Option("--apply", help="Perform it (root).")] = False,
) -> None:
    """Show (and with --apply perform) the core_pattern, core_pipe_limit,
    sysctl.d, RLIMIT_CORE and systemd set-up; the previous state is saved."""
    from coreepi.capture.install import apply_install, plan_install

    path = config or ctx.obj
    cfg = _config(path)
    plan = plan_install(Path(path).resolve() if path else None, cfg.spool_dir)
    sys.stdout.write(plan.describe())
    if not apply:
        sys.stdout.write("(not applied: run again with --apply, as root)\n")
        return
    if os.geteuid() != 0:
        _fail("--apply needs root (it writes /proc/sys/kernel and /etc)")
    apply_install(plan)
    sys.stdout.write("applied\n")


@agent_app.command()
def uninstall() -> None:
    """Restore the core_pattern, core_pipe_limit and files that install replaced."""
    from coreepi.capture.install import uninstall as run_uninstall

    if os.geteuid() != 0:
        _fail("uninstall needs root (it writes /proc/sys/kernel and /etc)")
    for line in run_uninstall():
        sys.stdout.write(line + "\n")


def register(app: typer.Typer) -> None:
    """Add ``collect`` and ``agent`` to the main CLI app."""
    app.command(context_settings={"ignore_unknown_options": True})(collect)
    app.add_typer(agent_app, name="agent")
