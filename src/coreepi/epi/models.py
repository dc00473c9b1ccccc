"""FleetFindings: what :func:`coreepi.epi.analyze_fleet` returns.

Pydantic models with stable JSON keys (documented, key by key, in
``docs/epidemiology.md``; a test checks the two agree). Numbers that are
undefined or unbounded (a rate over zero exposure, the upper limit of a
ratio whose reference group has no crash) are ``null`` in JSON and ``None``
in Python; every ratio carries a status (:data:`RatioStatus`) saying which:
``unbounded`` (k/0, k > 0) or ``undefined`` (0/0). Evidence is data (a kind,
its numbers, its values), never prose: ``coreepi.reporting`` words it.
Rates are crashes per ``config.rate_per`` (default 1,000)
node-days; exposure is in node-days; times are UTC.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FINDINGS_SCHEMA_VERSION",
    "group_id",
    "Association",
    "AttributeSummary",
    "Attribution",
    "Concentration",
    "DayCount",
    "Evidence",
    "EvidenceKind",
    "FleetFindings",
    "GroupFinding",
    "HostCount",
    "HostFinding",
    "NamedCount",
    "AdjustedEstimate",
    "RatesUndetermined",
    "RatioStatus",
    "Tally",
    "TelemetryLead",
    "TelemetrySummary",
    "Verdict",
    "Window",
    "num",
    "ratio_status",
    "sir_status",
]


def group_id(kind: str, key: str) -> str:
    """A group's stable id: 16 hex digits of SHA-256 over ``kind`` NUL ``key``.
    The web UI's URLs and every renderer's links use it (signatures hold
    ``/``, ``|``, spaces and whatever a binary names a function; an id keeps
    URLs short and safe, and stable across refreshes)."""
    import hashlib

    return hashlib.sha256(f"{kind}\0{key}".encode()).hexdigest()[:16]


FINDINGS_SCHEMA_VERSION = "2.5.0"
"""Semver of the FleetFindings JSON: a minor bump adds keys, a major bump changes or removes one."""

Verdict = Literal["hardware-suspect", "software", "environment-triggered", "undetermined"]

RatesUndetermined = Literal["no-exposure", "thin-exposure"]
"""Why a window's rates are not shown: no node-time at all, or too little of it."""

RatioStatus = Literal["finite", "unbounded", "undefined"]
"""A ratio's status: a number, ``unbounded`` (k/0 with k > 0: no event on the
reference side) or ``undefined`` (0/0: nothing to compare)."""

EvidenceKind = Literal[
    "sample-size", "host-concentration", "concentration-without-signs", "fleet-spread",
    "rate-ratio", "confounding", "hardware-phenotypes", "diversity", "private-signatures",
    "telemetry", "sir", "excess-without-signs", "group-verdicts",
    "insufficient-exposure", "host-clustered", "host-level", "adjustment-not-estimable",
    "rest-beside-hardware-host", "window-exposure",
]  # fmt: skip
"""What an :class:`Evidence` item states (each kind documented in docs/epidemiology.md)."""


def num(x: Any) -> float | None:
    """A float, or None when ``x`` is None, NaN or infinite."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def ratio_status(x: Any) -> RatioStatus:
    """``finite``; ``unbounded`` for ±inf (k/0); ``undefined`` for None or NaN (0/0)."""
    if x is None:
        return "undefined"
    f = float(x)
    if math.isnan(f):
        return "undefined"
    return "finite" if math.isfinite(f) else "unbounded"


def sir_status(observed: int, expected: float | None, fleet_node_days: float) -> RatioStatus:
    """The status of a host's O/E: ``unbounded`` when E = 0 < O; ``undefined`` when
    O = E = 0, or when the fleet has no exposure (its rate, hence every E, is then
    undefined whatever number the table holds)."""
    if fleet_node_days <= 0 or expected is None or math.isnan(expected):
        return "undefined"
    if expected > 0:
        return "finite"
    return "unbounded" if observed > 0 else "undefined"


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="null")


class AdjustedEstimate(_Out):
    """A rate ratio adjusted for other attributes (Poisson GLM, :mod:`.confounding`)."""

    ratio: float | None = Field(description="adjusted rate ratio (None: not estimable)")
    ratio_status: RatioStatus
    ci_low: float | None
    ci_high: float | None
    adjusted_for: list[str] = Field(description="the other attributes in the model")
    method: str | None = Field(default=None,
                               description="poisson-glm-cluster (2.2.0), poisson-glm or "
                               "exact-conditional (2.1.0)")


class Tally(_Out):
    """A name and how many times it occurs (phenotype crashes, events, crashes per verdict)."""

    name: str
    count: int


class TelemetryLead(_Out):
    """The commonest (kind, component) among a host's hardware events before its crashes."""

    event_kind: str = Field(description="telemetry event kind (edac_ue, mce, xid, ...)")
    component: str | None = Field(description="the component named by the events, if any")
    events: int


