"""What an ingest did, and how it tells its caller as it goes.

:class:`IngestSummary` is filled by every part of :func:`coreepi.ingest.run.ingest`
(fleet tables, host logs, crash files); :class:`IngestObserver` is the
progress hook. :func:`unchanged` is the ledger check that lets a re-run skip
a file already ingested without reading it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from coreepi.model.fleet import Rejections
from coreepi.store import Store

__all__ = ["IngestObserver", "IngestSummary", "unchanged"]


class IngestObserver(Protocol):
    """Progress callbacks (the CLI draws a Rich progress bar with them)."""

    def start(self, total: int) -> None:
        """``total`` crash files will be processed."""

    def advance(self, path: str, outcome: str) -> None:
        """One crash file is done (committed); ``outcome`` is one short line."""


@dataclass
class IngestSummary:
    """What an ingest did. ``crashes_by_status``: new crash rows by core status."""

    files_seen: int = 0
    files_skipped: int = 0
    hosts: int = 0
    exposure_added: int = 0
    exposure_duplicates: int = 0
    events_added: int = 0
    crashes_added: int = 0
    crashes_existing: int = 0
    crashes_paired: int = 0
    crashes_completed: int = 0
    """Crashes counted earlier without their core, whose core arrived in this run."""
    follow_ons: int = 0
    """Kernel reports not stored as crashes: follow-ons of an earlier report of
    the same log and boot (:mod:`coreepi.ingest.followons`)."""
    resource_limited: list[str] = field(default_factory=list)
    """``path: error`` of each artifact whose analysis hit a resource limit
    (``SandboxResult.retryable``) twice: its crash counted ``unreadable``
    with that reason, not a rejection; the next ingest analyses it again."""
    crashes_by_status: Counter[str] = field(default_factory=Counter)
    rejections: Rejections = field(default_factory=Rejections)
    notes: list[str] = field(default_factory=list)
    duration_seconds: float = 0.0

    def lines(self) -> list[str]:
        status = ", ".join(f"{k} {v}" for k, v in sorted(self.crashes_by_status.items()))
        out = [
            f"files: {self.files_seen} seen, {self.files_skipped} unchanged since the last ingest",
            f"hosts: {self.hosts}; exposure intervals: {self.exposure_added} added, "
            f"{self.exposure_duplicates} already stored; telemetry events: {self.events_added} added",
            (f"crashes: {self.crashes_added} added" + (f" ({status})" if status else "")
             + f", {self.crashes_existing} already stored"
             + (f", {self.crashes_paired} joined to the stored crash of the same JVM process "
                "(hs_err log + core)" if self.crashes_paired else "")
             + (f", {self.crashes_completed} counted earlier without their core now completed "
                "by it" if self.crashes_completed else "")
             + (f"; {self.follow_ons} kernel report(s) not counted: follow-ons of an earlier "
                "crash of the same log and boot" if self.follow_ons else "")),
            f"problems: {self.rejections.summary()}",
        ]
        if self.resource_limited:
            out.append(f"resource limits: {len(self.resource_limited)} artifact(s) hit an analysis "
                       "limit twice, counted unreadable but not judged; the next ingest tries "
                       f"them again (--memory-limit raises it): {self.resource_limited[0]}"
                       + (" …" if len(self.resource_limited) > 1 else ""))
        return out + [f"note: {n}" for n in self.notes]

    def __str__(self) -> str:
        return "\n".join(self.lines())



def unchanged(store: Store, key: str, st: os.stat_result) -> bool:
    """True when the ledger row ``key`` (a path, or a path with a qualifier)
    records a file of the size and modification time (ns) of ``st``: the
    file was ingested and has not changed since."""
    entry = store.ledger_entry(key)
    return entry is not None and entry.size == st.st_size and entry.mtime_ns == st.st_mtime_ns
