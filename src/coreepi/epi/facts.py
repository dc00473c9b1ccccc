"""The facts the attribution rules read, and the evidence items they yield.

:class:`HostSigns` (one host's statistics and hardware signs),
:class:`AssociationFacts` (one group × attribute value), :class:`GroupFacts`
and :class:`HostFacts` are plain frozen records built by
:mod:`.assemble` from the tables; each ``*_evidence`` method returns
:class:`~coreepi.epi.models.Evidence` items: a kind, its numbers and its
values, never a sentence (``coreepi.reporting.phrases`` words them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from coreepi.epi.config import EpiConfig
from coreepi.epi.models import (
    AdjustedEstimate,
    Evidence,
    RatesUndetermined,
    RatioStatus,
    Tally,
    TelemetryLead,
    Verdict,
)

__all__ = [
    "AssociationFacts",
    "GroupFacts",
    "HostFacts",
    "HostSigns",
    "WindowExposure",
    "strength",
]


def strength(p: float | None) -> float:
    """Ranking weight of a p-value: ``-log10 p``, capped at 300; 0 without a p-value."""
    if p is None or not math.isfinite(p):
        return 0.0
    return min(300.0, -math.log10(max(p, 1e-300)))


def _tallies(pairs: tuple[tuple[str, int], ...]) -> list[Tally]:
    return [Tally(name=name, count=n) for name, n in pairs]


@dataclass(frozen=True)
class WindowExposure:
    """The window's node-time, as far as its rates (and so any verdict) can rest on it."""

    node_days: float
    """Total exposure of the fleet in the window, node-days."""
    hosts: int
    """Hosts with node-time > 0 in the window."""
    hosts_with_crashes: int

    def rates_undetermined(self, config: EpiConfig) -> RatesUndetermined | None:
        """Why the window's rates mean nothing, or None when they do: ``no-exposure``
        (0 node-days); ``thin-exposure`` (under ``config.min_rate_node_days``, or fewer
        hosts with exposure than with crashes: most of the crashing fleet is unobserved).
        The one place this condition lives (the window's reason and the group and host
        rules ``exposure-too-thin`` read it)."""
        if self.node_days <= 0:
            return "no-exposure"
        if self.node_days < config.min_rate_node_days or self.hosts < self.hosts_with_crashes:
            return "thin-exposure"
        return None

    def evidence(self, config: EpiConfig) -> Evidence:
        """The window's exposure falls short of any verdict (kind ``window-exposure``)."""
        return Evidence(
            kind="window-exposure", supports="undetermined", node_days=self.node_days,
            hosts=self.hosts, hosts_with_crashes=self.hosts_with_crashes,
            threshold=config.min_rate_node_days, note=self.rates_undetermined(config),
            strength=1.0,
        )  # fmt: skip


