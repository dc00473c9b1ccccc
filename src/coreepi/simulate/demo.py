"""``coreepi demo``: the whole product on a simulated fleet of real cores.

:func:`run_demo` simulates a scenario (default: the bundled reference
scenario, DESIGN.md's story), ingests it into a demo store, prints the
report, writes the HTML report, and compares what it found with what the
simulator planted (``truth.json``).

- The simulated fleet is cached: ``<cache>/demo/<scenario>-<key>/fleet``
  where ``<cache>`` is ``$COREEPI_CACHE`` or the per-user cache dir and the
  key hashes the scenario file, the seed, the coreepi version and the
  simulator's sources. The first run makes the cores (about 2 minutes on 2
  cores for the reference scenario); later runs reuse them. A lock on the
  entry (``fcntl.flock`` of ``<entry>/lock``) lets one demo simulate it at a
  time; another waits, then uses the fleet.
- The store is a demo data dir, never the user's default store:
  ``<user data dir of "coreepi-demo">/<scenario>-<key>`` unless ``data_dir``
  is given. A data dir the demo made holds ``coreepi-demo.json``; the demo
  refuses to write into a non-empty directory without it, and ``fresh``
  (or a different scenario/seed) empties only a directory with it.
- Ingest is idempotent, so a second run re-analyses nothing and just
  reports.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from coreepi import __version__
from coreepi.errors import InputError
from coreepi.simulate.scenario import resolve_scenario

__all__ = ["DemoResult", "demo_cache_dir", "demo_key", "resolve_scenario", "run_demo"]

MARKER = "coreepi-demo.json"


@dataclass
class DemoResult:
    fleet: Path
    data_dir: Path
    html: Path
    simulated: bool
    """True when this run made the cores (False: the cached fleet was used)."""
    findings: Any
    """:class:`coreepi.epi.FleetFindings`"""
    score: Any
    """:class:`coreepi.simulate.score.FleetScore`"""


def _simulator_digest() -> str:
    """Hash of the simulator's sources (not the scorer): a changed simulator
    invalidates the cache."""
    import coreepi.simulate as sim

    root = Path(sim.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".c", ".cpp", ".h", ".hpp") and p.name != "score.py":
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def demo_key(scenario_path: Path, seed: int) -> str:
    """``<scenario name>-<12 hex digits>``: scenario bytes, seed, version, simulator."""
    h = hashlib.sha256()
    h.update(scenario_path.read_bytes())
    h.update(f"\0seed={seed}\0coreepi={__version__}\0".encode())
    h.update(_simulator_digest().encode())
    return f"{scenario_path.stem}-{h.hexdigest()[:12]}"


def demo_cache_dir() -> Path:
    """``$COREEPI_CACHE/demo`` or the per-user cache dir's ``coreepi/demo``."""
    env = os.environ.get("COREEPI_CACHE")
    if env:
        return Path(env) / "demo"
    import platformdirs

    return Path(platformdirs.user_cache_dir("coreepi")) / "demo"


def _default_data_root() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("coreepi-demo", appauthor=False))


def _prepare_data_dir(data_dir: Path, key: str, fresh: bool) -> None:
    marker = data_dir / MARKER
    if data_dir.exists() and any(data_dir.iterdir()):
        if not marker.is_file():
            raise InputError(
                str(data_dir),
                "is not empty and was not made by `coreepi demo`; give an empty or new "
                "--data-dir (the demo never writes into another store)",
            )
        try:
            old = json.loads(marker.read_text(encoding="utf-8")).get("key")
        except (OSError, ValueError):
            old = None
        if fresh or old != key:
            shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if not marker.is_file():
        marker.write_text(json.dumps({"key": key, "coreepi": __version__}) + "\n",
                          encoding="utf-8")


class _QuietProgress:
    """Ingest progress for a non-terminal: a line every 50 files."""

    def __init__(self, err: Console) -> None:
        self.err = err
        self.total = 0
        self.done = 0

    def start(self, total: int) -> None:
        self.total = total

    def advance(self, path: str, outcome: str) -> None:
        self.done += 1
        if self.done % 50 == 0 or self.done == self.total:
            self.err.print(f"  ingest: {self.done}/{self.total} files", highlight=False)


