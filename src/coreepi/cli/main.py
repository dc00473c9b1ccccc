"""The ``coreepi`` command line. Thin: it parses arguments and calls library
functions (which tests call too); user errors become one line on stderr and
exit status 2."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from coreepi import __version__
from coreepi.cli.options import BlobsOpt, DataDir, StoreOpt, store_location
from coreepi.errors import InputError

app = typer.Typer(
    name="coreepi",
    help="Core dump epidemiology: analyse, group and count a fleet's crashes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_INPUT_ERROR = 2


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"coreepi: error: {message}\n")
    raise typer.Exit(EXIT_INPUT_ERROR)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"coreepi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Core dump epidemiology."""


@app.command()
def inspect(
    core: Annotated[
        Path,
        typer.Argument(
            help="Crash artifact: ELF core (plain or zstd/gzip/bzip2/xz) or kernel log.",
            metavar="FILE",
        ),
    ],
    exe: Annotated[
        Path | None, typer.Option("--exe", help="The crashed executable (if not at its path).")
    ] = None,
    sysroot: Annotated[
        Path | None,
        typer.Option("--sysroot", help="Look for the core's modules under this directory."),
    ] = None,
    debug_dir: Annotated[
        list[Path] | None,
        typer.Option("--debug-dir", help="Directory of debug files (.build-id/xx/…); repeatable."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the CrashReport as JSON.")] = False,
    no_analysis: Annotated[
        bool, typer.Option("--no-analysis", help="Only parse: no phenotypes or signature.")
    ] = False,
    case_defs: Annotated[
        Path | None,
        typer.Option(
            "--case-defs",
            help="TOML file of user case definitions (CEL expressions); shows which fire.",
        ),
    ] = None,
) -> None:
    """Read one crash artifact and print its crash report(s)."""
    from coreepi.ingest.artifacts import inspect_file

    try:
        reports = inspect_file(
            core,
            exe=exe,
            sysroot=sysroot,
            debug_dirs=debug_dir or (),
            run_analysis=not no_analysis,
            case_defs=case_defs,
        )
    except InputError as exc:
        _fail(str(exc))
    if json_output:
        if len(reports) == 1:
            sys.stdout.write(reports[0].model_dump_json(indent=2) + "\n")
        else:
            items = ",\n".join(r.model_dump_json(indent=2) for r in reports)
            sys.stdout.write(f"[{items}]\n" if items else "[]\n")
        return
    if not reports:
        sys.stderr.write(f"coreepi: {core}: no crash found\n")
    from rich.console import Console  # rich only when drawing (not for --json)

    from coreepi.reporting.crash_text import render_report

    console = Console()
    for i, report in enumerate(reports):
        if i:
            console.rule()
        render_report(report, console)
        if case_defs is not None:
            fired = [p.name for p in report.phenotypes if p.evidence.get("case_definition")]
            console.print(
                f"case definitions ({case_defs}): {', '.join(fired) if fired else 'none fired'}",
                markup=False,
            )


@app.command()
def schema(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of standard output.")
    ] = None,
) -> None:
    """Print (or write) the JSON Schema of the CrashReport."""
    from coreepi.model.schema import crash_report_schema_json

    text = crash_report_schema_json()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")


@app.command()
def telemetry(
    log: Annotated[
        Path, typer.Argument(help="Kernel log, dmesg, journal text, mcelog or ras-mc-ctl output.")
    ],
    host: Annotated[str | None, typer.Option("--host", help="Host id to put in the events.")] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the events as JSON lines.")
    ] = False,
) -> None:
    """Read hardware events (MCE, EDAC, NVIDIA Xid, PCIe AER, SIGBUS MCE) from a log."""
    from coreepi.parse.telemetry.logs import parse_telemetry

    if not log.is_file():
        _fail(f"{log}: no such file")
    try:
        events = parse_telemetry(log, host_id=host)
        if json_output:
            for event in events:
                sys.stdout.write(event.model_dump_json() + "\n")
            return
        from rich.table import Table

        table = Table("time", "kind", "severity", "component", "summary", title=str(log))
        count = 0
        for event in events:
            count += 1
            when = (
                event.ts.isoformat() if event.ts is not None
                else f"+{event.uptime_seconds:.6f}s" if event.uptime_seconds is not None
                else ""
            )
            table.add_row(when, event.kind.value, event.severity or "", event.component or "",
                          event.summary)
    except BrokenPipeError:
        raise
    except OSError as exc:
        _fail(f"{log}: {exc.strerror or exc}")
    if not count:
        sys.stderr.write(f"coreepi: {log}: no hardware events found\n")
        return
    from rich.console import Console

    Console().print(table)


@app.command()
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
        int | None, typer.Option("--jobs", "-j", min=1, help="Cores analysed at once (default: CPUs).")
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
) -> None:
    """Analyse and store a fleet's crashes, hosts, exposure and telemetry (idempotent).

    With --telemetry LOG --host H it reads a host's kernel log / mcelog /
    ras-mc-ctl output: hardware events, and kernel crashes of host H."""
    from coreepi.cli.progress import IngestProgress
    from coreepi.errors import StoreError
    from coreepi.ingest.run import ingest as run_ingest
    from coreepi.store import open_store

    logs, hosts = telemetry_log or [], host or []
    if len(hosts) == 1:
        hosts = hosts * len(logs)
    if len(hosts) != len(logs):
        _fail("give one --host for all --telemetry logs, or one --host per --telemetry log")
    if not inputs and not logs:
        _fail("nothing to ingest: give a fleet directory or crash files, or --telemetry LOG")
    try:
        with open_store(store_location(store, data_dir), blobs=blobs) as opened, \
                IngestProgress() as progress:
            summary = run_ingest(
                inputs or [], opened, jobs=jobs, timeout=timeout, memory_limit_mb=memory_limit,
                symbol_dirs=symbol_dir or (), store_cores=not no_store_cores, observer=progress,
                telemetry_logs=list(zip(logs, hosts, strict=True)),
            )
    except (InputError, StoreError) as exc:
        _fail(str(exc))
    for rejection in summary.rejections:
        sys.stderr.write(f"coreepi: {rejection}\n")
    sys.stdout.write(str(summary) + "\n")



