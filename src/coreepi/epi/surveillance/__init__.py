"""Surveillance over time: detectors that run on crash and exposure frames cut at ``now``.

Pure functions, no I/O (``docs/surveillance.md`` gives each method, its
source and its parameters). :func:`detect` runs them all.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from coreepi.epi.surveillance.clock import FleetClock, HostClocks, days, to_timestamp
from coreepi.epi.surveillance.cusum import (
    CusumRun,
    delay_bound_days,
    poisson_cusum,
    quasi_dispersion,
)
from coreepi.epi.surveillance.groups import (
    GroupBy,
    baseline_days_covered,
    new_groups,
    phenotype_crashes,
    rising_groups,
    windows,
)
from coreepi.epi.surveillance.hosts import clip_drained, drain_recheck, host_runs, suspect_hosts
from coreepi.epi.surveillance.models import KINDS, Detection, DetectorParams, Kind
from coreepi.epi.surveillance.rollout import Rollout, rollout_regressions, rollouts
from coreepi.epi.surveillance.scatter import polya_concentration, signature_llr
from coreepi.epi.surveillance.sprt import SprtRun, marked_poisson_sprt, wald_bounds

__all__ = [
    "KINDS", "WARMUP_SLACK_DAYS", "CusumRun", "GroupBy", "Detection", "DetectorParams", "FleetClock", "HostClocks", "Kind",
    "Rollout", "SprtRun", "baseline_days_covered", "clip_drained", "days", "delay_bound_days", "detect", "drain_recheck", "host_runs",
    "marked_poisson_sprt", "polya_concentration", "signature_llr",
    "new_groups", "phenotype_crashes", "poisson_cusum", "quasi_dispersion", "rising_groups", "rollout_regressions",
    "rollouts", "suspect_hosts", "to_timestamp", "wald_bounds", "windows",
]  # fmt: skip


WARMUP_SLACK_DAYS = 1.0
"""A baseline this much short of ``baseline_days`` still counts as covered: exposure
intervals start at a heartbeat or a day boundary, not at the baseline's first second."""


def detect(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams | None = None,
    *,
    known_signatures: Iterable[str] = (),
    drained: dict[str, pd.Timestamp] | None = None,
    ended_drains: Iterable[tuple[str, pd.Timestamp, pd.Timestamp]] = (),
    kinds: Iterable[Kind] = KINDS,
    covered: float | None = None,
) -> list[Detection]:
    """Every detector of ``kinds`` over the frames up to ``now``, drained
    hosts' exposure cut at their drain time and the spans of ``ended_drains``
    (``(host_id, drained_at, undrained_at)``) taken out
    (:func:`~.hosts.clip_drained`); detections by kind then time.
    ``new-group`` and ``rising`` run on signature groups and, when the
    crash frame has ``phenotypes`` and ``params.phenotype_groups`` is on,
    on phenotype groups (a phenotype is new when absent from the frames
    before the window: the store keeps no older phenotype list). ``new-group``
    stays silent until the frames cover the whole baseline
    (:func:`baseline_days_covered`; ``known_signatures`` non-empty means the
    store is older than the frames): on a young store every background group
    is "new". ``covered``: that function's days for these frames when the
    caller has them already (an evaluation computes them once, for its
    warming-up note too); computed here when None."""
    p = params or DetectorParams()
    exp = clip_drained(exposure, drained or {}, ended_drains)
    wanted = set(kinds)
    pheno = phenotype_crashes(crashes) if p.phenotype_groups else phenotype_crashes(crashes[[]])
    out: list[Detection] = []
    known_signatures = list(known_signatures)
    if covered is None:
        covered = baseline_days_covered(crashes, exposure, now, p,
                                        older_data=bool(known_signatures))
    if "new-group" in wanted and covered >= p.baseline_days - WARMUP_SLACK_DAYS:
        out += new_groups(crashes, now, p, known_signatures)
        out += new_groups(pheno, now, p, by="phenotype")
    if "rising" in wanted:
        out += rising_groups(crashes, exp, now, p)
        out += rising_groups(pheno, exp, now, p, by="phenotype")
    if "rollout-regression" in wanted:
        out += rollout_regressions(crashes, exp, now, p)
    if "hardware-suspect-host" in wanted:
        out += suspect_hosts(crashes, exp, now, p)
    return sorted(out, key=lambda d: (KINDS.index(d.kind), d.at, d.key))