def run_demo(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    seed: int = 1,
    scenario: str | os.PathLike[str] | None = None,
    fresh: bool = False,
    jobs: int | None = None,
    html: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    out: Console | None = None,
    err: Console | None = None,
    ingest_progress: Any = None,
) -> DemoResult:
    """Simulate (or reuse the cached fleet), ingest, report, compare with the truth.

    ``data_dir``: the demo store (default: a per-user demo data dir keyed by
    scenario and seed). ``scenario``: a TOML path or a bundled name.
    ``fresh``: simulate again and rebuild the store. ``jobs``: processes for
    simulation and analysis (default: CPUs). ``html``: where to write the
    HTML report (default: ``<data_dir>/report.html``). ``cache_dir``: the
    fleet cache (default :func:`demo_cache_dir`). ``out``/``err``: consoles
    for the report and for progress (default: stdout / stderr).
    ``ingest_progress``: the ingest observer (``start(total)``, ``advance(path,
    outcome)``; entered as a context manager when it is one), e.g. the CLI's
    progress bar; default a line on ``err`` every 50 files.
    """
    from coreepi.ingest.run import ingest
    from coreepi.reporting import build_findings, render, render_text
    from coreepi.simulate.score import link_crashes, load_truth, score
    from coreepi.store import open_store

    if out is None:
        out = Console()
        if not out.is_terminal:  # a log or a pipe: wide enough for the tables
            out = Console(width=160)
    err = err or Console(stderr=True)
    path = resolve_scenario(scenario)
    key = demo_key(path, seed)
    entry = Path(cache_dir) / key if cache_dir is not None else demo_cache_dir() / key
    fleet = entry / "fleet"
    data = Path(data_dir) if data_dir is not None else _default_data_root() / key

    _prepare_data_dir(data, key, fresh)  # refuses a foreign store before any work
    with _entry_lock(entry, err):
        simulated = _simulate_once(path, seed, fleet, fresh=fresh, jobs=jobs, err=err)

    err.print(Text(f"demo: ingesting into the demo store {data} (analyses every core)",
                   style="bold"), highlight=False)
    with open_store(data) as store:
        observer = ingest_progress if ingest_progress is not None else _QuietProgress(err)
        with observer if hasattr(observer, "__enter__") else nullcontext():
            summary = ingest([fleet], store, jobs=jobs, observer=observer)
        for line in summary.lines():
            err.print(f"  {line}", highlight=False)
        findings = build_findings(store)
        truth = load_truth(fleet)
        links = link_crashes(store, fleet, truth)
    fleet_score = score(findings, truth, links)

    html_path = Path(html) if html is not None else data / "report.html"
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(render(findings, "html"), encoding="utf-8")
    with _unpadded(out):
        render_text(findings, out)
        _print_score(fleet_score, out)
        out.print(Text(f"HTML report: {html_path.resolve()}", style="bold"))
        out.print(Text(f"Explore further: coreepi report --data-dir {data} "
                       "[--format json|markdown|html]; the fleet (cores, truth.json) is in "
                       f"{fleet}"))
    return DemoResult(fleet, data, html_path, simulated, findings, fleet_score)


@contextmanager
def _entry_lock(entry: Path, err: Console) -> Iterator[None]:
    """Hold the cache entry ``entry`` alone (``fcntl.flock`` on
    ``entry/lock``, which holds the holder's pid) while its fleet is checked
    and simulated: two demos of one scenario and seed would otherwise
    simulate into the same ``fleet.partial`` and delete each other's files.
    A second demo says who holds it and waits; the lock goes with the
    process, so a killed demo leaves none behind."""
    import fcntl

    entry.mkdir(parents=True, exist_ok=True)
    with open(entry / "lock", "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            err.print(f"demo: another coreepi demo is simulating this fleet (pid {holder}) "
                      f"into {entry}; waiting", highlight=False, soft_wrap=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _simulate_once(path: Path, seed: int, fleet: Path, *, fresh: bool, jobs: int | None,
                   err: Console) -> bool:
    """Simulate scenario ``path`` with ``seed`` into ``fleet`` unless a
    finished fleet is cached there (``fresh``: simulate again anyway).
    Returns whether it simulated. Call it holding :func:`_entry_lock`."""
    from coreepi.simulate import simulate
    from coreepi.simulate.cores import progress_reporter

    if fresh and fleet.exists():
        shutil.rmtree(fleet)
    if (fleet / "truth.json").is_file():
        err.print(f"demo: using the simulated fleet cached in {fleet}", highlight=False)
        return False
    err.print(Text(f"demo: simulating scenario {path.stem} (seed {seed}): real programs "
                   "crash under gdb, which writes their cores; this takes a few minutes "
                   "the first time", style="bold"), highlight=False)
    result = simulate(path, fleet, seed=seed, jobs=jobs,
                      on_crash=progress_reporter(
                          lambda line: err.print(line, highlight=False, soft_wrap=True),
                          "runs done"))
    err.print(f"demo: {result.summary()}", highlight=False)
    return True


# blanks at the end of a line, before the colour codes that may close it
_TRAILING_BLANKS = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


@contextmanager
def _unpadded(out: Console) -> Iterator[None]:
    """What is printed on ``out`` inside, without the blanks Rich pads
    wrapped lines and table titles with up to the width (a log or
    ``> demo.out`` keeps no trailing blanks, as ``coreepi report``)."""
    with out.capture() as captured:
        yield
    out.file.write(_TRAILING_BLANKS.sub(r"\1", captured.get()))


def _print_score(sc: Any, out: Console) -> None:
    """What the simulator planted next to what coreepi found."""
    table = Table(title="Planted (truth.json) vs found", title_justify="left", show_lines=True)
    for col, kw in (("disease", {}), ("planted", {"overflow": "fold"}),
                    ("crashes", {"justify": "right"}), ("found", {}), ("", {}),
                    ("deciding evidence", {"overflow": "fold"})):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for row in sc.table():
        table.add_row(Text(row["disease"]), Text(str(row["planted"])), str(row["crashes"]),
                      Text(str(row["found"])),
                      Text("right", style="green") if row["right"]
                      else Text("WRONG", style="bold red"),
                      Text(row["evidence"] + (f"; {row['attribute_evidence']}"
                                              if row["attribute_evidence"]
                                              and row["attribute_evidence"] not in row["evidence"]
                                              else "")))
    out.print(table)
    right = sum(1 for d in sc.scored if d.right)
    hw = (f"hardware-suspect hosts: {len(sc.found_hw_hosts)} found, "
          f"{len(sc.true_hw_hosts & sc.found_hw_hosts)} of {len(sc.true_hw_hosts)} planted")
    out.print(Text(f"{right} of {len(sc.scored)} planted diseases attributed right; {hw}"
                   + (f"; merged groups: {sc.merged}" if sc.merged else "")))