@dataclass(frozen=True)
class HostSigns:
    """Per-host facts that point at hardware (computed for every host, vectorized)."""

    host_id: str
    crashes: int
    expected: float
    sir: float | None
    sir_status: RatioStatus
    sir_lower: float | None
    sir_upper: float | None
    p_value: float | None
    distinct_signatures: int
    expected_distinct: float
    private_signatures: int
    hardware_phenotype_crashes: int
    hardware_phenotypes: tuple[tuple[str, int], ...]
    hardware_events: int
    crashes_after_hardware_event: int
    telemetry_kinds: tuple[tuple[str, int], ...]
    telemetry_example: str | None
    telemetry_days: float
    telemetry_lead: TelemetryLead | None = None
    """The commonest hardware event before its crashes (None: fall back to the kind counts)."""
    node_days: float = 0.0
    exposure_sufficient: bool = True
    """At least ``min_host_node_days`` of exposure: tests about this host mean something."""

    def insufficient_evidence(self, config: EpiConfig) -> Evidence:
        """The host's exposure is under the threshold of any test."""
        return Evidence(
            kind="insufficient-exposure", supports="undetermined", host_ids=[self.host_id],
            observed=self.crashes, node_days=self.node_days,
            threshold=config.min_host_node_days, strength=1.0,
        )  # fmt: skip

    def excess(self, config: EpiConfig) -> bool:
        """Improbably many crashes for the host's exposure (never under its threshold): SIR ≥
        ``min_sir`` and p < ``host_sir_p``, or p < ``host_sir_p_strong`` when the host shows
        at least ``strong_hardware_signs`` hardware signs."""
        if not (self.exposure_sufficient and self.p_value is not None and self.sir is not None
                and self.sir >= config.min_sir):
            return False
        if self.p_value < config.host_sir_p:
            return True
        return (self.p_value < config.host_sir_p_strong
                and len(self.signs(config)) >= config.strong_hardware_signs)

    def signs(self, config: EpiConfig) -> list[Evidence]:
        """The hardware signs of this host, each as evidence for hardware-suspect."""
        out: list[Evidence] = []
        hw: Verdict = "hardware-suspect"
        hosts = [self.host_id]
        if (
            self.distinct_signatures >= 3
            and self.distinct_signatures >= config.diversity_ratio * self.expected_distinct
        ):
            out.append(Evidence(
                kind="diversity", supports=hw, host_ids=hosts,
                observed=self.distinct_signatures, total=self.crashes,
                expected=self.expected_distinct,
                strength=3.0
                + min(10.0, self.distinct_signatures / max(self.expected_distinct, 0.1)),
            ))  # fmt: skip
        if self.private_signatures >= config.min_private_signatures:
            out.append(Evidence(
                kind="private-signatures", supports=hw, host_ids=hosts,
                observed=self.private_signatures,
                strength=3.0 + min(10.0, float(self.private_signatures)),
            ))  # fmt: skip
        if (
            self.hardware_phenotype_crashes > 0
            and self.hardware_phenotype_crashes >= config.host_hardware_share * max(self.crashes, 1)
        ):
            out.append(Evidence(
                kind="hardware-phenotypes", supports=hw, host_ids=hosts,
                observed=self.hardware_phenotype_crashes, total=self.crashes,
                tallies=_tallies(self.hardware_phenotypes[:4]),
                strength=3.0 + 10.0 * self.hardware_phenotype_crashes / max(self.crashes, 1),
            ))  # fmt: skip
        if self.crashes_after_hardware_event > 0:
            out.append(Evidence(
                kind="telemetry", supports=hw, host_ids=hosts,
                observed=self.crashes_after_hardware_event, total=self.crashes,
                tallies=_tallies(self.telemetry_kinds), example=self.telemetry_example,
                window_days=self.telemetry_days, lead=self.telemetry_lead,
                strength=5.0 + min(10.0, float(self.hardware_events)),
            ))  # fmt: skip
        return out

    def sir_evidence(self, supports: Verdict | None) -> Evidence:
        """The host's observed vs expected crashes (SIR, exact CI, one-sided p)."""
        return Evidence(
            kind="sir", supports=supports, host_ids=[self.host_id],
            observed=self.crashes, expected=self.expected, ratio=self.sir,
            ratio_status=self.sir_status, ci_low=self.sir_lower, ci_high=self.sir_upper,
            p=self.p_value, strength=strength(self.p_value),
        )  # fmt: skip


