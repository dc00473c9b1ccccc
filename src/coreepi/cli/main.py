"""The ``coreepi`` command line. Thin: it parses arguments and calls library
functions (which tests call too); user errors become one line on stderr and
exit status 2."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from coreepi import __version__
from coreepi.cli.basics import run_guarded, use_siglists, write_stdout
from coreepi.cli.common import EXIT_INPUT_ERROR, DataDir, fail, store_undo
from coreepi.cli.options import BlobsOpt, SiglistsOpt, StoreOpt, store_location
from coreepi.errors import InputError

if TYPE_CHECKING:
    from coreepi.ingest.run import IngestSummary
    from coreepi.parse.telemetry.syslog_year import SyslogYear

def _new_app() -> typer.Typer:
    app = typer.Typer(
        name="coreepi",
        help="Core dump epidemiology: analyse, group and count a fleet's crashes.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    return app


def _version(value: bool) -> None:
    if value:
        typer.echo(f"coreepi {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Core dump epidemiology."""
    from coreepi.ingest.scratch import exit_on_sigterm
    from coreepi.model.limits import LimitEnvError, check_environment

    exit_on_sigterm()  # a SIGTERM runs the clean-up (no partial file left behind)
    try:
        check_environment()  # a mistyped limit: one line now, not a failure per core later
    except LimitEnvError as exc:
        fail(exc.line())


def schema(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of standard output.")
    ] = None,
) -> None:
    """Print (or write) the JSON Schema of the CrashReport."""
    from coreepi.model.schema import crash_report_schema_json

    text = crash_report_schema_json()
    if out is None:
        write_stdout(text)
    else:
        out.write_text(text, encoding="utf-8")


def telemetry(
    log: Annotated[
        Path, typer.Argument(metavar="LOG",
                             help="Kernel log, dmesg, journal text, mcelog or ras-mc-ctl output.")
    ],
    host: Annotated[str | None, typer.Option("--host", help="Host id to put in the events.")] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the events as JSON lines (those with a "
                           "time: telemetry.jsonl needs one).")
    ] = False,
    year: Annotated[int | None, typer.Option(
        "--year", min=1970, max=9999,
        help="Year of syslog times without one (journalctl -k, rsyslog: 'Feb 23 16:24:18 "
        "host kernel:'); default: the log file's modification year, months after its "
        "month in the year before.")] = None,
) -> None:
    """Read hardware events (MCE, EDAC, NVIDIA Xid, PCIe AER, SIGBUS MCE) from a log."""
    from coreepi.parse.open_input import DecompressionError
    from coreepi.parse.telemetry.logs import parse_telemetry

    _check_log(log)
    clock = _syslog_year(log, year)
    stopped: DecompressionError | None = None
    rows: list[tuple[str, str, str, str, str]] = []
    undated = syslog_dated = 0
    try:
        for read in parse_telemetry(log, host_id=host):
            event = clock.dated(read)
            syslog_dated += event is not read
            if event.ts is None and event.uptime_seconds is None:
                undated += 1
                if json_output:  # a null ts is refused in telemetry.jsonl
                    continue
            if json_output:
                sys.stdout.write(event.model_dump_json() + "\n")
                continue
            when = (
                event.ts.isoformat() if event.ts is not None
                else f"+{event.uptime_seconds:.6f}s" if event.uptime_seconds is not None
                else ""
            )
            rows.append((when, event.kind.value, event.severity or "", event.component or "",
                         event.summary))
    except BrokenPipeError:
        raise
    except DecompressionError as exc:  # the events before it are shown, then the error
        stopped = exc
    except OSError as exc:
        fail(f"{log}: {exc.strerror or exc}")
    if not json_output and rows:
        from rich.console import Console
        from rich.table import Table

        table = Table("time", "kind", "severity", "component", "summary", title=str(log))
        table.columns[0].no_wrap = True  # a time cut short ("16:24:1…") is no time
        for row in rows:
            table.add_row(*row)
        Console().print(table)
    if syslog_dated:
        sys.stderr.write(f"coreepi: {log}: {clock.describe()}\n")
    if undated:
        sys.stderr.write(
            f"coreepi: {log}: {undated} event{'s' if undated != 1 else ''} without a time"
            + (": not written to telemetry.jsonl" if json_output else "")
            + " (use --year YEAR for syslog times, or journalctl -o short-iso)\n")
    if stopped is not None:
        fail(stopped.stopped_at())
    if not json_output and not rows:
        sys.stderr.write(f"coreepi: {log}: no hardware events found\n")


def _syslog_year(log: Path, year: int | None) -> SyslogYear:
    """How year-less syslog times of ``log`` get their year: ``--year``, else
    the file's modification time (see :mod:`coreepi.parse.telemetry.syslog_year`)."""
    from datetime import UTC, datetime

    from coreepi.parse.telemetry.syslog_year import SyslogYear

    if year is not None:
        return SyslogYear(year=year)
    return SyslogYear(modified=datetime.fromtimestamp(log.stat().st_mtime, UTC))


