"""``coreepi inspect FILE`` (one artifact -> its crash reports) and
``coreepi submit FILE --server URL`` (send such a report to a server)."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coreepi.cli.common import Server, TokenFile, fail, parse_when, read_token
from coreepi.errors import InputError

if TYPE_CHECKING:
    from coreepi.model.report import CrashReport

__all__ = ["register"]

HostId = Annotated[str | None, typer.Option(
    "--host-id", metavar="HOST", help="Host the crash happened on (for the server's counts).")]
CapturedAt = Annotated[str | None, typer.Option(
    "--captured-at", metavar="TIME", help="When it crashed, ISO-8601 (naive means UTC).")]


def inspect(
    core: Annotated[Path, typer.Argument(
        metavar="FILE",
        help="Crash artifact: ELF core (plain or zstd/gzip/bzip2/xz), JVM hs_err log or "
        "kernel log.")],
    exe: Annotated[Path | None, typer.Option(
        "--exe", metavar="PATH", help="The crashed executable (if not at its path).")] = None,
    sysroot: Annotated[Path | None, typer.Option(
        "--sysroot", metavar="DIR", help="Look for the core's modules under this directory.")
    ] = None,
    debug_dir: Annotated[list[Path] | None, typer.Option(
        "--debug-dir", metavar="DIR",
        help="Directory of debug files (.build-id/xx/…); repeatable.")] = None,
    all_threads: Annotated[bool, typer.Option(
        "--all-threads", help="Every thread's backtrace, not only the crashing one's.")] = False,
    registers: Annotated[bool, typer.Option(
        "--registers", help="The registers of the threads shown.")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the CrashReport as JSON.")
                           ] = False,
    no_analysis: Annotated[bool, typer.Option(
        "--no-analysis", help="Only parse: no phenotypes or signature.")] = False,
    case_defs: Annotated[Path | None, typer.Option(
        "--case-defs", metavar="FILE",
        help="TOML file of user case definitions (CEL expressions); shows which fire.")] = None,
    host_id: HostId = None,
    captured_at: CapturedAt = None,
) -> None:
    """Read one crash artifact and print its crash report(s); analysis
    warnings go to stderr. With --host-id and --captured-at, `--json` output
    can be sent to a server with `coreepi submit`."""
    from coreepi.ingest.artifacts import inspect_file

    when = parse_when(captured_at, "--captured-at")
    try:
        reports = inspect_file(core, exe=exe, sysroot=sysroot, debug_dirs=debug_dir or (),
                               run_analysis=not no_analysis, case_defs=case_defs)
    except InputError as exc:
        fail(str(exc))
    for report in reports:
        _identify(report, host_id, when)
    if json_output:
        if len(reports) == 1:
            sys.stdout.write(reports[0].model_dump_json(indent=2) + "\n")
        else:
            items = ",\n".join(r.model_dump_json(indent=2) for r in reports)
            sys.stdout.write(f"[{items}]\n" if items else "[]\n")
    else:
        _print_reports(reports, case_defs, all_threads=all_threads, registers=registers)
    if not reports:
        sys.stderr.write(f"coreepi: {core}: no crash found\n")
    from coreepi.reporting.crash_text import warning_lines

    for report in reports:
        for line in warning_lines(report):
            sys.stderr.write(f"coreepi: warning: {line}\n")


def _identify(report: CrashReport, host_id: str | None, when: datetime | None) -> None:
    """Set the host and time the user gave (what a node's collector records)."""
    if host_id is not None:
        report.host_id = host_id
    if when is not None:
        report.captured_at = when


def _print_reports(reports: list[CrashReport], case_defs: Path | None, *, all_threads: bool,
                   registers: bool) -> None:
    from rich.console import Console  # rich only when drawing (not for --json)
    from rich.text import Text

    from coreepi.reporting.crash_text import render_report
    from coreepi.reporting.fast_text import print_rule

    console = Console(highlight=False)
    for i, report in enumerate(reports):
        if i:
            print_rule(console)
        render_report(report, console, all_threads=all_threads, registers=registers)
        if case_defs is not None:
            fired = [p.name for p in report.phenotypes if p.evidence.get("case_definition")]
            console.print(Text(f"case definitions ({case_defs}): "
                               f"{', '.join(fired) if fired else 'none fired'}"))


def submit(
    report_file: Annotated[Path, typer.Argument(
        metavar="FILE", help="CrashReport JSON (`coreepi inspect --json`): one report or a list.")],
    server: Server = None,
    token_file: TokenFile = None,
    host_id: HostId = None,
    captured_at: CapturedAt = None,
) -> None:
    """Send crash reports made locally to a server (POST /api/v1/crashes;
    a token with the ingest scope). --host-id/--captured-at fill in what the
    report lacks."""
    from pydantic import ValidationError

    from coreepi.model.report import CrashReport

    if not server:
        fail("give --server URL (or $COREEPI_SERVER)")
    when = parse_when(captured_at, "--captured-at")
    try:
        data = json.loads(report_file.read_bytes())
        items = data if isinstance(data, list) else [data]
        reports = [CrashReport.model_validate(item) for item in items]
    except OSError as exc:
        fail(f"{report_file}: {exc.strerror or exc}")
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()
        fail(f"{report_file}: not a CrashReport JSON ({' '.join(first[:3])})")
    for report in reports:
        _identify(report, report.host_id or host_id, report.captured_at or when)
        if not report.host_id:
            fail(f"{report_file}: crash {report.crash_id} has no host_id; give --host-id")
    _post(server, read_token(token_file), reports)


def _post(server: str, token: str | None, reports: list[CrashReport]) -> None:
    from coreepi.cli.client import ApiClient

    try:
        with ApiClient(server, token) as client:
            for report in reports:
                status, answer = client.post_json("/crashes", report.model_dump_json().encode())
                outcome = answer.get("status", status) if isinstance(answer, dict) else status
                sys.stdout.write(f"{report.crash_id}: {outcome}\n")
    except InputError as exc:
        fail(str(exc))


def register(app: typer.Typer) -> None:
    app.command()(inspect)
    app.command()(submit)
