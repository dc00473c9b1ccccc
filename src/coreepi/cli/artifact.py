"""``coreepi inspect FILE`` (one artifact -> its crash reports) and
``coreepi submit FILE --server URL`` (send such a report to a server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coreepi.cli.basics import parse_capture_time
from coreepi.cli.common import Server, TokenFile, fail, read_token
from coreepi.cli.inspect_args import FILE_HELP, option
from coreepi.cli.inspect_run import identify, run_inspect
from coreepi.errors import InputError

if TYPE_CHECKING:
    from coreepi.model.report import CrashReport

__all__ = ["register"]

HostId = Annotated[str | None, typer.Option(
    option("host_id").flag, metavar=option("host_id").metavar, help=option("host_id").help)]
CapturedAt = Annotated[str | None, typer.Option(
    option("captured_at").flag, metavar=option("captured_at").metavar,
    help=option("captured_at").help)]


def _opt(dest: str) -> typer.models.OptionInfo:
    spec = option(dest)
    return typer.Option(spec.flag, metavar=spec.metavar, help=spec.help)


def inspect(
    core: Annotated[Path, typer.Argument(metavar="FILE", help=FILE_HELP)],
    exe: Annotated[Path | None, _opt("exe")] = None,
    sysroot: Annotated[Path | None, _opt("sysroot")] = None,
    debug_dir: Annotated[list[Path] | None, _opt("debug_dir")] = None,
    all_threads: Annotated[bool, _opt("all_threads")] = False,
    registers: Annotated[bool, _opt("registers")] = False,
    json_output: Annotated[bool, _opt("json_output")] = False,
    no_analysis: Annotated[bool, _opt("no_analysis")] = False,
    case_defs: Annotated[Path | None, _opt("case_defs")] = None,
    host_id: HostId = None,
    captured_at: CapturedAt = None,
    siglists: Annotated[Path | None, _opt("siglists")] = None,
) -> None:
    """Read one crash artifact and print its crash report(s); analysis
    warnings go to stderr. With --host-id and --captured-at, `--json` output
    can be sent to a server with `coreepi submit`."""
    run_inspect(core, exe=exe, sysroot=sysroot, debug_dir=debug_dir, all_threads=all_threads,
                registers=registers, json_output=json_output, no_analysis=no_analysis,
                case_defs=case_defs, host_id=host_id, captured_at=captured_at,
                siglists=siglists)


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

    from coreepi.model.limits import TimeRangeError, check_time
    from coreepi.model.report import CrashReport

    if not server:
        fail("give --server URL (or $COREEPI_SERVER)")
    when = parse_capture_time(captured_at, "--captured-at")
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
        identify(report, report.host_id or host_id, report.captured_at or when)
        if not report.host_id:
            fail(f"{report_file}: crash {report.crash_id} has no host_id; give --host-id")
        if report.captured_at is not None:  # the server's range, refused before sending
            try:
                check_time(report.captured_at, "captured_at")
            except TimeRangeError as exc:
                fail(f"{report_file}: crash {report.crash_id}: {exc}")
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