def _check_log(log: Path) -> None:
    """One line and exit 2 unless ``log`` is a file whose first 64 KiB
    (decompressed) are text: a directory, a core or other binary is not a log."""
    from coreepi.ingest.hostlog import not_a_log

    if log.is_dir():
        fail(f"{log}: is a directory, not a log file")
    if not log.exists():
        fail(f"{log}: no such file")
    if not log.is_file():
        fail(f"{log}: not a regular file (a FIFO or device is not read)")
    try:
        why = not_a_log(log)
    except OSError as exc:
        fail(f"{log}: cannot read: {exc.strerror or exc}")
    if why is not None:
        fail(f"{log}: not a log: {why}")


def ingest(
    inputs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Fleet directories (hosts.csv, exposure.csv, telemetry.jsonl, crashes/, "
            "symbols/), directories of crash files, or crash files.",
            metavar="FLEET_OR_FILE",
        ),
    ] = None,
    telemetry_log: Annotated[
        list[Path] | None,
        typer.Option("--telemetry", metavar="LOG",
                     help="Kernel log, dmesg, mcelog or ras-mc-ctl output of --host: hardware "
                     "events and kernel crashes; repeatable (pairs with --host in order)."),
    ] = None,
    host: Annotated[
        list[str] | None,
        typer.Option("--host", metavar="H",
                     help="Host id of each --telemetry LOG (one --host for all, or one each)."),
    ] = None,
    data_dir: DataDir = None,
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, metavar="N",
                                 help="Cores analysed at once (default: CPUs).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Wall-time limit per core, seconds.")
    ] = 300.0,
    memory_limit: Annotated[
        int, typer.Option("--memory-limit", min=64, help="Memory limit per analysis, MiB.")
    ] = 4096,
    symbol_dir: Annotated[
        list[Path] | None,
        typer.Option("--symbol-dir", help="Symbol directory in .build-id/xx/rest layout; repeatable."),
    ] = None,
    no_store_cores: Annotated[
        bool, typer.Option("--no-store-cores", help="Do not keep cores as blobs.")
    ] = False,
    siglists: SiglistsOpt = None,
) -> None:
    """Analyse and store a fleet's crashes, hosts, exposure and telemetry (idempotent).

    With --telemetry LOG --host H it reads a host's kernel log / mcelog /
    ras-mc-ctl output: hardware events, and kernel crashes of host H."""
    from coreepi.cli.progress import IngestProgress
    from coreepi.errors import StoreError
    from coreepi.ingest.fleet import BAD_HOST_ID
    from coreepi.ingest.hostlog import NOT_A_LOG
    from coreepi.ingest.run import ingest as run_ingest
    from coreepi.store import open_store

    logs, hosts = telemetry_log or [], host or []
    if len(hosts) == 1:
        hosts = hosts * len(logs)
    if len(hosts) != len(logs):
        fail("give one --host for all --telemetry logs, or one --host per --telemetry log")
    if not inputs and not logs:
        fail("nothing to ingest: give a fleet directory or crash files, or --telemetry LOG")
    use_siglists(siglists)
    where = store_location(store, data_dir)
    undo = store_undo(where)  # a store this ingest makes stays only if it stores something
    try:
        with open_store(where, blobs=blobs) as opened, IngestProgress() as progress:
            summary = run_ingest(
                inputs or [], opened, jobs=jobs, timeout=timeout, memory_limit_mb=memory_limit,
                symbol_dirs=symbol_dir or (), store_cores=not no_store_cores, observer=progress,
                telemetry_logs=list(zip(logs, hosts, strict=True)),
            )
    except (InputError, StoreError) as exc:
        undo()
        fail(str(exc))
    for rejection in summary.rejections:
        sys.stderr.write(f"coreepi: {rejection}\n")
    sys.stdout.write(str(summary) + "\n")
    if not accepted_anything(summary):
        undo()
        fail(f"nothing ingested: none of the {summary.files_seen} input files held a crash, "
             "host, exposure interval or telemetry event that could be stored (see above)")
    # said above, one line each; the rest is in: a named --telemetry file that
    # was no log, a row whose host id cannot name a host
    if any(r.category in (NOT_A_LOG, BAD_HOST_ID) for r in summary.rejections):
        raise typer.Exit(EXIT_INPUT_ERROR)


def accepted_anything(summary: IngestSummary) -> bool:
    """Whether an ingest stored (or found already stored) anything of its input."""
    return any((summary.files_skipped, summary.hosts, summary.exposure_added,
                summary.exposure_duplicates, summary.events_added, summary.crashes_added,
                summary.crashes_existing, summary.crashes_paired, summary.crashes_completed))


def _register_artifact(app: typer.Typer) -> None:
    from coreepi.cli import artifact

    artifact.register(app)  # inspect, submit


def _register_ingest(app: typer.Typer) -> None:
    app.command()(ingest)


def _register_report(app: typer.Typer) -> None:
    from coreepi.cli import report as report_command

    report_command.register(app)


def _register_crashes(app: typer.Typer) -> None:
    from coreepi.cli import crashes

    crashes.register(app)  # list, info, dump, debug


def _register_serve(app: typer.Typer) -> None:
    from coreepi.cli.serve import serve, token_app

    app.command()(serve)
    app.add_typer(token_app, name="token")