class Evidence(_Out):
    """One checkable statement behind an attribution, as data.

    Which fields a kind fills is listed in ``docs/epidemiology.md`` ("Evidence
    kinds"); the others stay null/empty. ``coreepi.reporting.phrases`` turns
    it into a sentence.
    """

    kind: EvidenceKind
    supports: Verdict | None = Field(description="the verdict this statement points to, if any")
    strength: float = Field(
        description="ranking weight (about -log10 of the p-value when there is one)"
    )
    host_ids: list[str] = Field(default_factory=list, description="the hosts it is about")
    attribute: str | None = None
    level: str | None = Field(default=None, description="the attribute value it is about")
    observed: int | None = Field(
        default=None, description="the count observed (crashes, signatures)"
    )
    total: int | None = Field(default=None, description="the count it is a part of")
    expected: float | None = Field(default=None, description="the count expected")
    ratio: float | None = None
    ratio_status: RatioStatus | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p: float | None = None
    q: float | None = None
    q_family: str | None = Field(
        default=None, description="the FDR family of q: 'signature' or 'phenotype' groups (2.3.0)")
    share: float | None = None
    hosts: int | None = Field(default=None, description="distinct hosts")
    minimum: int | None = Field(default=None, description="the threshold it falls short of")
    adjusted: AdjustedEstimate | None = None
    note: str | None = Field(default=None, description="why there is no adjusted ratio; "
                             "window-exposure: no-exposure or thin-exposure (2.5.0)")
    tallies: list[Tally] = Field(default_factory=list)
    window_days: float | None = Field(default=None, description="telemetry window before a crash")
    lead: TelemetryLead | None = None
    example: str | None = Field(default=None, description="one event summary, verbatim")
    node_days: float | None = Field(
        default=None, description="a host's exposure (2.1.0), the window's (window-exposure)")
    threshold: float | None = Field(
        default=None, description="the exposure threshold it falls short of, node-days (2.1.0)")
    exposed: int | None = Field(
        default=None, description="hosts exposed to the value (host-level, 2.1.0)")
    rest_observed: int | None = Field(
        default=None, description="hosts with a crash among the rest (host-level, 2.1.0)")
    rest_exposed: int | None = Field(
        default=None, description="hosts exposed to another value (host-level, 2.1.0)")
    method: str | None = Field(
        default=None, description="the estimation method of an adjusted ratio (2.1.0)")
    hosts_with_crashes: int | None = Field(
        default=None, description="hosts with a crash in the window (window-exposure, 2.5.0)")


class Attribution(_Out):
    verdict: Verdict
    rule: str = Field(description="name of the attribution rule that decided")
    evidence: list[Evidence] = Field(description="deciding evidence first, then by strength")


