"""EpiConfig: every threshold and size limit of the epidemiology engine.

The defaults are justified in ``docs/epidemiology.md`` ("Attribution rules and
thresholds"); a test checks that every field is documented there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EpiConfig"]


@dataclass(frozen=True)
class EpiConfig:
    """Thresholds and limits. Times are days; rates are per ``rate_per`` node-days."""

    # --- statistics --------------------------------------------------------------
    alpha: float = 0.05
    """1 - confidence level of every interval (0.05: 95% intervals)."""
    rate_per: float = 1000.0
    """Rates are crashes per this many node-days."""
    fdr_q: float = 0.05
    """An attribute association is significant when its BH q-value ≤ this."""
    min_irr: float = 2.0
    """An association counts as evidence only when its rate ratio is ≥ this (and its CI
    excludes 1): a doubling is the smallest effect worth an operator's attention."""

    # --- sizes ---------------------------------------------------------------------
    max_groups: int = 200
    """Signature groups analysed in depth (the largest by crash count). Phenotype groups
    are few and all analysed, up to the same limit."""
    max_hosts: int = 200
    """Hosts reported in FleetFindings.hosts: every hardware-suspect host first, then
    by SIR p-value."""
    max_associations_per_group: int = 20
    """Attribute associations kept per group in the findings (the smallest p first)."""
    max_levels: int = 50
    """Attribute values tested per attribute: the most exposed ones; the rest are pooled
    into the value ``(other)``."""

    # --- numeric attributes ----------------------------------------------------------
    numeric_min_distinct: int = 12
    """A numeric attribute with at least this many distinct values is binned into
    strata; with fewer, each value is its own level (e.g. NUMA node count)."""
    numeric_bins: int = 4
    """Number of node-time-weighted quantile strata (4: quartiles of exposure)."""
    strata_edges: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Fixed inner bin edges per attribute, e.g. {"load1": (4.0, 16.0)}; used instead of
    quantiles."""

    # --- attribute classes -------------------------------------------------------------
    environment_attributes: tuple[str, ...] = (
        "kernel",
        "hypervisor",
        "microcode",
        "bios",
        "firmware",
        "driver",
        "vbios",
        "os",
        "libc",
        "runtime",
    )
    """An attribute whose name has one of these words (case-insensitive; the name is split
    into words at ``_``, ``-``, ``.`` and spaces) is an environment attribute: a software
    bug woken by it is ``environment-triggered``."""
    hardware_attributes: tuple[str, ...] = (
        "cpu",
        "gpu",
        "dimm",
        "board",
        "memory",
        "stepping",
        "socket",
    )
    """An attribute whose name has one of these words is a hardware attribute (checked
    after the environment words, so ``gpu_driver`` is environment, ``gpu_model`` hardware)."""

    # --- group attribution ---------------------------------------------------------------
    min_group_crashes: int = 5
    """A group with fewer crashes is ``undetermined``: with 4 crashes a single host can
    hold them all by chance in a small fleet."""
    host_concentration_share: float = 0.5
    """A group is host-concentrated when at least this share of it is on one host ..."""
    host_concentration_p: float = 1e-6
    """... and that host's count is this improbable under the group's fleet rate (one-sided
    exact Poisson; 1e-6 survives a Bonferroni correction over 10^4 hosts at 0.01)."""
    min_spread_hosts: int = 3
    """A group is fleet-spread (software or environment) when it is on at least this many
    hosts and not host-concentrated."""
    hardware_phenotype_share: float = 0.5
    """A group whose crashes are at least this share hardware-indicative phenotypes
    (sigbus-mce, stack-misaligned, possible-bit-flip …) leans hardware-suspect."""
    environment_min_share: float = 0.8
    """An environment association explains a group when at least this share of the
    group's crashes (with a known value) carry the associated value."""

    # --- unit of replication: the host -----------------------------------------------
    host_cluster_share: float = 0.5
    """A group (or the crashes of its explaining association) is host-clustered when the
    hosts holding improbably many of its crashes — one-sided exact Poisson p <
    ``host_concentration_p`` against the rate of the hosts that share the value — hold at
    least this share of them: the crashes then point at those hosts (a job they run), not
    at the attribute."""
    host_level_p: float = 0.05
    """The host-level comparison (Fisher exact test of hosts with a crash among the hosts
    exposed to the value vs the rest) must have p ≤ this for a verdict to name an
    attribute: an intersection-union test (Berger 1982) with the crash-level q-value."""
    min_value_hosts: int = 2
    """An attribute value (and the rest of its attribute) must have exposure on at least
    this many hosts to be tested: with one host the value cannot be told from the host
    (its node-days are not independent units), so the row keeps its counts but no p-value,
    ratio test or q (``untested: few-hosts``) and is no test in the FDR family. Applied
    where each host's exposure per value is known (intervals, or the store's per-host
    sets); a note says when it is not."""
    min_host_node_days: float = 1.0
    """A host observed for less than this many node-days has too little exposure for any
    test: its SIR is not computed and it is ``undetermined: insufficient exposure``, never
    a suspect (a node's first crashes arrive before its first heartbeat)."""
    min_rate_node_days: float = 1.0
    """A window with less node-time (or with fewer hosts with exposure than hosts with
    crashes) has exposure too thin for rates: the findings keep the numbers, flagged
    (``window.rates_undetermined_reason``), and the reports print no rate. A rate over a
    few node-hours of heartbeats is 1 crash / ~0 node-days: huge, and meaningless."""
    standardize_by: tuple[str, ...] = ("workload",)
    """Attributes whose strata standardize each host's expected count (indirect
    standardization: the fleet rate of each stratum times the host's node-days in it).
    Names absent from the exposure are ignored; () uses the fleet-wide rate."""

    # --- host attribution -------------------------------------------------------------------
    min_host_crashes: int = 3
    """A host with fewer crashes is ``undetermined`` (no statistic can single it out)."""
    host_sir_p: float = 1e-6
    """A host has excess crashes when its one-sided exact Poisson p-value (observed vs
    expected over all groups) is below this."""
    host_sir_p_strong: float = 1e-4
    """... or below this when the host shows at least ``strong_hardware_signs`` signs. The
    signs screen the fleet first: hosts with two independent hardware signs are few (none
    in the null fleets of ``benchmarks/report_attribution.py``; say at most 100 in any
    fleet), and 1e-4 is the same Bonferroni argument (0.01) over that screened family."""
    strong_hardware_signs: int = 2
    """Hardware signs that let a host's excess be judged at ``host_sir_p_strong``."""
    min_sir: float = 5.0
    """... and its SIR is at least this: a 5-fold excess is beyond workload variation
    between hosts of one role."""
    diversity_ratio: float = 1.5
    """A host's crash diversity is hardware-like when observed distinct signatures ≥ this
    × the number the fleet's signature mix predicts for its crash count (a host whose
    crashes are drawn from the fleet mix sits near 1 whatever its crash count)."""
    min_private_signatures: int = 3
    """... or when at least this many of its signatures occur on no other host."""
    host_hardware_share: float = 0.3
    """A host whose crashes are at least this share hardware-indicative phenotypes shows a
    hardware sign."""
    telemetry_days: float = 7.0
    """Telemetry events count as evidence when they precede a crash of the host by at most
    this many days."""
    min_hardware_signs: int = 1
    """Hardware signs (diversity, private signatures, hardware phenotypes, hardware
    telemetry) a host with excess crashes needs to be ``hardware-suspect``."""

    # --- confounding --------------------------------------------------------------------------
    glm_max_attributes: int = 6
    """Attributes adjusted for in one Poisson GLM (the most significant crude ones)."""
    glm_max_fits_per_group: int = 10
    """Adjusted rate ratios computed per group (the most significant crude associations)."""
    glm_max_abs_coef: float = 15.0
    """A fitted log rate ratio beyond ±this (e^15 ≈ 3.3·10^6) is separation, not an
    estimate: the crude ratio is reported instead, with a note."""

    def as_dict(self) -> dict[str, Any]:
        """The configuration as plain JSON-able data (tuples become lists)."""
        data = asdict(self)
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items()} | {
            "strata_edges": {k: list(v) for k, v in self.strata_edges.items()}
        }
