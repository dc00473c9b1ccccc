"""``coreepi ci run`` and ``coreepi postmortem``: thin commands over
:mod:`coreepi.cirun` and :mod:`coreepi.reporting.postmortem`."""

from __future__ import annotations

import os
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from coreepi.cli.basics import write_stdout
from coreepi.cli.options import DataDir, StoreOpt

__all__ = ["ci_app", "postmortem", "register"]

ci_app = typer.Typer(help="Capture and analyse the crashes of a CI job's command.",
                     no_args_is_help=True)

EXIT_GATE = 1
EXIT_INPUT_ERROR = 2


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"coreepi: error: {message}\n")
    raise typer.Exit(EXIT_INPUT_ERROR)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: cannot write: {exc.strerror}")


def _writable(path: Path, option: str) -> None:
    """Fail before CMD runs when ``path`` cannot be written (a long suite run for
    nothing otherwise): its directory missing or not writable, or the file not."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        _fail(f"{option} {path}: cannot write: no directory {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        _fail(f"{option} {path}: cannot write: permission denied")


@ci_app.command("run", context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str], typer.Argument(help="The command (after --).",
                                                 metavar="-- CMD...")],
    capture: Annotated[str, typer.Option("--capture", help="auto, kernel, systemd or ptrace.")
                       ] = "auto",
    junit_xml: Annotated[Path | None, typer.Option("--junit-xml", help="Write JUnit XML here.")
                         ] = None,
    markdown: Annotated[Path | None, typer.Option(
        "--markdown", help="Write a markdown summary (for a PR comment) here.")] = None,
    github: Annotated[bool, typer.Option(
        "--github", help="Print GitHub Actions ::error annotations.")] = False,
    gitlab_codequality: Annotated[Path | None, typer.Option(
        "--gitlab-codequality", help="Write a GitLab code-quality JSON report here.")] = None,
    server: Annotated[str | None, typer.Option(
        "--server", help="coreepi server to match signatures against (read token in "
        "COREEPI_TOKEN).")] = None,
    ui_url: Annotated[str | None, typer.Option(
        "--ui-url", help="Base URL of the UI links (default: --server).")] = None,
    fail_on: Annotated[str, typer.Option(
        "--fail-on", help="any: fail on any crash; new: only on signatures production has "
        "never seen (needs --server).")] = "any",
    cores_dir: Annotated[Path | None, typer.Option(
        "--cores-dir", help="Keep the cores here (default: a temporary directory, removed).")
    ] = None,
    journal_export: Annotated[Path | None, typer.Option(
        "--journal-export", help="systemd mode: read this `journalctl -o json` export "
        "instead of the live journal.")] = None,
) -> None:
    """Run CMD; analyse the core of every process of its tree that dies of a
    fatal signal, without touching core_pattern. Exit status: 1 when the gate
    fails (--fail-on), 2 on bad usage, else the command's own status."""
    from rich.console import Console

    from coreepi.cirun.run import CiError, ci_run
    from coreepi.reporting.ci import markdown_summary, print_summary
    from coreepi.reporting import ci_machine

    if fail_on not in ("any", "new"):
        _fail(f"--fail-on {fail_on!r}: any or new")
    token = os.environ.get("COREEPI_TOKEN", "")
    if server and not token:
        _fail("--server needs a read-scope token in COREEPI_TOKEN")
    if fail_on == "new" and not server:
        _fail("--fail-on new needs --server (what is new is decided by production)")
    for out, option in ((junit_xml, "--junit-xml"), (markdown, "--markdown"),
                        (gitlab_codequality, "--gitlab-codequality")):
        if out is not None:
            _writable(out, option)
    err = Console(stderr=True)

    def said(mode: str, notes: list[str]) -> None:
        for note in notes:
            err.print(f"coreepi: {note}", markup=False, highlight=False, soft_wrap=True)
        err.print(f"coreepi: capture mode: {mode}", markup=False, highlight=False,
                  soft_wrap=True)

    with tempfile.TemporaryDirectory(prefix="coreepi-ci-") as tmp:
        try:
            result = ci_run(command, mode=capture, cores_dir=cores_dir or Path(tmp),
                            journal_export=journal_export, on_mode=said)
        except CiError as exc:
            _fail(str(exc))
        if server:
            from coreepi.cirun.match import MatchError, match_run

            try:
                match_run(result, server, token, ui_url=ui_url)
            except MatchError as exc:
                result.warnings.append(f"no production match: {exc}")
        if cores_dir is None:  # the temporary directory goes away: do not point into it
            for crash in result.crashes:
                crash.core = None
        workspace = Path(os.environ.get("GITHUB_WORKSPACE") or os.environ.get(
            "CI_PROJECT_DIR") or Path.cwd())
        print_summary(result, err)
        if junit_xml:
            _write(junit_xml, ci_machine.junit_xml(result))
        if markdown:
            _write(markdown, markdown_summary(result))
        if gitlab_codequality:
            _write(gitlab_codequality, ci_machine.gitlab_codequality(result, workspace))
        if github:
            sys.stdout.write(ci_machine.github_annotations(result, workspace))
    if result.failed(fail_on):
        raise typer.Exit(EXIT_GATE)
    code = result.returncode
    raise typer.Exit(128 - code if code < 0 else code)


def _utc(value: str, option: str) -> datetime:
    from coreepi.model.fleet import parse_utc

    try:
        return parse_utc(value)
    except (ValueError, OverflowError) as exc:
        _fail(f"{option}: {exc}")


def postmortem(
    since: Annotated[str, typer.Option("--since", help="Window start, ISO-8601 (UTC).")],
    until: Annotated[str, typer.Option("--until", help="Window end, exclusive, ISO-8601.")],
    hosts: Annotated[list[str] | None, typer.Option(
        "--hosts", help="Only these hosts (repeatable, or comma-separated).")] = None,
    attribute: Annotated[list[str] | None, typer.Option(
        "--attribute", help="Only hosts with attribute k=v (repeatable: all must hold).",
        metavar="K=V")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="markdown or html.")] = "markdown",
    base_url: Annotated[str | None, typer.Option(
        "--base-url", help="UI base URL for links (groups, hosts, crashes).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here instead of "
                                             "standard output.")] = None,
    data_dir: DataDir = None,
    store: StoreOpt = None,
) -> None:
    """The crash section of an incident review over [--since, --until): timeline
    of crashes and hardware telemetry, groups with verdicts and evidence, hosts,
    rollouts in the window, recommended actions."""
    from coreepi.errors import StoreError
    from coreepi.reporting.postmortem import build_postmortem
    from coreepi.reporting.postmortem_render import FORMATS, render_postmortem
    from coreepi.cli.common import store_target
    from coreepi.store import open_store

    if fmt not in FORMATS:
        _fail(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    lo, hi = _utc(since, "--since"), _utc(until, "--until")
    if hi <= lo:
        _fail("--until must be after --since")
    pairs = {}
    for item in attribute or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--attribute {item!r}: expected K=V")
        pairs[key] = value
    chosen = [h for item in hosts or [] for h in item.split(",") if h]
    try:
        with open_store(store_target(store, data_dir), read_only=True) as opened:
            pm = build_postmortem(opened, lo, hi, hosts=chosen or None, attributes=pairs)
    except StoreError as exc:
        _fail(str(exc))
    text = render_postmortem(pm, fmt, base_url)
    if out is None:
        write_stdout(text)
    else:
        _write(out, text)


def register(app: typer.Typer) -> None:
    """Add ``ci`` and ``postmortem`` to the root app."""
    app.add_typer(ci_app, name="ci")
    app.command("postmortem")(postmortem)