def _register_store(app: typer.Typer) -> None:
    from coreepi.cli.store import store_app

    app.add_typer(store_app, name="store")


def _register_export(app: typer.Typer) -> None:
    from coreepi.cli.export import export_app

    app.add_typer(export_app, name="export")  # export parquet


def _register_worker(app: typer.Typer) -> None:
    from coreepi.cli.worker import register

    register(app)


def _register_reanalyze(app: typer.Typer) -> None:
    from coreepi.cli.reanalyze import register

    register(app)


def _register_capture(app: typer.Typer) -> None:
    from coreepi.capture.commands import register

    register(app)  # collect, agent


def _register_ci(app: typer.Typer) -> None:
    from coreepi.cli.ci import register

    register(app)  # ci run, postmortem


def _register_alerts(app: typer.Typer) -> None:
    from coreepi.cli import alerts as alerts_commands

    alerts_commands.register(app)  # alerts, host drain, watch


def _register_rest(app: typer.Typer) -> None:
    from coreepi.cli import simulate

    app.command()(telemetry)
    simulate.register(app)  # simulate, demo
    app.command()(schema)


#: Each registrar and the top-level names it adds, in the order ``coreepi
#: --help`` lists them: one crash, a fleet, the stored crashes, the server and
#: the nodes, then the rest. A command line that names one of these registers
#: only that module: importing every command's module and letting Typer build
#: all ~35 commands cost ~0.1 s of CPU on each start-up (``inspect`` of a small
#: core takes ~0.3 s in all).
_REGISTRARS: tuple[tuple[Callable[[typer.Typer], None], frozenset[str]], ...] = (
    (_register_artifact, frozenset({"inspect", "submit"})),
    (_register_ingest, frozenset({"ingest"})),
    (_register_report, frozenset({"report"})),
    (_register_crashes, frozenset({"list", "info", "dump", "debug"})),
    (_register_serve, frozenset({"serve", "token"})),
    (_register_store, frozenset({"store"})),
    (_register_export, frozenset({"export"})),
    (_register_worker, frozenset({"worker"})),
    (_register_reanalyze, frozenset({"reanalyze"})),
    (_register_capture, frozenset({"collect", "agent"})),
    (_register_ci, frozenset({"ci", "postmortem"})),
    (_register_alerts, frozenset({"alerts", "host", "watch"})),
    (_register_rest, frozenset({"telemetry", "simulate", "demo", "schema"})),
)


def build_app(command: str | None = None) -> typer.Typer:
    """The ``coreepi`` Typer app: with ``command`` a top-level command name
    (``"inspect"``), only the module that defines it is imported and
    registered; otherwise (``None``, ``--help``, a typo) every command."""
    app = _new_app()
    wanted = [reg for reg, names in _REGISTRARS if command in names] or [
        reg for reg, _ in _REGISTRARS]
    for register in wanted:
        register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    # ``app`` (every command) is built on first use, for tests and tools
    # that import it; the console script builds only the command it runs.
    if name == "app":
        app = build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The Typer command line (:mod:`coreepi.cli.entry` reads an ordinary
    ``inspect`` command line before this)."""
    # coreepi uses no pydantic plugins, and looking for them scans every
    # installed package's entry points (importlib.metadata: ~0.05-0.15 s of
    # every command's start-up). A user's own setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    run_guarded(lambda: _run_typer(sys.argv[1:]))


def _click_exceptions() -> Any:
    """The exception module of the Click that Typer runs on: its own copy
    since Typer 0.2x (``typer._click``), the click package before."""
    try:
        from typer._click import exceptions
    except ImportError:  # a Typer that uses the click package
        from click import exceptions
    return exceptions


def _run_typer(args: list[str]) -> None:
    """Run the command line with Click's parsing but our ending: a usage
    error is one line ``coreepi: error: …`` and exit status 2 (Click's own
    ending prints a four-line usage block), ``--help`` and ``typer.Exit``
    as Click does, a closed stdout and Ctrl-C to :func:`run_guarded`."""
    from coreepi.cli.helpfmt import tidy_help

    errors = _click_exceptions()
    first = next((arg for arg in args if not arg.startswith("-")), None)
    command = typer.main.get_command(build_app(first))
    tidy_help(command)
    try:
        with command.make_context("coreepi", args) as ctx:
            command.invoke(ctx)
    except getattr(errors, "NoArgsIsHelpError", ()) as exc:  # Click >= 8.2 (before: Exit)
        exc.show()  # bare ``coreepi`` or ``coreepi token``: the help is the answer
        sys.exit(exc.exit_code)
    except errors.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "coreepi"
        message = " ".join(exc.format_message().split())
        fail(f"{where}: {message} (see {where} --help)")
    except typer.Exit as exc:  # --help, --version, a command's own exit status
        sys.exit(exc.exit_code)
    except typer.Abort:
        raise KeyboardInterrupt from None
    except errors.ClickException as exc:
        sys.stderr.write(f"coreepi: error: {' '.join(exc.format_message().split())}\n")
        sys.exit(exc.exit_code)