# ``coreepi serve`` and ``coreepi token …`` live in cli/serve.py, ``coreepi store …`` in cli/store.py
from coreepi.cli.serve import serve as _serve
from coreepi.cli.serve import token_app as _token_app
from coreepi.cli.store import store_app as _store_app

app.command("serve")(_serve)
app.add_typer(_token_app, name="token")
app.add_typer(_store_app, name="store")
from coreepi.cli.worker import register as _register_worker

_register_worker(app)

# ``coreepi collect`` and ``coreepi agent …`` live in capture/commands.py
from coreepi.capture.commands import register as _register_capture

_register_capture(app)

from coreepi.cli.ci import register as _register_ci  # ``coreepi ci …``, ``coreepi postmortem``

_register_ci(app)


@app.command()
def simulate(
    out: Annotated[Path, typer.Option("--out", "-o", help="Fleet directory to write.")],
    scenario: Annotated[
        Path | None,
        typer.Argument(help="Scenario TOML (default: the bundled reference scenario).",
                       metavar="SCENARIO.toml"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same plan.")] = 1,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Cores made at once (default: CPUs).")
    ] = None,
) -> None:
    """Simulate a fleet with planted diseases and real cores: writes a fleet
    directory (hosts.csv, exposure.csv, telemetry.jsonl, crashes/, symbols/)
    plus truth.json and run.json."""
    from rich.console import Console

    from coreepi.simulate import simulate as run_simulation
    from coreepi.simulate.workloads import BuildError

    console = Console(stderr=True)
    done = 0

    def progress(record: dict[str, object]) -> None:
        nonlocal done
        done += 1
        if done % 25 == 0:
            console.print(f"  {done} runs done", highlight=False)

    try:
        result = run_simulation(scenario, out, seed=seed, jobs=jobs, on_crash=progress)
    except (InputError, BuildError) as exc:
        _fail(str(exc))
    sys.stdout.write(result.summary() + "\n")


@app.command()
def demo(
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Demo store directory (default: a per-user demo data "
                     "dir; never the default store)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Simulation seed.")] = 1,
    scenario: Annotated[
        str | None,
        typer.Option("--scenario", help="Scenario TOML or bundled name (default: reference)."),
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Simulate again and rebuild the demo store.")
    ] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Processes at once (default: CPUs).")
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="HTML report path (default: DATA_DIR/report.html).")
    ] = None,
) -> None:
    """The whole job end to end: simulate a fleet with planted diseases and real
    cores (cached after the first run), ingest it into a demo store, print the
    report, write the HTML report, and compare the findings with the truth."""
    from coreepi.errors import StoreError
    from coreepi.simulate.demo import run_demo
    from coreepi.simulate.workloads import BuildError

    try:
        run_demo(data_dir, seed=seed, scenario=scenario, fresh=fresh, jobs=jobs, html=html)
    except (InputError, StoreError, BuildError) as exc:
        _fail(str(exc))


def _when(value: str | None, option: str) -> datetime | None:
    """An ISO-8601 date or date-time (``Z`` or an offset; naive means UTC)."""
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value)
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except (ValueError, OverflowError):
        _fail(f"{option} {value!r}: not an ISO-8601 date or date-time in range (e.g. "
              "2024-05-01 or 2024-05-01T12:00:00Z)")


@app.command()
def report(
    data_dir: DataDir = None,
    store: StoreOpt = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Window start, ISO-8601 (default: all data).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Window end, exclusive, ISO-8601.")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="text, json, markdown or html.")
    ] = "text",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write here instead of standard output.")
    ] = None,
) -> None:
    """Study the stored crashes as a population: groups, rates, suspect hosts,
    attribute associations, each with its attribution and evidence."""
    from coreepi.errors import StoreError
    from coreepi.reporting import FORMATS, build_findings, render, render_text
    from coreepi.store import default_data_dir, open_store
    from coreepi.store.postgres_store import redact

    if fmt not in FORMATS:
        _fail(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    lo, hi = _when(since, "--since"), _when(until, "--until")
    if lo is not None and hi is not None and hi <= lo:
        _fail("--until must be after --since")
    where = store_location(store, data_dir) or default_data_dir()
    try:
        with open_store(where, read_only=True) as opened:
            counts = opened.counts()
            if not counts["crashes"] and not counts["exposure"]:
                raise StoreError(f"{redact(str(where))}: no crashes or exposure stored yet")
            findings = build_findings(opened, lo, hi)
    except StoreError as exc:
        if "no coreepi store here" in str(exc) or "no crashes or exposure stored" in str(exc):
            sys.stderr.write(f"coreepi: nothing to report: {exc}; run `coreepi ingest FLEET` "
                             "first\n")
            return
        _fail(str(exc))
    except InputError as exc:
        _fail(str(exc))
    if out is None and fmt == "text":
        from rich.console import Console

        render_text(findings, Console())
        return
    text = render(findings, fmt)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("coreepi: interrupted\n")
        sys.exit(130)
    except Exception as exc:  # a bug of ours: one line for the user, details on request
        if os.environ.get("COREEPI_DEBUG"):
            raise
        sys.stderr.write(
            f"coreepi: internal error: {type(exc).__name__}: {exc} "
            "(set COREEPI_DEBUG=1 for the traceback, and please report it)\n"
        )
        sys.exit(1)
