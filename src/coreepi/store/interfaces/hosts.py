"""HostStore: hosts, their exposure intervals (the denominator) and node-time.

A host has static attributes (hosts.csv, heartbeats' host facts); an exposure
interval ``[start, end)`` of a host is observed node-time, with attributes
that override the host's for its span (a kernel upgrade, a new app version).
Intervals of one host never overlap: the store refuses an overlapping one and
says so (:class:`~coreepi.store.ExposureResult`). Times are UTC.

Two reads join exposure to the crash table (which crashes fall in no
interval, and the summed node-time frames), so a backend implements this
interface on the same database as its :class:`~coreepi.store.interfaces.CrashStore`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import abc
from collections.abc import Iterable, Iterator
from datetime import datetime

from coreepi.store.interfaces.session import Transactional
from coreepi.store.records import ExposureResult

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.fleet import ExposureInterval, HostRow
    from coreepi.store.frames import NodeTimeFrames

__all__ = ["HostStore"]


class HostStore(Transactional):
    """Hosts and exposure: write, read as frames, sum as node-time."""

    # -- writes

    @abc.abstractmethod
    def add_hosts(self, hosts: Iterable[HostRow]) -> int:
        """Insert or replace hosts by ``host_id`` (the latest attributes win,
        also within ``hosts``); returns how many rows were written (one per
        distinct host, new or replaced)."""

    @abc.abstractmethod
    def add_exposure(self, intervals: Iterable[ExposureInterval], source: str = "") -> ExposureResult:
        """Insert exposure intervals, idempotent by ``(host_id, start)``.

        An interval stored identically (same host, start, end) is a
        duplicate (counted, not written again); one overlapping another
        stored interval of its host is a conflict (not written; returned with
        the stored interval's start and end). ``source`` (e.g. the file
        name) is kept with each row as ``source:line``. Accepts any number of
        intervals (ingest streams millions; a backend writes them in batches)."""

    # -- reads

    @abc.abstractmethod
    def host_ids(self) -> set[str]:
        """Every stored ``host_id``."""

    @abc.abstractmethod
    def hosts_frame(self) -> pd.DataFrame:
        """One row per host, by ``host_id``: ``host_id`` then one column per
        static attribute in order of first appearance (missing: None/NaN).
        An empty store gives the single column ``host_id``."""

    @abc.abstractmethod
    def exposure_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        """Exposure intervals overlapping ``[since, until)``, clipped to it, by
        ``host_id`` then ``start``.

        Columns: ``host_id`` (str), ``start, end`` (datetime64[…, UTC]),
        ``seconds`` (float, ``end - start``), then one column per attribute:
        the host's static ones merged with the interval's, the interval's
        winning where it gives a value (an attribute named like one of the
        four columns above becomes ``sidecar_NAME``). Built by
        :func:`coreepi.store.frames.exposure_frame_from`."""

    @abc.abstractmethod
    def crashes_outside_exposure(self) -> Iterator[tuple[str, str | None, datetime, str | None]]:
        """``(crash_id, host_id, captured_at (UTC), artifact)`` of every crash
        with a ``captured_at`` that no exposure interval of its host covers,
        by ``captured_at`` then ``crash_id`` (meaningful once exposure is
        loaded: such crashes have no denominator)."""

    def node_time_frames(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> NodeTimeFrames | None:
        """Crashes of ``[since, until)`` with the exposure summed in the database
        (:class:`~coreepi.store.frames.NodeTimeFrames`): the fast path for big
        fleets. Without ``since`` / ``until``: the exposure's span widened to
        cover every crash. ``None`` when the backend has no such path (this
        default); callers then use the crash and exposure frames, which give
        the same findings, slower."""
        return None
