"""Rollouts: versions of a workload over time.

Every host starts on its workload's first version. A rollout moves a share
of the workload's hosts to a new version, each at its own time, drawn
uniformly over the rollout's days (whole seconds). Exposure intervals are
then split at those times (:func:`coreepi.simulate.exposure.with_changes`),
so ``app_version`` is an attribute of the interval, with its own
denominator.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from coreepi.simulate.exposure import DAY
from coreepi.simulate.hosts import Host
from coreepi.simulate.scenario import Scenario

__all__ = ["initial_versions", "upgrade_times", "version_at"]


def initial_versions(scenario: Scenario, hosts: list[Host]) -> dict[str, str]:
    """host_id -> the first version of its workload."""
    return {h.host_id: scenario.workload_named(h.workload).versions[0].name for h in hosts}


def upgrade_times(
    scenario: Scenario, hosts: list[Host], start: int, rng: np.random.Generator
) -> dict[str, list[tuple[int, str, str]]]:
    """host_id -> [(time, "app_version", version)] for each rollout it takes
    part in (epoch seconds; ``start`` is the window start)."""
    changes: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for r in scenario.rollout:
        members = [h for h in hosts if h.workload == r.workload
                   and all(h.attributes.get(k) == v for k, v in r.when.items())]
        take = rng.random(len(members)) < r.fraction
        lo = start + round(r.start_day * DAY)
        hi = start + round(r.end_day * DAY)
        times = rng.integers(lo, hi + 1, size=len(members))
        for h, t, yes in zip(members, times, take):
            if yes:
                changes[h.host_id].append((int(t), "app_version", r.version))
    return dict(changes)


def version_at(initial: str, changes: list[tuple[int, str, str]], t: int) -> str:
    """The app_version of a host at time ``t`` (epoch seconds)."""
    version = initial
    for when, name, value in sorted(changes):
        if name == "app_version" and when <= t:
            version = value
    return version
