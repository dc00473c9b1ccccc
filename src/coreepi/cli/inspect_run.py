"""``coreepi inspect FILE``: one artifact -> its crash reports, printed.
Needs no Typer: the Typer command (:mod:`coreepi.cli.artifact`) and the
fast path of :func:`coreepi.cli.main.main` both call :func:`run_inspect`."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from coreepi.cli.basics import fail, parse_capture_time, use_siglists
from coreepi.errors import InputError

if TYPE_CHECKING:
    from coreepi.model.report import CrashReport

__all__ = ["identify", "run_inspect", "spooled"]

STDIN = "-"
"""The file name that means standard input (``coredumpctl dump PID | coreepi inspect -``)."""
_CHUNK = 1 << 20


def run_inspect(core: Path, *, exe: Path | None = None, sysroot: Path | None = None,
                debug_dir: list[Path] | None = None, all_threads: bool = False,
                registers: bool = False, json_output: bool = False, no_analysis: bool = False,
                case_defs: Path | None = None, host_id: str | None = None,
                captured_at: str | None = None, siglists: Path | None = None) -> None:
    """Read one crash artifact and print its crash report(s) (text, or JSON
    with ``json_output``); analysis warnings go to stderr. Bad input: one
    line on stderr and exit status 2 (SystemExit)."""
    from coreepi.ingest.artifacts import inspect_file

    when = parse_capture_time(captured_at, "--captured-at")
    if not no_analysis:
        use_siglists(siglists)
    with spooled(core) as readable:
        try:
            reports = inspect_file(readable, exe=exe, sysroot=sysroot,
                                   debug_dirs=debug_dir or (), run_analysis=not no_analysis,
                                   case_defs=case_defs)
        except InputError as exc:
            # the spool file's name means nothing to the user: name what they gave
            fail(str(exc).replace(os.fspath(readable), os.fspath(core)))
    for report in reports:
        identify(report, host_id, when)
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
    from coreepi.reporting.crash_warnings import warning_lines

    for report in reports:
        for line in warning_lines(report):
            sys.stderr.write(f"coreepi: warning: {line}\n")


def identify(report: CrashReport, host_id: str | None, when: datetime | None) -> None:
    """Set the host and time the user gave (what a node's collector records), and
    the crash id ingest gives the artifact on that host at that time: one core
    inspected for two hosts (or a mistyped host, then the right one) is two
    crashes, not one id the server refuses the second time. A report that
    already has this host and time keeps its id (``submit`` of an identified
    report sends the id ``inspect`` printed)."""
    if (host_id is None or host_id == report.host_id) and (
            when is None or when == report.captured_at):
        return
    from coreepi.ingest.crashes import crash_id_on_host  # only when identified

    if host_id is not None:
        report.host_id = host_id
    if when is not None:
        report.captured_at = when
    report.crash_id = crash_id_on_host(report)


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


def _is_pipe(core: Path) -> bool:
    """``-``, or a FIFO or socket (``/dev/stdin`` under a pipe): no random access."""
    if os.fspath(core) == STDIN:
        return True
    try:
        mode = os.stat(core).st_mode
    except OSError:
        return False  # inspect_file names the problem
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextmanager
def spooled(core: Path) -> Iterator[Path]:
    """``core`` itself, or for standard input (``-``) and pipes, the bytes
    read from it spooled to a temporary file under ``$TMPDIR`` (a core needs
    random access; compression is sniffed from the content as for a file),
    deleted on exit. At most :func:`coreepi.model.limits.max_core_bytes`
    of that directory are spooled: beyond it, one line and exit status 2."""
    if not _is_pipe(core):
        yield core
        return
    from coreepi.model.limits import max_core_bytes

    scratch = Path(tempfile.gettempdir())
    limit = max_core_bytes(scratch)
    with tempfile.NamedTemporaryFile(prefix="coreepi-stdin-", dir=scratch) as spool:
        if os.fspath(core) == STDIN:
            if sys.stdin.isatty():  # nothing will come: say so rather than wait
                fail(f"{core}: standard input is a terminal; pipe a core in "
                     "(coredumpctl dump PID | coreepi inspect -)")
            _spool(sys.stdin.buffer, spool, limit, core)
        else:
            with open(core, "rb") as source:
                _spool(source, spool, limit, core)
        spool.flush()
        yield Path(spool.name)


def _spool(source: IO[bytes], spool: IO[bytes], limit: int, core: Path) -> None:
    """Copy ``source`` to ``spool`` (binary files), failing past ``limit`` bytes."""
    written = 0
    while chunk := source.read(_CHUNK):
        written += len(chunk)
        if written > limit:
            fail(f"{core}: more than {limit:,} bytes on the pipe, the core size limit "
                 "(COREEPI_MAX_CORE_BYTES, or the free space of $TMPDIR less 2 GiB)")
        spool.write(chunk)
    if not written:
        fail(f"{core}: nothing on the pipe (empty input)")