class Association(_Out):
    """Rate of one attribute value vs the rest of the fleet, for one group."""

    attribute: str
    attribute_class: Literal["environment", "hardware", "other"]
    value: str
    crashes: int = Field(description="the group's crashes with this value")
    node_days: float = Field(description="fleet exposure with this value")
    rate: float | None = Field(description="crashes per rate_per node-days with this value")
    rest_crashes: int = Field(description="the group's crashes with another known value")
    rest_node_days: float
    share_of_group: float | None = Field(
        description="crashes / the group's crashes with a known value of the attribute"
    )
    expected: float | None = Field(description="crashes expected with this value at equal rates")
    irr: float | None = Field(description="crude incidence rate ratio, value vs rest")
    irr_status: RatioStatus = Field(description="finite, unbounded (no crash in the rest) or "
                                    "undefined (added in 2.0.0)")
    irr_lower: float | None
    irr_upper: float | None
    p_value: float | None = Field(description="two-sided exact conditional binomial test")
    q_value: float | None = Field(description="Benjamini–Hochberg over all tests of the window")
    adjusted_irr: float | None = Field(
        default=None, description="Poisson GLM rate ratio adjusted for adjusted_for"
    )
    adjusted_status: RatioStatus | None = Field(
        default=None, description="status of adjusted_irr; None when no model was fitted"
    )
    adjusted_lower: float | None = None
    adjusted_upper: float | None = None
    adjusted_p_value: float | None = None
    adjusted_for: list[str] = Field(default_factory=list)
    adjustment_note: str | None = Field(
        default=None, description="why there is no adjusted ratio, or what to beware of"
    )
    adjusted_method: str | None = Field(
        default=None, description="poisson-glm-cluster (cluster-robust by host, 2.2.0), "
        "poisson-glm or exact-conditional (2.1.0)")
    adjustment_assessable: bool | None = Field(
        default=None, description="null: no model (nothing to adjust for); false: a model was "
        "needed and could not estimate the ratio, or a covariate coincides with the value — "
        "the crude ratio then names no attribute (2.1.0)")
    q_family: str | None = Field(
        default=None, description="the FDR family of q_value: 'signature' or 'phenotype' "
        "groups (2.1.0)")
    attribute_q_value: float | None = Field(
        default=None, description="BH q-value of the attribute as a whole for this group "
        "(Bonferroni over its levels); a level's q_value counts only when it is ≤ fdr_q (2.1.0)")
    hosts_affected: int | None = Field(
        default=None, description="hosts with a crash of the group while at this value (2.1.0)")
    hosts_exposed: int | None = Field(
        default=None, description="hosts with ≥ min_host_node_days at this value (2.1.0)")
    rest_hosts_affected: int | None = None
    rest_hosts_exposed: int | None = None
    host_p_value: float | None = Field(
        default=None, description="one-sided Fisher exact test of hosts affected, value vs "
        "rest (null: per-host exposure unknown) (2.1.0)")
    value_hosts: int | None = Field(
        default=None, description="hosts with exposure at this value (null: per-host "
        "exposure unknown) (2.5.0)")
    rest_value_hosts: int | None = Field(
        default=None, description="hosts with exposure at another value (2.5.0)")
    untested: Literal["few-hosts"] | None = Field(
        default=None, description="why there is no test (p_value, CI and q null): "
        "'few-hosts' — the value or the rest is on fewer than min_value_hosts hosts, so it "
        "cannot be told from those hosts (2.5.0)")


class HostCount(_Out):
    host_id: str
    crashes: int
    expected: float
    p_value: float | None = Field(description="one-sided exact Poisson, P(X ≥ crashes)")
    share: float = Field(description="share of the group's crashes")


class Concentration(_Out):
    """How a group's crashes spread over hosts."""

    hosts: int = Field(description="distinct hosts with a crash in the group")
    top_host: str | None
    top_host_crashes: int
    top_host_share: float | None
    top_host_expected: float | None
    top_host_p_value: float | None
    excess_hosts: int = Field(
        description="hosts whose count is improbable (p < host_concentration_p)"
    )
    top_hosts: list[HostCount] = Field(description="up to 5 hosts with the most crashes")
    clustered_hosts: list[str] = Field(
        default_factory=list, description="hosts holding improbably many of the group's "
        "crashes against the hosts sharing its explaining value (2.1.0)")
    clustered_crashes: int = Field(default=0, description="crashes on clustered_hosts (2.1.0)")


class NamedCount(_Out):
    name: str
    crashes: int


class DayCount(_Out):
    """Crashes of a group on one UTC day (a point of its epidemic curve)."""

    day: date = Field(description="UTC calendar day")
    crashes: int


