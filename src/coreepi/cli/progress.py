"""Progress display for long commands (ingest): a Rich bar with rate and ETA
on a terminal, one plain line per finished file otherwise (logs, tests)."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

__all__ = ["IngestProgress"]


class _RateColumn(ProgressColumn):
    """Files per second over the run so far."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- files/s" if speed is None else f"{speed:.1f} files/s", style="cyan")


class IngestProgress:
    """An :class:`coreepi.ingest.summary.IngestObserver`; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.interactive = self.console.is_terminal
        self._progress: Progress | None = None
        self._task: int | None = None
        self._done = 0
        self._total = 0

    def __enter__(self) -> IngestProgress:
        if self.interactive:
            self._progress = Progress(
                TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), _RateColumn(),
                TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                console=self.console, transient=False,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)

    def start(self, total: int) -> None:
        self._total = total
        if self._progress is not None:
            self._task = self._progress.add_task("ingest", total=total)

    def advance(self, path: str, outcome: str) -> None:
        self._done += 1
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)
        else:
            sys.stderr.write(f"coreepi: ingest [{self._done}/{self._total}] {path}: {outcome}\n")
            sys.stderr.flush()
