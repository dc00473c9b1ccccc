"""The ``coreepi`` command line. Thin: it parses arguments and calls library
functions (which tests call too); user errors become one line on stderr and
exit status 2."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from coreepi import __version__
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
) -> None:
    """Read one crash artifact and print its crash report(s)."""
    from coreepi.artifacts import inspect_file
    from coreepi.render import render_report

    try:
        reports = inspect_file(
            core,
            exe=exe,
            sysroot=sysroot,
            debug_dirs=debug_dir or (),
            run_analysis=not no_analysis,
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
    console = Console()
    for i, report in enumerate(reports):
        if i:
            console.rule()
        render_report(report, console)


@app.command()
def schema(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of standard output.")
    ] = None,
) -> None:
    """Print (or write) the JSON Schema of the CrashReport."""
    from coreepi.schema import crash_report_schema_json

    text = crash_report_schema_json()
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
