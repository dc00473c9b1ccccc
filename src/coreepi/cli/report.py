"""``coreepi report``: the stored crashes studied as a population, in four
formats; the text fits the terminal and goes through a pager when long."""

from __future__ import annotations

import os
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coreepi.cli.common import DataDir, data_dir_or_default, fail, window
from coreepi.errors import InputError, StoreError

if TYPE_CHECKING:
    from coreepi.epi.models import FleetFindings

__all__ = ["register", "report"]

# no terminal (a pipe, a file, a test): wide enough for every table of the
# details, as `--out FILE` has always been
PIPE_WIDTH = 160


def report(
    data_dir: DataDir = None,
    since: Annotated[str | None, typer.Option(
        "--since", metavar="TIME", help="Window start, ISO-8601 (default: all data).")] = None,
    until: Annotated[str | None, typer.Option(
        "--until", metavar="TIME", help="Window end, exclusive, ISO-8601.")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", "-f", metavar="FORMAT", help="text, json, markdown or html.")] = "text",
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", metavar="FILE", help="Write here instead of standard output.")] = None,
    details: Annotated[bool, typer.Option(
        "--details", help="Text: the full tables after the answers.")] = False,
    no_pager: Annotated[bool, typer.Option("--no-pager", help="Never use a pager.")] = False,
) -> None:
    """Study the stored crashes as a population: the answers first (suspect
    hosts, bugs and what triggers them), then groups, rates, suspect hosts and
    attribute associations with their evidence."""
    from coreepi.reporting import FORMATS

    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    lo, hi = window(since, until)
    where = data_dir_or_default(data_dir)
    if not where.is_dir():
        fail(f"{where}: no such data dir (run `coreepi ingest FLEET --data-dir {where}` first)")
    try:
        findings = _findings(where, lo, hi)
    except (StoreError, InputError) as exc:
        fail(str(exc))
    if findings is None:
        sys.stderr.write(f"coreepi: nothing to report: {where} holds no crashes or exposure "
                         "yet; run `coreepi ingest FLEET` first\n")
        return
    if fmt != "text" or out is not None:
        from coreepi.reporting import render

        text = render(findings, fmt, width=PIPE_WIDTH, details=details) if fmt == "text" \
            else render(findings, fmt)
        if out is None:
            sys.stdout.write(text)
        else:
            out.write_text(text, encoding="utf-8")
        return
    _show_text(findings, details=details, pager=not no_pager)


def _findings(where: Path, lo: datetime | None, hi: datetime | None) -> FleetFindings | None:
    """The findings over the window, or None when the store is empty."""
    from coreepi.reporting import build_findings
    from coreepi.store import open_store

    with open_store(where, read_only=True) as store:
        counts = store.counts()
        if not counts["crashes"] and not counts["exposure"]:
            return None
        return build_findings(store, lo, hi)


def _show_text(findings: FleetFindings, *, details: bool, pager: bool) -> None:
    """The text report at the terminal's width (colour on a terminal), paged
    when it does not fit the screen."""
    import io

    from rich.console import Console

    from coreepi.reporting import render_text

    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size((PIPE_WIDTH, 24)).columns if tty else _env_width()
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=tty, color_system="auto" if tty
                      else None, highlight=False, emoji=False, soft_wrap=False)
    render_text(findings, console, details=details)
    if tty and pager:
        from coreepi.cli.pager import page

        page(buf.getvalue())
    else:
        sys.stdout.write(buf.getvalue())


def _env_width() -> int:
    """``$COLUMNS`` when set (a caller fixing the width, as tests do), else :data:`PIPE_WIDTH`."""
    try:
        return max(40, int(os.environ["COLUMNS"]))
    except (KeyError, ValueError):
        return PIPE_WIDTH


def register(app: typer.Typer) -> None:
    app.command()(report)
