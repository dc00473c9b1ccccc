"""What every report format shows, chosen once: the rows of its three tables.

* :func:`top_groups` — crash groups by rate (signature groups and phenotype
  groups), each with its attribution and top evidence sentence;
* :func:`suspect_hosts` — hosts with a verdict worth reading (hardware-suspect
  first, as the findings order them);
* :func:`strongest_associations` — the significant attribute associations of
  all groups, smallest p-value first.

Pure functions of :class:`~coreepi.epi.FleetFindings`; the words and number
formats are in :mod:`coreepi.reporting.phrases`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coreepi.epi.models import Association, FleetFindings, GroupFinding, HostFinding
from coreepi.reporting.phrases import rates_note

__all__ = [
    "AssociationRow",
    "groups_title",
    "strongest_associations",
    "suspect_hosts",
    "top_groups",
]


def top_groups(f: FleetFindings, limit: int = 25) -> list[GroupFinding]:
    """Groups by decreasing rate (= crashes inside exposure over the window's
    node-days), then crash count; by crash count alone when the window shows no
    rate (:func:`~coreepi.reporting.phrases.rates_note`); ties: signature groups
    first, then key."""
    by_rate = rates_note(f) is None

    def key(g: GroupFinding) -> tuple[int, int, bool, str]:
        inside = g.crashes if g.crashes_in_exposure is None else g.crashes_in_exposure
        return (-inside if by_rate else 0, -g.crashes, g.kind != "signature", g.key)

    return sorted(f.groups, key=key)[:limit]


def groups_title(f: FleetFindings) -> str:
    """The title of a report's group table: by rate, or by crashes when the window shows
    no rate (the headline says why, once)."""
    if rates_note(f) is not None:
        return "Crash groups by crashes (no rates: see above)"
    return f"Crash groups by rate (per {f.config.get('rate_per', 1000):,.0f} node-days)"


# A host is worth a look when it is accused, or when it crashes more than its
# exposure predicts at the ordinary significance level even if the stricter
# hardware thresholds are not met. A host whose crashes are all explained by
# fleet-wide software bugs ("software") is not a suspect.
WATCH_P = 0.01


def suspect_hosts(f: FleetFindings, limit: int = 20) -> list[HostFinding]:
    """Hardware-suspect and environment-triggered hosts, then hosts whose crash
    excess has an SIR p-value below 0.01 that no verdict explains yet, in
    findings order (hardware-suspect first, then by SIR p-value)."""
    out = [
        h
        for h in f.hosts
        if h.attribution.verdict in ("hardware-suspect", "environment-triggered")
        or (
            h.attribution.verdict == "undetermined"
            and h.p_value is not None
            and h.p_value < WATCH_P
        )
    ]
    return out[:limit]


@dataclass(frozen=True)
class AssociationRow:
    group: GroupFinding
    association: Association

    @property
    def hosts(self) -> str:
        """Hosts with a crash of the group at the value, of the hosts exposed to it
        ("1 of 28"): the host is the unit of replication, and 11 crashes on one host of
        28 are not 11 hosts' evidence; "" when per-host exposure is unknown."""
        a = self.association
        if a.hosts_affected is None or a.hosts_exposed is None:
            return ""
        return f"{a.hosts_affected:,} of {a.hosts_exposed:,}"


def _significant(a: Association, q_max: float) -> bool:
    return a.q_value is not None and a.q_value <= q_max


def strongest_associations(
    f: FleetFindings, limit: int = 20, *, elevated_only: bool = True
) -> list[AssociationRow]:
    """Significant associations (q ≤ ``fdr_q``) of every group, smallest p first, then
    largest ratio. ``elevated_only``: rate ratios above 1 (what raises a rate)."""
    q_max = float(f.config.get("fdr_q", 0.05))
    rows = [
        AssociationRow(g, a)
        for g in f.groups
        for a in g.associations
        if _significant(a, q_max)
        and (not elevated_only or a.irr_status == "unbounded"
             or (a.irr is not None and a.irr > 1.0))
        and (a.irr_lower is None or a.irr_lower > 1.0 or not elevated_only)
    ]
    rows.sort(
        key=lambda r: (
            r.association.p_value if r.association.p_value is not None else 2.0,
            -(r.association.irr if r.association.irr is not None else math.inf),
            r.group.kind != "signature",
            r.group.key,
        )
    )
    return rows[:limit]
