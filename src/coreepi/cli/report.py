"""``coreepi report``: the stored crashes studied as a population, in four
formats; the text fits the terminal and goes through a pager when long."""

from __future__ import annotations

import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coreepi.cli.basics import escapes_allowed, write_stdout
from coreepi.cli.common import DataDir, fail, shown, store_target, window
from coreepi.cli.export import EngineOpt, ParquetOpt, SparkRemoteOpt, report_source
from coreepi.cli.options import StoreOpt
from coreepi.errors import InputError, StoreError

if TYPE_CHECKING:
    from coreepi.epi.models import FleetFindings
    from coreepi.store.alert_records import DrainRecord

__all__ = ["register", "report"]

# no terminal (a pipe, a file, a test): wide enough for every table of the
# details, as `--out FILE` has always been
PIPE_WIDTH = 160


def report(
    data_dir: DataDir = None,
    store: StoreOpt = None,
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
    engine: EngineOpt = None,
    parquet: ParquetOpt = None,
    spark_remote: SparkRemoteOpt = None,
) -> None:
    """Study the stored crashes as a population: the answers first (suspect
    hosts, bugs and what triggers them), then groups, rates, suspect hosts and
    attribute associations with their evidence."""
    from coreepi.reporting import FORMATS

    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    lo, hi = window(since, until)
    where = store_target(store, data_dir)
    try:
        findings = _findings(where, lo, hi, (engine, parquet, spark_remote))
    except (StoreError, InputError) as exc:
        fail(str(exc))
    if isinstance(findings, int):
        # an empty store, or a window without crashes: a short report, not an
        # error; the other formats' readers (`| jq .window.crashes`) expect
        # their format, so they get the empty findings and the note on stderr
        note = _empty_report(where, findings, lo, hi) + "\n"
        if fmt == "text":
            sys.stdout.write(note)
            return
        sys.stderr.write(note)
        # without --until the store's span would end the window, maybe before --since
        findings = _findings(where, lo, hi if hi is not None or lo is None
                             else max(lo, datetime.now(UTC)), empty=True)
    drains = _drains(where) if fmt == "text" else {}
    if fmt != "text" or out is not None:
        from coreepi.reporting import render, text_report

        text = (text_report(findings, _env_width(), details=details, drains=drains)
                if fmt == "text" else render(findings, fmt))
        if out is None:
            write_stdout(text)
        else:
            out.write_text(text, encoding="utf-8")
        return
    _show_text(findings, details=details, pager=not no_pager, drains=drains)


def _findings(where: str | Path, lo: datetime | None, hi: datetime | None,
              engine: tuple[str | None, str | None, str | None] = (None, None, None),
              *, empty: bool = False) -> FleetFindings | int:
    """The findings over the window; when the window holds no crash, the
    number of crashes stored in all instead, unless ``empty`` (then the
    findings of the empty window: crashes 0, no group, no host). ``engine``:
    (--engine, --parquet, --spark-remote), see
    :func:`coreepi.cli.export.report_source`."""
    from coreepi.reporting import build_findings
    from coreepi.store import open_store

    with open_store(where, read_only=True) as store:
        if not empty and not store.count_crashes(lo, hi):
            return store.count_crashes()
        return build_findings(report_source(store, *engine), lo, hi)


def _empty_report(where: str | Path, total: int, lo: datetime | None, hi: datetime | None
                  ) -> str:
    """The short report of a window without crashes (``total``: crashes stored in all)."""
    where = shown(where)
    if not total:
        return (f"coreepi report: nothing to report: {where} holds no crashes yet; run "
                f"`coreepi ingest FLEET --data-dir {where}` first")
    span = (f"from {lo:%Y-%m-%d %H:%M} " if lo else "") + (f"until {hi:%Y-%m-%d %H:%M} "
                                                            if hi else "")
    return (f"coreepi report: no crash {span}(UTC). The store holds {total:,} crashes in "
            "all; `coreepi list` shows when they happened.")


def _drains(where: str | Path) -> dict[str, DrainRecord]:
    """The store's drained hosts by host_id: the text report says a drained
    hardware-suspect host is drained instead of recommending a drain."""
    from coreepi.store import open_store

    try:
        with open_store(where, read_only=True) as store:
            return {d.host_id: d for d in store.drained_hosts()}
    except StoreError as exc:
        fail(str(exc))


def _show_text(findings: FleetFindings, *, details: bool, pager: bool,
               drains: dict[str, DrainRecord]) -> None:
    """The text report at the terminal's width (styles on a terminal that
    takes escape sequences), paged when it does not fit the screen."""
    from coreepi.reporting import text_report

    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size((PIPE_WIDTH, 24)).columns if tty else _env_width()
    text = text_report(findings, width, details=details, color=escapes_allowed(),
                       drains=drains)
    if tty and pager:
        from coreepi.cli.pager import page

        page(text)
    else:
        write_stdout(text)


def _env_width() -> int:
    """``$COLUMNS`` when set (a caller fixing the width, as tests do), else :data:`PIPE_WIDTH`."""
    try:
        return max(40, int(os.environ["COLUMNS"]))
    except (KeyError, ValueError):
        return PIPE_WIDTH


def register(app: typer.Typer) -> None:
    app.command()(report)