@dataclass(frozen=True)
class AssociationFacts:
    """One group's crude (and adjusted) rate ratio for one attribute value."""

    attribute: str
    attribute_class: str
    value: str
    crashes: int
    share_of_group: float | None
    irr: float | None
    irr_status: RatioStatus
    irr_lower: float | None
    irr_upper: float | None
    p_value: float | None
    q_value: float | None
    adjusted_irr: float | None = None
    q_family: str | None = None
    adjusted_status: RatioStatus | None = None
    adjusted_lower: float | None = None
    adjusted_upper: float | None = None
    adjusted_for: tuple[str, ...] = ()
    adjustment_note: str | None = None
    adjustment_assessable: bool | None = None
    """None: no model was needed; False: confounding could not be assessed."""
    adjusted_method: str | None = None
    hosts_affected: int | None = None
    hosts_exposed: int | None = None
    rest_hosts_affected: int | None = None
    rest_hosts_exposed: int | None = None
    host_p_value: float | None = None
    clustered_hosts: tuple[str, ...] = ()
    clustered_crashes: int = 0

    def host_agrees(self, config: EpiConfig) -> bool:
        """The host-level comparison agrees (or could not be made: per-host exposure unknown)."""
        return self.host_p_value is None or self.host_p_value <= config.host_level_p

    def host_clustered(self, config: EpiConfig) -> bool:
        """A few hosts hold most of the value's crashes: they, not the value, explain them."""
        return self.crashes > 0 and (
            self.clustered_crashes >= config.host_cluster_share * self.crashes)

    def host_evidence(self, config: EpiConfig) -> list[Evidence]:
        """The host-level comparison, host clustering and an unassessable adjustment, as
        evidence about this association."""
        out: list[Evidence] = []
        where = dict(attribute=self.attribute, level=self.value)
        if self.host_clustered(config):
            out.append(Evidence(
                kind="host-clustered", supports="software", host_ids=list(self.clustered_hosts),
                observed=self.clustered_crashes, total=self.crashes,
                hosts=len(self.clustered_hosts), strength=6.0, **where,  # type: ignore[arg-type]
            ))  # fmt: skip
        if self.hosts_affected is not None:
            out.append(Evidence(
                kind="host-level", supports=None, observed=self.hosts_affected,
                exposed=self.hosts_exposed, rest_observed=self.rest_hosts_affected,
                rest_exposed=self.rest_hosts_exposed, p=self.host_p_value,
                strength=strength(self.host_p_value) / 2, **where,  # type: ignore[arg-type]
            ))  # fmt: skip
        if self.adjustment_assessable is False:
            out.append(Evidence(
                kind="adjustment-not-estimable", supports="undetermined",
                note=self.adjustment_note, adjusted=self._adjusted(), strength=2.0,
                **where,  # type: ignore[arg-type]
            ))  # fmt: skip
        return out

    def crude_significant(self, config: EpiConfig) -> bool:
        """q ≤ fdr_q, IRR ≥ min_irr (or unbounded) and a CI above 1."""
        return (
            self.q_value is not None
            and self.q_value <= config.fdr_q
            and (
                self.irr_status == "unbounded"
                or (self.irr is not None and self.irr >= config.min_irr)
            )
            and self.irr_lower is not None
            and self.irr_lower > 1.0
        )

    def survives_adjustment(self, config: EpiConfig) -> bool:
        """No model needed, or an assessable adjusted ratio that stays ≥ min_irr above 1.
        Fails closed: a model that was needed and could not estimate does not survive."""
        if self.adjustment_assessable is None:
            return True
        if not self.adjustment_assessable:
            return False
        return (
            (self.adjusted_status == "unbounded"
             or (self.adjusted_irr is not None and self.adjusted_irr >= config.min_irr))
            and self.adjusted_lower is not None
            and self.adjusted_lower > 1.0
        )

    def _adjusted(self) -> AdjustedEstimate | None:
        if self.adjusted_status is None:
            return None
        return AdjustedEstimate(
            ratio=self.adjusted_irr, ratio_status=self.adjusted_status,
            ci_low=self.adjusted_lower, ci_high=self.adjusted_upper,
            adjusted_for=list(self.adjusted_for), method=self.adjusted_method,
        )  # fmt: skip

    def evidence(self, config: EpiConfig) -> Evidence | None:
        """``rate-ratio`` when crude-significant (supports the verdict of its attribute
        class; with the adjusted estimate or the note); ``confounding`` when adjustment
        explains it away (the adjusted ratio falls below ``min_irr``); None when not
        significant."""
        if not self.crude_significant(config):
            return None
        adjusted = self._adjusted()
        common = dict(
            attribute=self.attribute, level=self.value, observed=self.crashes,
            ratio=self.irr, ratio_status=self.irr_status, ci_low=self.irr_lower,
            ci_high=self.irr_upper, p=self.p_value, q=self.q_value, q_family=self.q_family,
            adjusted=adjusted,
        )  # fmt: skip
        # "explained away" only when the adjusted ratio itself falls below min_irr; one that
        # stays large with a wide CI (two proxies of one cause adjusted for each other) is
        # imprecise, not confounded: it stays a rate-ratio, with the adjusted estimate shown
        if (self.adjustment_assessable and not self.survives_adjustment(config)
                and self.adjusted_status == "finite" and self.adjusted_irr is not None
                and self.adjusted_irr < config.min_irr):
            return Evidence(kind="confounding", supports=None,
                            strength=strength(self.q_value) / 2, **common)  # type: ignore[arg-type]
        supports: Verdict | None = {  # type: ignore[assignment]
            "environment": "environment-triggered",
            "hardware": "hardware-suspect",
        }.get(self.attribute_class, "software")
        if not self.survives_adjustment(config):
            supports = None  # imprecise or not assessable after adjustment: names nothing
        note = self.adjustment_note if adjusted is None else None
        return Evidence(kind="rate-ratio", supports=supports, strength=strength(self.q_value),
                        note=note, **common)  # type: ignore[arg-type]


