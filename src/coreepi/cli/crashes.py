"""``coreepi list | info | dump | debug``: the stored crashes, as
``coredumpctl list|info|dump|debug`` shows a machine's, from the embedded
store (``--data-dir``) or a server (``--server URL``). Thin commands over
:mod:`coreepi.cli.sources`, :mod:`coreepi.cli.listing` and
:mod:`coreepi.cli.debugger`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from coreepi.cli.basics import write_stdout
from coreepi.cli.common import DataDir, Server, TokenFile, fail, shown, store_target, window
from coreepi.cli.options import BlobsOpt, StoreOpt
from coreepi.cli.sources import CrashSource
from coreepi.errors import InputError, StoreError

if TYPE_CHECKING:
    from coreepi.cli.debugger import GdbSession
    from coreepi.model.report import CrashReport

__all__ = ["register"]

CrashId = Annotated[str, typer.Argument(
    metavar="CRASH_ID", help="A crash id, or its first digits (as `coreepi list` shows it).")]
NoPager = Annotated[bool, typer.Option("--no-pager", help="Never use a pager.")]


@contextmanager
def crash_source(data_dir: Path | None, server: str | None, token_file: Path | None,
                 store: str | None = None, blobs: str | None = None) -> Iterator[CrashSource]:
    """The server at ``server`` when given, else the store (``--store`` or the
    data dir, read-only, its cores in ``blobs``: ``--blobs`` / COREEPI_BLOBS,
    default the data dir's). Errors of the source become one line and exit 2."""
    from coreepi.cli.common import read_token
    from coreepi.cli.sources import ServerSource, StoreSource

    try:
        if server:
            from coreepi.cli.client import ApiClient

            with ApiClient(server, read_token(token_file)) as client:
                yield ServerSource(client)
        else:
            from coreepi.store import open_store

            where = store_target(store, data_dir)
            with open_store(where, read_only=True, blobs=blobs) as opened:
                yield StoreSource(opened, shown(where))
    except (InputError, StoreError) as exc:
        fail(str(exc))


def list_crashes(
    since: Annotated[str | None, typer.Option("--since", metavar="TIME",
                                              help="Captured at or after, ISO-8601.")] = None,
    until: Annotated[str | None, typer.Option("--until", metavar="TIME",
                                              help="Captured before, ISO-8601.")] = None,
    host: Annotated[str | None, typer.Option("--host", metavar="HOST",
                                             help="Only this host's crashes.")] = None,
    signature: Annotated[str | None, typer.Option("--signature", metavar="SIGNATURE",
                                                  help="Only this signature (exact).")] = None,
    phenotype: Annotated[str | None, typer.Option("--phenotype", metavar="NAME",
                                                  help="Only crashes with this phenotype.")] = None,
    verdict: Annotated[str | None, typer.Option(
        "--verdict", metavar="VERDICT",
        help="Only crashes in a group or on a host with this attribution: hardware-suspect, "
        "software, environment-triggered or undetermined (computes the report).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, metavar="N",
                                              help="Only the N most recent.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON array of summaries.")
                           ] = False,
    data_dir: DataDir = None,
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    server: Server = None,
    token_file: TokenFile = None,
    no_pager: NoPager = False,
) -> None:
    """List stored crashes, oldest first: time, id, host, signal, core stored?, signature."""
    from coreepi.cli.listing import VERDICTS, crash_lines, jsonable, select_crashes

    if verdict is not None and verdict not in VERDICTS:
        fail(f"--verdict {verdict!r}: one of {', '.join(VERDICTS)}")
    lo, hi = window(since, until)
    with crash_source(data_dir, server, token_file, store, blobs) as source:
        rows = select_crashes(source, since=lo, until=hi, host=host, signature=signature,
                              phenotype=phenotype, verdict=verdict, limit=limit)
    if json_output:
        write_stdout(json.dumps([jsonable(r) for r in rows], indent=2) + "\n")
        return
    if not rows:
        sys.stderr.write("coreepi: no crash matches\n")
        return
    tty = sys.stdout.isatty()
    lines = crash_lines(rows, os.get_terminal_size().columns if tty else None)
    text = "\n".join(lines) + "\n"
    if no_pager:
        write_stdout(text)
    else:
        from coreepi.cli.pager import page

        page(text)


def info(
    crash_id: CrashId,
    all_threads: Annotated[bool, typer.Option("--all-threads", help="Every thread's frames.")
                           ] = False,
    registers: Annotated[bool, typer.Option("--registers", help="The threads' registers.")
                         ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="The CrashReport as JSON.")] = False,
    data_dir: DataDir = None,
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    server: Server = None,
    token_file: TokenFile = None,
) -> None:
    """Show one stored crash: identity, core, signal, phenotypes, signature, backtrace."""
    with crash_source(data_dir, server, token_file, store, blobs) as source:
        report = source.report(source.resolve(crash_id))
    if json_output:
        write_stdout(report.model_dump_json(indent=2) + "\n")
        return
    from rich.console import Console

    from coreepi.reporting.crash_text import render_identity, render_report
    from coreepi.reporting.crash_warnings import warning_lines

    console = Console(highlight=False)
    render_identity(report, console)
    render_report(report, console, all_threads=all_threads, registers=registers)
    for line in warning_lines(report):
        sys.stderr.write(f"coreepi: analysis warning: {line}\n")