class GroupFinding(_Out):
    kind: Literal["signature", "phenotype"]
    key: str = Field(description="the signature, or the phenotype name")
    crashes: int
    hosts: int
    rate: float | None = Field(description="its crashes inside exposure per rate_per node-days "
                               "of the whole fleet (2.4.0: before, every crash)")
    rate_lower: float | None = Field(description="exact Poisson (Garwood) lower limit")
    rate_upper: float | None
    hardware_phenotype_crashes: int = Field(
        description="crashes with at least one hardware-indicative phenotype"
    )
    hardware_phenotypes: list[NamedCount]
    first_seen: datetime | None
    last_seen: datetime | None
    associations: list[Association]
    concentration: Concentration
    attribution: Attribution
    epidemic_curve: list[DayCount] = Field(
        default_factory=list,
        description="crashes per UTC day, days without a crash left out (added in 1.1.0)",
    )
    crashes_in_exposure: int | None = Field(
        default=None, description="its crashes inside an exposure interval of their host: the "
        "numerator of rate (null from a producer before 2.4.0)")


class TelemetrySummary(_Out):
    window_days: float = Field(
        description="events count when at most this many days before a crash"
    )
    events: int = Field(description="events preceding one of the host's crashes")
    hardware_events: int = Field(description="of which hardware-indicative")
    crashes_after_hardware_event: int
    by_kind: dict[str, int]
    examples: list[str] = Field(description="up to 3 event summaries, latest first")


class HostFinding(_Out):
    host_id: str
    crashes: int
    node_days: float
    expected: float = Field(description="crashes expected at the fleet's rate(s)")
    sir: float | None = Field(description="standardized incidence ratio observed / expected")
    sir_status: RatioStatus = Field(description="finite, unbounded (expected 0) or undefined "
                                    "(0/0, or no fleet rate) (added in 2.0.0)")
    sir_lower: float | None
    sir_upper: float | None
    p_value: float | None = Field(description="one-sided exact Poisson P(X ≥ crashes)")
    distinct_signatures: int
    expected_distinct_signatures: float = Field(
        description="distinct signatures expected for its crash count from the fleet mix"
    )
    private_signatures: int = Field(description="its signatures that occur on no other host")
    top_signatures: list[NamedCount]
    hardware_phenotype_crashes: int
    hardware_phenotypes: list[NamedCount]
    telemetry: TelemetrySummary | None
    attribution: Attribution
    exposure_sufficient: bool = Field(
        default=True, description="node_days ≥ min_host_node_days: tests about it mean "
        "something (else SIR and p are null and it is undetermined) (2.1.0)")
    crashes_outside_exposure: int = Field(
        default=0, description="its crashes in none of its exposure intervals: in `crashes`, "
        "not in the SIR (2.1.0)")


class AttributeSummary(_Out):
    name: str
    attribute_class: Literal["environment", "hardware", "other"]
    kind: Literal["categorical", "strata"]
    edges: list[float] = Field(description="inner strata edges of a numeric attribute")
    levels: list[str]
    pooled_levels: int = Field(description="rare values pooled into '(other)'")


class Window(_Out):
    since: datetime
    until: datetime
    node_days: float
    hosts: int = Field(description="hosts with exposure in the window")
    hosts_with_crashes: int
    crashes: int = Field(description="every crash in the window")
    crashes_outside_exposure: int = Field(
        description="crashes in no exposure interval of their host (in crashes, not in rate; "
        "attributes unknown)"
    )
    crashes_without_signature: int
    rate: float | None = Field(description="crashes inside exposure per rate_per node-days "
                               "(2.4.0: before, every crash)")
    rate_lower: float | None
    rate_upper: float | None
    signature_groups: int = Field(description="distinct signatures in the window")
    phenotype_groups: int
    tests: int = Field(description="attribute association tests behind the q-values")
    crashes_in_exposure: int | None = Field(
        default=None, description="crashes inside an exposure interval of their host: the "
        "numerator of rate (null from a producer before 2.4.0)")
    rates_undetermined_reason: RatesUndetermined | None = Field(
        default=None, description="why no rate should be shown (the numbers stay): "
        "no-exposure (zero node-days) or thin-exposure (under min_rate_node_days, or fewer "
        "hosts with exposure than with crashes); null: rates mean something (2.4.0)")


class FleetFindings(_Out):
    schema_version: str = FINDINGS_SCHEMA_VERSION
    window: Window
    attributes: list[AttributeSummary]
    groups: list[GroupFinding] = Field(description="signature groups, then phenotype groups")
    hosts: list[HostFinding] = Field(
        description="hardware-suspect hosts first, then by SIR p-value (at most max_hosts)"
    )
    config: dict[str, Any]
    notes: list[str]
