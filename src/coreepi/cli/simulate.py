"""``coreepi simulate`` and ``coreepi demo``: a simulated fleet of real cores
(:mod:`coreepi.simulate`), and the whole product run on it."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from coreepi.cli.basics import fail
from coreepi.errors import InputError

if TYPE_CHECKING:
    from coreepi.simulate import SimulationResult

__all__ = ["register"]

#: status of a simulation that made none of its planned crashes
EXIT_NOTHING_MADE = 1


def simulate(
    scenario: Annotated[
        str | None,
        typer.Argument(
            help="Scenario TOML file, or a bundled scenario's name: reference (200 hosts, "
                 "30 days, ~300 cores) or reference-small (40 hosts, 14 days, ~40 cores). "
                 "Default: "
                 "reference. The format: docs/simulate.md, or --example.",
            metavar="SCENARIO",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Fleet directory to write (relative to the "
                     "current directory or absolute)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same plan.")] = 1,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Cores made at once (default: CPUs).")
    ] = None,
    example: Annotated[
        bool, typer.Option("--example", help="Print the reference scenario (every key "
                           "explained in its comments) and exit: coreepi simulate --example "
                           "> my.toml.")
    ] = False,
) -> None:
    """Simulate a fleet with planted diseases and real cores: writes a fleet
    directory (hosts.csv, exposure.csv, telemetry.jsonl, crashes/, symbols/)
    plus truth.json and run.json. A planned crash whose runs all end without
    a crash is named on stderr as it fails. Exit status: 0 when every planned
    crash was made, 0 with a warning line when some were, 1 when none was
    (the reason on stderr), 2 for a bad scenario or option."""
    from rich.console import Console

    from coreepi.simulate import bundled_scenario, resolve_scenario
    from coreepi.simulate import simulate as run_simulation
    from coreepi.simulate.cores import progress_reporter
    from coreepi.simulate.workloads import BuildError

    if example:
        sys.stdout.write(bundled_scenario("reference").read_text(encoding="utf-8"))
        return
    if out is None:
        fail("simulate: give the fleet directory to write with --out DIR (-o DIR)")
    console = Console(stderr=True, highlight=False)
    try:
        path = resolve_scenario(scenario)
        result = run_simulation(path, out, seed=seed, jobs=jobs, on_crash=progress_reporter(
            lambda line: console.print(line, soft_wrap=True), "runs done"))
    except (InputError, BuildError) as exc:
        fail(str(exc))
    sys.stdout.write(result.summary() + "\n")
    _judge(result)


def _judge(result: SimulationResult) -> None:
    """Exit 1 with the reason when no planned crash was made; a warning
    line when some were not (the fleet is still usable)."""
    missing = len(result.not_produced)
    if not missing:
        return
    reasons = Counter(result.failures.values())
    why = "; ".join(f"{n} x {reason}" for reason, n in reasons.most_common(3))
    where = f"(every attempt is in {result.out / 'run.json'})"
    if result.crashes_produced == 0:
        sys.stderr.write(f"coreepi: error: no crash made of the {result.crashes_planned} "
                         f"planned: {why} {where}\n")
        raise SystemExit(EXIT_NOTHING_MADE)
    sys.stderr.write(f"coreepi: warning: {missing} of {result.crashes_planned} planned crashes "
                     f"not made: {why} {where}\n")


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
    report, write the HTML report, and compare the findings with the truth.
    Two demos of one scenario and seed share the cached fleet: the second
    waits while the first simulates it."""
    from rich.console import Console

    from coreepi.cli.progress import IngestProgress
    from coreepi.errors import StoreError
    from coreepi.simulate.demo import run_demo
    from coreepi.simulate.workloads import BuildError

    err = Console(stderr=True)
    try:
        run_demo(data_dir, seed=seed, scenario=scenario, fresh=fresh, jobs=jobs, html=html,
                 err=err, ingest_progress=IngestProgress(err) if err.is_terminal else None)
    except (InputError, StoreError, BuildError) as exc:
        fail(str(exc))


def register(app: typer.Typer) -> None:
    """Add ``simulate`` and ``demo`` to ``app``."""
    app.command()(simulate)
    app.command()(demo)