@dataclass(frozen=True)
class GroupFacts:
    """One crash group: size, spread over hosts, hardware phenotypes, associations."""

    kind: str
    key: str
    crashes: int
    hosts: int
    hardware_phenotype_crashes: int
    hardware_phenotypes: tuple[tuple[str, int], ...]
    top_host: str | None
    top_host_crashes: int
    top_host_expected: float | None
    top_host_p: float | None
    top_host_signs: HostSigns | None
    associations: tuple[AssociationFacts, ...] = field(default=())
    exposure: WindowExposure | None = None
    """The window's exposure (None: the group is judged on its own facts, as in the rule
    tests)."""

    @property
    def top_share(self) -> float:
        return self.top_host_crashes / self.crashes if self.crashes else 0.0

    def concentrated(self, config: EpiConfig) -> bool:
        return (
            self.top_share >= config.host_concentration_share
            and self.top_host_p is not None
            and self.top_host_p < config.host_concentration_p
        )

    def rest_too_few_beside_hardware_host(self, config: EpiConfig) -> bool:
        """The top host shows hardware signs and the crashes on the other hosts are fewer
        than ``min_group_crashes``: the group is that host's crashes plus too few others
        to call it anything (software needs a group that stands without the suspect)."""
        return (
            self.top_host_signs is not None
            and len(self.top_host_signs.signs(config)) >= config.min_hardware_signs
            and self.crashes - self.top_host_crashes < config.min_group_crashes
        )

    def rest_evidence(self, config: EpiConfig) -> Evidence:
        """The group's crashes beside its top host (which shows hardware signs)."""
        return Evidence(
            kind="rest-beside-hardware-host", supports="undetermined",
            host_ids=[self.top_host] if self.top_host else [],
            observed=self.crashes - self.top_host_crashes, total=self.crashes,
            hosts=self.hosts - 1, minimum=config.min_group_crashes, strength=1.0,
        )  # fmt: skip

    def hardware_share(self) -> float:
        return self.hardware_phenotype_crashes / self.crashes if self.crashes else 0.0

    def concentration_evidence(self, supports: Verdict | None) -> Evidence:
        """The top host's share of the group against its expectation (one-sided Poisson p)."""
        return Evidence(
            kind="host-concentration", supports=supports,
            host_ids=[self.top_host] if self.top_host else [],
            observed=self.top_host_crashes, total=self.crashes,
            expected=self.top_host_expected, p=self.top_host_p,
            strength=strength(self.top_host_p),
        )  # fmt: skip

    def hardware_evidence(self) -> Evidence:
        """The group's crashes with a hardware-indicative phenotype."""
        return Evidence(
            kind="hardware-phenotypes", supports="hardware-suspect",
            observed=self.hardware_phenotype_crashes, total=self.crashes,
            tallies=_tallies(self.hardware_phenotypes[:4]),
            strength=3.0 + 10.0 * self.hardware_share(),
        )  # fmt: skip

    def spread_evidence(self, config: EpiConfig) -> Evidence:
        """How many hosts share the group, with the top host's count and expectation."""
        return Evidence(
            kind="fleet-spread",
            supports="software" if self.hosts >= config.min_spread_hosts else None,
            total=self.crashes, hosts=self.hosts,
            host_ids=[self.top_host] if self.top_host else [],
            observed=self.top_host_crashes if self.top_host else None,
            share=self.top_share if self.top_host else None,
            expected=self.top_host_expected if self.top_host else None,
            strength=2.0 + math.log10(max(self.hosts, 1)),
        )  # fmt: skip


@dataclass(frozen=True)
class HostFacts:
    """A host's signs and the verdicts of the groups holding its crashes."""

    signs: HostSigns
    group_verdicts: tuple[tuple[Verdict, int], ...]
    """Crash counts of this host per verdict of the signature group holding them,
    largest first (crashes in no analysed group count as undetermined)."""
    exposure: WindowExposure | None = None
    """The window's exposure (None: the host is judged on its own facts)."""

    def majority(self) -> tuple[Verdict, int] | None:
        if not self.group_verdicts:
            return None
        verdict, n = self.group_verdicts[0]
        return (verdict, n) if 2 * n > self.signs.crashes else None
