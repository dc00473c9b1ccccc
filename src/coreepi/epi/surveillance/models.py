"""What a detector returns: a detection with its evidence as data.

A :class:`Detection` names its kind (the alert kinds of ``docs/surveillance.md``),
the subject it is about (labels: ``signature``, ``host_id``, ``attribute``,
``value``), the instant the evidence became sufficient, and the numbers
behind it. Nothing here is worded: ``coreepi.reporting.surveillance``
renders a detection as a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from coreepi.epi.models import num, ratio_status

__all__ = ["KINDS", "Detection", "DetectorParams", "Kind", "ratio_evidence"]

Kind = Literal["new-group", "rising", "rollout-regression", "hardware-suspect-host"]
KINDS: tuple[Kind, ...] = ("new-group", "rising", "rollout-regression", "hardware-suspect-host")


def ratio_evidence(ratio: float, lower: float | None = None,
                   upper: float | None = None) -> dict[str, float | str | None]:
    """A ratio and its 95% limits as JSON-safe evidence: ``ratio``, ``lower``,
    ``upper`` (None when infinite or NaN; limits left out when not given) and
    ``ratio_status`` (``finite``, ``unbounded`` for k/0, ``undefined`` for 0/0),
    as the findings' associations carry them. Alerts go to webhooks as JSON,
    which has no infinity."""
    out: dict[str, float | str | None] = {"ratio": num(ratio), "ratio_status": ratio_status(ratio)}
    if lower is not None:
        out["lower"] = num(lower)
    if upper is not None:
        out["upper"] = num(upper)
    return out


@dataclass(frozen=True)
class Detection:
    """One detector's verdict about one subject.

    ``subject``: the labels that identify it (the alert's dedup key is the
    kind plus these); ``at``: when the evidence first sufficed (UTC; the
    crash that tipped it); ``evidence``: numbers and values (counts, node-days,
    ratios with their CI, dates as ISO strings).
    """

    kind: Kind
    subject: dict[str, str]
    at: pd.Timestamp
    evidence: dict[str, float | int | str | None] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The dedup key: kind, then the subject's labels sorted by name."""
        return self.kind + "|" + "|".join(f"{k}={v}" for k, v in sorted(self.subject.items()))


@dataclass(frozen=True)
class DetectorParams:
    """Every detector's parameters; defaults are the ones the benchmark
    measured (``docs/surveillance.md`` gives their reasons).

    Times in days, rates in crashes per node-day, CUSUM thresholds in nats.
    """

    # new group: a signature never seen before the monitoring window
    new_min_crashes: int = 3
    new_min_hosts: int = 2
    # rising: Poisson CUSUM against the group's own baseline
    window_days: float = 7.0
    baseline_days: float = 28.0
    rising_ratio: float = 3.0
    rising_threshold: float = 12.0
    rising_min_baseline: int = 10
    # new and rising also by phenotype group (each phenotype of a crash is a group)
    phenotype_groups: bool = True
    # rollout regression
    rollout_attributes: tuple[str, ...] = ("kernel", "app_version", "microcode", "firmware", "image")
    rollout_share: float = 0.30
    rollout_start_share: float = 0.05
    rollout_min_crashes: int = 5
    rollout_min_hosts: int = 3
    rollout_min_ratio: float = 1.5
    rollout_alpha: float = 0.01
    # hardware-suspect host: Wald's SPRT per host (rate ratio and hardware share under H1)
    host_ratio: float = 3.0
    host_hw_share: float = 0.3
    host_alpha: float = 1e-6
    host_beta: float = 0.5
    host_stratum: str = "cpu_model"
    host_signatures: bool = True
    # the signature term's H0 also learns each host's own signatures (Pólya urn, its
    # concentration fitted on the fleet): a host's new signatures count as evidence.
    # Off: on the benchmark's fleets it made the healthy hosts' tail heavier than it
    # helped the bad host (docs/surveillance.md, "The host test")
    host_scatter: bool = False
