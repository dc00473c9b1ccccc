"""Exposure: when each host was observed (up, able to crash and report).

A host is observed from when it joins to when it leaves, minus reboots; an
interval is also split where an attribute of the host changes (a new
``app_version`` rolled out), so every interval has one set of attribute
values. All times are whole seconds since the epoch (UTC), intervals are
half-open ``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from coreepi.simulate.hosts import Host
from coreepi.simulate.scenario import ExposureSpec

__all__ = [
    "Interval",
    "host_spans",
    "node_hours",
    "split_at",
    "with_changes",
]

HOUR = 3600
DAY = 86_400


@dataclass(frozen=True, slots=True)
class Interval:
    """``host_id`` observed over [start, end) (epoch seconds), with the
    attribute values that hold over it beyond the host's static ones."""

    host_id: str
    start: int
    end: int
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def seconds(self) -> int:
        return self.end - self.start

    @property
    def hours(self) -> float:
        """Length in hours."""
        return self.seconds / HOUR


def node_hours(intervals: Iterable[Interval]) -> float:
    """Total exposure of ``intervals`` in node-hours (exact: whole seconds / 3600)."""
    return sum(i.seconds for i in intervals) / HOUR


def split_at(interval: Interval, times: Iterable[int]) -> list[Interval]:
    """``interval`` cut at each of ``times`` strictly inside it."""
    cuts = sorted({t for t in times if interval.start < t < interval.end})
    bounds = [interval.start, *cuts, interval.end]
    return [Interval(interval.host_id, a, b, interval.overrides) for a, b in pairwise(bounds)]


def with_changes(
    intervals: Iterable[Interval], changes: Mapping[str, list[tuple[int, str, str]]]
) -> list[Interval]:
    """Split intervals where a host's attribute changes and set the new value.

    ``changes[host_id]`` is a list of ``(time, attribute, value)``; ``value``
    holds from ``time`` on (until the next change of that attribute)."""
    out: list[Interval] = []
    for iv in intervals:
        host_changes = sorted(changes.get(iv.host_id, []))
        for piece in split_at(iv, (t for t, _, _ in host_changes)):
            overrides = dict(piece.overrides)
            for t, name, value in host_changes:
                if t <= piece.start:
                    overrides[name] = value
            out.append(Interval(piece.host_id, piece.start, piece.end, overrides))
    return out


def host_spans(
    hosts: list[Host], start: int, end: int, spec: ExposureSpec, rng: np.random.Generator
) -> list[Interval]:
    """Each host's observed intervals within [start, end): late joiners join
    in the first half, early leavers leave in the second half (seconds drawn
    uniformly), and Poisson reboots take ``reboot_hours`` each out. Sorted by
    host, then start."""
    n = len(hosts)
    span = end - start
    joins = np.full(n, start, dtype=np.int64)
    leaves = np.full(n, end, dtype=np.int64)
    late = rng.random(n) < spec.late_join_fraction
    early = rng.random(n) < spec.early_leave_fraction
    joins[late] = start + rng.integers(0, span // 2, size=int(late.sum()))
    leaves[early] = end - rng.integers(0, span // 2, size=int(early.sum()))
    downtime = round(spec.reboot_hours * HOUR)
    out: list[Interval] = []
    for k, host in enumerate(hosts):
        a, b = int(joins[k]), int(leaves[k])
        days = (b - a) / DAY
        reboots = int(rng.poisson(spec.reboots_per_day * days)) if spec.reboots_per_day else 0
        times = sorted(int(t) for t in a + rng.integers(0, max(b - a, 1), size=reboots))
        cursor = a
        for t in times:
            if t > cursor:
                out.append(Interval(host.host_id, cursor, t))
            cursor = max(cursor, t + downtime)
        if cursor < b:
            out.append(Interval(host.host_id, cursor, b))
    return out