def _write_core(source: CrashSource, report: CrashReport, dst: IO[bytes], scratch: Path) -> int:
    """Write the stored artifact (core or log) of ``report``'s crash, decompressed, to
    ``dst`` (the blob as stored goes through a temporary file in ``scratch``); bytes written.
    Raises :class:`InputError` naming the crash when the blob does not decompress."""
    from coreepi.errors import InputError
    from coreepi.parse.open_input import DecompressionError, open_input
    from coreepi.reporting.artifact_kind import artifact_kind

    written = 0
    with tempfile.NamedTemporaryFile(dir=scratch, prefix="coreepi-core-") as raw:
        source.stored_core(report, raw)
        raw.flush()
        try:
            with open_input(raw.name) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    written += len(chunk)
        except DecompressionError as exc:
            what = artifact_kind(report.source).name
            raise InputError(f"the {what} of crash {report.crash_id}", exc.reason) from None
    return written


def _core_to_file(source: CrashSource, report: CrashReport, path: Path) -> int:
    """The decompressed artifact (core or log) at ``path``, written whole or not
    at all (``path.part`` first); its size in bytes. A write error is one line, exit 2."""
    part = path.with_name(path.name + ".part")
    try:
        with open(part, "wb") as fh:
            size = _write_core(source, report, fh, path.parent)
        part.replace(path)
    except OSError as exc:
        part.unlink(missing_ok=True)
        fail(f"{path}: {exc.strerror or exc}")
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return size


def dump(
    crash_id: CrashId,
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE",
                                                help="Write it here (default: stdout; a core "
                                                "never to a terminal).")] = None,
    data_dir: DataDir = None,
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    server: Server = None,
    token_file: TokenFile = None,
) -> None:
    """Write a crash's stored artifact, decompressed (a core as the kernel wrote
    it, or its kernel log or hs_err log), to FILE or stdout."""
    from coreepi.reporting.artifact_kind import artifact_kind

    with crash_source(data_dir, server, token_file, store, blobs) as source:
        full = source.resolve(crash_id)
        report = source.report(full)  # once: its source names the artifact, its blob is it
        kind = artifact_kind(report.source)
        if output is None and not kind.text and sys.stdout.isatty():
            fail(f"refusing to write a {kind.name} to a terminal: give -o FILE or redirect stdout")
        if output is not None:
            size = _core_to_file(source, report, output)
            sys.stderr.write(f"coreepi: wrote {output} ({size:,} bytes), the {kind.name} of crash "
                             f"{full}\n")
            return
        try:
            _write_core(source, report, sys.stdout.buffer, Path(tempfile.gettempdir()))
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            raise  # the reader stopped early (| head): run_guarded ends quietly
        except OSError as exc:
            fail(f"stdout: {exc.strerror or exc}")


def debug(
    crash_id: CrashId,
    gdb_args: Annotated[list[str] | None, typer.Argument(
        metavar="[-- GDB_ARGS...]", help="Arguments for gdb, after `--` (e.g. -- -batch -ex bt).",
        show_default=False)] = None,
    gdb_args_text: Annotated[str | None, typer.Option(
        "--gdb-args", metavar="ARGS", help="Arguments for gdb as one string (shell-split).")
    ] = None,
    symbol_dir: Annotated[list[Path] | None, typer.Option(
        "--symbol-dir", metavar="DIR",
        help="Executables, libraries and debug files (a fleet's symbols/ or a .build-id "
        "tree), matched by build-id; repeatable.")] = None,
    data_dir: DataDir = None,
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    server: Server = None,
    token_file: TokenFile = None,
) -> None:
    """Open a stored crash in gdb: its core, and its executable and libraries
    found by build-id (sysroot and debug-file-directory set for them)."""
    from coreepi.cli.debugger import gdb_session, run_gdb
    from coreepi.reporting.artifact_kind import artifact_kind

    extra = [*shlex.split(gdb_args_text or ""), *(gdb_args or [])]
    with tempfile.TemporaryDirectory(prefix="coreepi-debug-") as tmp:
        work = Path(tmp)
        # everything is fetched first, so the store is closed while gdb runs
        with crash_source(data_dir, server, token_file, store, blobs) as source:
            full = source.resolve(crash_id)
            report = source.report(full)
            kind = artifact_kind(report.source)
            if not kind.debuggable:
                # gdb would read a text log as an executable
                fail(f"crash {full} came from a {kind.name}, not a core: nothing to debug "
                     f"in gdb (coreepi dump {full} writes the {kind.name})")
            core = work / f"{full}.core"
            _core_to_file(source, report, core)
            dirs = [*(symbol_dir or []), *source.symbol_dirs(report)]
        try:
            session = gdb_session(report, core, work, dirs)
        except InputError as exc:
            fail(str(exc))
        _describe(session, len(report.modules))
        try:
            code = run_gdb(session, extra)
        except InputError as exc:
            fail(str(exc))
    raise typer.Exit(code)


def _describe(session: GdbSession, modules: int) -> None:
    exe = session.exe or "not found (give --symbol-dir)"
    sys.stderr.write(f"coreepi: gdb with the executable {exe}, {len(session.found)} of "
                     f"{modules} modules found by build-id\n")
    for path, build_id in session.missing:
        sys.stderr.write(f"coreepi: not found: {path} (build-id {build_id})\n")


def register(app: typer.Typer) -> None:
    """Add ``list``, ``info``, ``dump`` and ``debug`` to the main app."""
    app.command("list")(list_crashes)
    app.command()(info)
    app.command()(dump)
    app.command()(debug)
