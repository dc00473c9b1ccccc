"""Attribution: hardware-suspect, software, environment-triggered or undetermined.

Each verdict comes from an ordered list of small rules (plain data, Socorro
style: a predicate and a verdict); the first rule whose predicate holds
decides. Every rule's evidence is a sentence a person can check against the
data ("14 of 15 crashes on host h-017, expected 0.08, p < 1e-20"). The rules,
their order and the default thresholds (:class:`EpiConfig`) are explained in
``docs/epidemiology.md``.

Group rules (order matters: a one-host group is judged before any attribute
association, because one bad host makes every attribute it has look
"associated"):

1. ``too-few-crashes`` → undetermined
2. ``one-host-with-hardware-signs`` → hardware-suspect
3. ``one-host-without-hardware-signs`` → undetermined
4. ``hardware-phenotypes-on-hardware-attribute`` → hardware-suspect
5. ``environment-association`` → environment-triggered
6. ``hardware-attribute-association`` → hardware-suspect
7. ``fleet-spread`` → software
8. ``no-rule`` → undetermined

Host rules:

1. ``too-few-crashes`` → undetermined
2. ``excess-with-hardware-signs`` → hardware-suspect
3. ``majority-of-groups`` → the verdict of the groups holding most of its crashes
4. ``no-rule`` → undetermined
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from coreepi.epi.config import EpiConfig
from coreepi.epi.models import Attribution, Evidence, Verdict

__all__ = [
    "GROUP_RULES",
    "HOST_RULES",
    "AssociationFacts",
    "GroupFacts",
    "HostFacts",
    "HostSigns",
    "attribute_group",
    "attribute_host",
    "explaining_association",
    "fmt_p",
]


# --- formatting -------------------------------------------------------------------


def fmt_p(p: float | None) -> str:
    """``p < 1e-20``, ``p = 3.2e-05``, ``p = 0.031``, ``p = 1``."""
    if p is None or not math.isfinite(p):
        return "p n/a"
    if p < 1e-20:
        return "p < 1e-20"
    if p < 1e-3:
        return f"p = {p:.1e}"
    return f"p = {p:.2g}"


def fmt_n(x: float | None) -> str:
    """Two significant digits for small numbers, no exponent below a million."""
    if x is None or not math.isfinite(x):
        return "unbounded"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 0.01:
        return f"{x:.2g}" if abs(x) < 10 else f"{x:.3g}"
    return f"{x:.1e}"


def _strength(p: float | None) -> float:
    if p is None or not math.isfinite(p):
        return 0.0
    return min(300.0, -math.log10(max(p, 1e-300)))


# --- facts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostSigns:
    """Per-host facts that point at hardware (computed for every host, vectorized)."""

    host_id: str
    crashes: int
    expected: float
    sir: float | None
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
    telemetry_lead: str | None = None
    """The commonest hardware event before its crashes, e.g. "3 EDAC uncorrected
    errors on DIMM_B2" (None: fall back to the kind counts)."""

    def excess(self, config: EpiConfig) -> bool:
        """Improbably many crashes for the host's exposure."""
        return (
            self.p_value is not None
            and self.p_value < config.host_sir_p
            and self.sir is not None
            and self.sir >= config.min_sir
        )

    def signs(self, config: EpiConfig) -> list[Evidence]:
        """The hardware signs of this host, each as evidence for hardware-suspect."""
        out: list[Evidence] = []
        h = self.host_id
        if (
            self.distinct_signatures >= 3
            and self.distinct_signatures >= config.diversity_ratio * self.expected_distinct
        ):
            out.append(
                Evidence(
                    kind="diversity",
                    supports="hardware-suspect",
                    text=f"host {h}: {self.distinct_signatures} distinct signatures in "
                    f"{self.crashes} crashes where the fleet's signature mix predicts "
                    f"{fmt_n(self.expected_distinct)}",
                    strength=3.0
                    + min(10.0, self.distinct_signatures / max(self.expected_distinct, 0.1)),
                )
            )
        if self.private_signatures >= config.min_private_signatures:
            out.append(
                Evidence(
                    kind="private-signatures",
                    supports="hardware-suspect",
                    text=f"host {h}: {self.private_signatures} of its signatures occur on no "
                    "other host",
                    strength=3.0 + min(10.0, float(self.private_signatures)),
                )
            )
        if (
            self.hardware_phenotype_crashes > 0
            and self.hardware_phenotype_crashes >= config.host_hardware_share * max(self.crashes, 1)
        ):
            names = ", ".join(f"{n} {name}" for name, n in self.hardware_phenotypes[:4])
            out.append(
                Evidence(
                    kind="hardware-phenotypes",
                    supports="hardware-suspect",
                    text=f"host {h}: {self.hardware_phenotype_crashes} of {self.crashes} crashes "
                    f"hardware-indicative ({names})",
                    strength=3.0 + 10.0 * self.hardware_phenotype_crashes / max(self.crashes, 1),
                )
            )
        if self.crashes_after_hardware_event > 0:
            kinds = ", ".join(f"{n} {k}" for k, n in self.telemetry_kinds)
            example = f': "{self.telemetry_example}"' if self.telemetry_example else ""
            hours = self.telemetry_days * 24
            window = f"{hours:g} h" if hours < 72 else f"{fmt_n(self.telemetry_days)} days"
            text = (
                f"host {h}: {self.telemetry_lead} in the {window} before "
                f"{self.crashes_after_hardware_event} of its {self.crashes} crashes "
                f"(events in the window: {kinds}){example}"
                if self.telemetry_lead
                else f"host {h}: {self.crashes_after_hardware_event} of {self.crashes} crashes "
                f"within {fmt_n(self.telemetry_days)} days after a hardware event "
                f"({kinds}){example}"
            )
            out.append(
                Evidence(
                    kind="telemetry",
                    supports="hardware-suspect",
                    text=text,
                    strength=5.0 + min(10.0, float(self.hardware_events)),
                )
            )
        return out

    def excess_evidence(self) -> Evidence:
        return Evidence(
            kind="excess",
            supports="hardware-suspect",
            text=f"host {self.host_id}: {self.crashes} crashes where {fmt_n(self.expected)} "
            f"expected (SIR {fmt_n(self.sir)}, 95% CI {fmt_n(self.sir_lower)}–"
            f"{fmt_n(self.sir_upper)}, {fmt_p(self.p_value)})",
            strength=_strength(self.p_value),
        )


@dataclass(frozen=True)
class AssociationFacts:
    attribute: str
    attribute_class: str
    value: str
    crashes: int
    share_of_group: float | None
    irr: float | None
    irr_lower: float | None
    irr_upper: float | None
    p_value: float | None
    q_value: float | None
    adjusted_irr: float | None = None
    adjusted_lower: float | None = None
    adjusted_upper: float | None = None
    adjusted_for: tuple[str, ...] = ()
    adjustment_note: str | None = None

    def crude_significant(self, config: EpiConfig) -> bool:
        """q ≤ fdr_q, IRR ≥ min_irr and a CI above 1."""
        return (
            self.q_value is not None
            and self.q_value <= config.fdr_q
            and (self.irr is None or self.irr >= config.min_irr)  # None: unbounded ratio
            and self.irr_lower is not None
            and self.irr_lower > 1.0
        )

    def survives_adjustment(self, config: EpiConfig) -> bool:
        """No adjusted estimate (not fitted, or separated), or one that stays ≥ min_irr above 1."""
        if self.adjusted_irr is None:
            return True
        return (
            self.adjusted_irr >= config.min_irr
            and self.adjusted_lower is not None
            and self.adjusted_lower > 1.0
        )

    def sentence(self) -> str:
        crude = (
            f"{self.attribute}={self.value}: {self.crashes} crashes, rate ratio "
            f"{fmt_n(self.irr)} (95% CI {fmt_n(self.irr_lower)}–{fmt_n(self.irr_upper)}) vs the "
            f"rest of the fleet, {fmt_p(self.p_value)}, q = {fmt_n(self.q_value)}"
        )
        if self.adjusted_irr is not None:
            crude += (
                f"; adjusted for {', '.join(self.adjusted_for) or 'nothing'}: "
                f"{fmt_n(self.adjusted_irr)} ({fmt_n(self.adjusted_lower)}–"
                f"{fmt_n(self.adjusted_upper)})"
            )
        elif self.adjustment_note:
            crude += f" ({self.adjustment_note})"
        return crude


@dataclass(frozen=True)
class GroupFacts:
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

    @property
    def top_share(self) -> float:
        return self.top_host_crashes / self.crashes if self.crashes else 0.0

    def concentrated(self, config: EpiConfig) -> bool:
        return (
            self.top_share >= config.host_concentration_share
            and self.top_host_p is not None
            and self.top_host_p < config.host_concentration_p
        )

    def hardware_share(self) -> float:
        return self.hardware_phenotype_crashes / self.crashes if self.crashes else 0.0


# --- group rules -----------------------------------------------------------------------


def explaining_association(
    g: GroupFacts, config: EpiConfig, attribute_class: str | None = None
) -> AssociationFacts | None:
    """The attribute value that best explains the group, if any.

    Significant crude association, surviving adjustment, holding at least
    ``environment_min_share`` of the group's crashes; the largest share wins,
    then the smallest p-value. With ``attribute_class``, only associations of
    that class are considered.
    """
    best: AssociationFacts | None = None
    for a in g.associations:
        if attribute_class is not None and a.attribute_class != attribute_class:
            continue
        if not (a.crude_significant(config) and a.survives_adjustment(config)):
            continue
        if a.share_of_group is None or a.share_of_group < config.environment_min_share:
            continue
        if best is None or (a.share_of_group, -(a.p_value or 1.0)) > (
            best.share_of_group or 0.0,
            -(best.p_value or 1.0),
        ):
            best = a
    return best


def _concentration_evidence(g: GroupFacts, supports: Verdict | None) -> Evidence:
    return Evidence(
        kind="host-concentration",
        supports=supports,
        text=f"{g.top_host_crashes} of {g.crashes} crashes on host {g.top_host}, expected "
        f"{fmt_n(g.top_host_expected)}, {fmt_p(g.top_host_p)}",
        strength=_strength(g.top_host_p),
    )


def _group_hw_evidence(g: GroupFacts) -> Evidence:
    names = ", ".join(f"{n} {name}" for name, n in g.hardware_phenotypes[:4])
    return Evidence(
        kind="hardware-phenotypes",
        supports="hardware-suspect",
        text=f"{g.hardware_phenotype_crashes} of {g.crashes} crashes hardware-indicative ({names})",
        strength=3.0 + 10.0 * g.hardware_share(),
    )


def _spread_evidence(g: GroupFacts, config: EpiConfig) -> Evidence:
    top = (
        f"; the top host {g.top_host} has {g.top_host_crashes} ({g.top_share:.0%}), expected "
        f"{fmt_n(g.top_host_expected)}"
        if g.top_host
        else ""
    )
    return Evidence(
        kind="spread",
        supports="software" if g.hosts >= config.min_spread_hosts else None,
        text=f"{g.crashes} crashes on {g.hosts} hosts{top}",
        strength=2.0 + math.log10(max(g.hosts, 1)),
    )


def _association_evidence(g: GroupFacts, config: EpiConfig) -> list[Evidence]:
    out: list[Evidence] = []
    for a in g.associations:
        if a.crude_significant(config):
            if a.survives_adjustment(config):
                supports: Verdict | None = {
                    "environment": "environment-triggered",
                    "hardware": "hardware-suspect",
                }.get(a.attribute_class, "software")  # type: ignore[assignment]
                out.append(
                    Evidence(
                        kind="attribute-association",
                        supports=supports,
                        text=a.sentence(),
                        strength=_strength(a.q_value),
                    )
                )
            else:
                out.append(
                    Evidence(
                        kind="confounding",
                        supports=None,
                        text=f"{a.attribute}={a.value}: crude rate ratio {fmt_n(a.irr)} "
                        f"({fmt_n(a.irr_lower)}–{fmt_n(a.irr_upper)}) falls to "
                        f"{fmt_n(a.adjusted_irr)} ({fmt_n(a.adjusted_lower)}–"
                        f"{fmt_n(a.adjusted_upper)}) adjusted for "
                        f"{', '.join(a.adjusted_for)}: explained by confounding",
                        strength=_strength(a.q_value) / 2,
                    )
                )
    return out


GroupRule = tuple[str, Verdict, Callable[[GroupFacts, EpiConfig], bool]]

GROUP_RULES: list[GroupRule] = [
    # Before anything: too few crashes for any statistic to mean much.
    ("too-few-crashes", "undetermined", lambda g, c: g.crashes < c.min_group_crashes),
    # Before associations: one host's attributes all look "associated".
    (
        "one-host-with-hardware-signs",
        "hardware-suspect",
        lambda g, c: (
            g.concentrated(c)
            and (
                g.hardware_share() >= c.hardware_phenotype_share
                or (
                    g.top_host_signs is not None
                    and len(g.top_host_signs.signs(c)) >= c.min_hardware_signs
                )
            )
        ),
    ),
    ("one-host-without-hardware-signs", "undetermined", lambda g, c: g.concentrated(c)),
    # Before environment associations: crashes that look like hardware faults, confined to
    # one hardware population (a CPU model), are that hardware's, even when an environment
    # attribute of the same population (its microcode, its usual kernel) explains them as well.
    (
        "hardware-phenotypes-on-hardware-attribute",
        "hardware-suspect",
        lambda g, c: (
            g.hosts >= c.min_spread_hosts
            and g.hardware_share() >= c.hardware_phenotype_share
            and explaining_association(g, c, "hardware") is not None
        ),
    ),
    (
        "environment-association",
        "environment-triggered",
        lambda g, c: (
            g.hosts >= c.min_spread_hosts
            and (a := explaining_association(g, c)) is not None
            and a.attribute_class == "environment"
        ),
    ),
    (
        "hardware-attribute-association",
        "hardware-suspect",
        lambda g, c: (
            g.hosts >= c.min_spread_hosts
            and (a := explaining_association(g, c)) is not None
            and a.attribute_class == "hardware"
        ),
    ),
    ("fleet-spread", "software", lambda g, c: g.hosts >= c.min_spread_hosts),
    ("no-rule", "undetermined", lambda g, c: True),
]
"""Ordered group rules: the first whose predicate holds decides."""


def attribute_group(g: GroupFacts, config: EpiConfig) -> Attribution:
    """The verdict and ranked evidence for one group."""
    rule, verdict = next((name, v) for name, v, pred in GROUP_RULES if pred(g, config))
    evidence: list[Evidence] = []
    deciding: list[Evidence] = []
    if rule == "too-few-crashes":
        deciding.append(
            Evidence(
                kind="sample-size",
                supports="undetermined",
                text=f"only {g.crashes} crash(es) on {g.hosts} host(s); at least "
                f"{config.min_group_crashes} are needed",
                strength=1.0,
            )
        )
    if g.top_host is not None and g.crashes > 0:
        conc = _concentration_evidence(g, "hardware-suspect" if g.concentrated(config) else None)
        (deciding if rule.startswith("one-host") else evidence).append(conc)
    if rule == "one-host-without-hardware-signs":
        deciding.append(
            Evidence(
                kind="host-concentration",
                supports="undetermined",
                text=f"host {g.top_host} shows no hardware sign (diversity, private signatures, "
                "hardware phenotypes, hardware telemetry): a workload or configuration only "
                "that host has is as likely as its hardware",
                strength=1.0,
            )
        )
    if g.hardware_phenotype_crashes:
        evidence.append(_group_hw_evidence(g))
    if g.top_host_signs is not None and g.concentrated(config):
        evidence.extend(g.top_host_signs.signs(config))
    assoc = _association_evidence(g, config)
    if rule in ("environment-association", "hardware-attribute-association",
                "hardware-phenotypes-on-hardware-attribute"):
        best = explaining_association(
            g, config,
            "hardware" if rule == "hardware-phenotypes-on-hardware-attribute" else None,
        )
        assert best is not None
        lead = next(e for e in assoc if e.text == best.sentence())
        assoc.remove(lead)
        deciding.append(
            lead.model_copy(
                update={
                    "text": f"{best.share_of_group:.0%} of its crashes with a known "
                    f"{best.attribute} have {best.attribute}={best.value}; " + lead.text
                }
            )
        )
        if rule == "hardware-phenotypes-on-hardware-attribute":
            deciding.append(_group_hw_evidence(g))
            evidence = [e for e in evidence if e.kind != "hardware-phenotypes"]
        deciding.append(_spread_evidence(g, config))
    elif rule == "fleet-spread":
        deciding.append(_spread_evidence(g, config))
    else:
        evidence.append(_spread_evidence(g, config))
    evidence.extend(assoc)
    evidence.sort(key=lambda e: -e.strength)
    return Attribution(verdict=verdict, rule=rule, evidence=deciding + evidence)


# --- host rules ------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFacts:
    signs: HostSigns
    group_verdicts: tuple[tuple[Verdict, int], ...]
    """Crash counts of this host per verdict of the signature group holding them,
    largest first (crashes in no analysed group count as undetermined)."""

    def majority(self) -> tuple[Verdict, int] | None:
        if not self.group_verdicts:
            return None
        verdict, n = self.group_verdicts[0]
        return (verdict, n) if 2 * n > self.signs.crashes else None


HostRule = tuple[str, Callable[[HostFacts, EpiConfig], Verdict | None]]

HOST_RULES: list[HostRule] = [
    (
        "too-few-crashes",
        lambda h, c: "undetermined" if h.signs.crashes < c.min_host_crashes else None,
    ),
    (
        "excess-with-hardware-signs",
        lambda h, c: (
            "hardware-suspect"
            if h.signs.excess(c) and len(h.signs.signs(c)) >= c.min_hardware_signs
            else None
        ),
    ),
    (
        "majority-of-groups",
        lambda h, c: m[0] if (m := h.majority()) is not None and m[0] != "undetermined" else None,
    ),
    ("no-rule", lambda h, c: "undetermined"),
]
"""Ordered host rules: the first that returns a verdict decides."""


def attribute_host(h: HostFacts, config: EpiConfig) -> Attribution:
    """The verdict and ranked evidence for one host."""
    rule: str = "no-rule"
    verdict: Verdict = "undetermined"
    for name, fn in HOST_RULES:
        v = fn(h, config)
        if v is not None:
            rule, verdict = name, v
            break
    s = h.signs
    deciding: list[Evidence] = []
    evidence: list[Evidence] = []
    if rule == "too-few-crashes":
        deciding.append(
            Evidence(
                kind="sample-size",
                supports="undetermined",
                text=f"host {s.host_id}: only {s.crashes} crash(es); at least "
                f"{config.min_host_crashes} are needed",
                strength=1.0,
            )
        )
    excess = s.excess_evidence()
    if not s.excess(config):
        excess = excess.model_copy(update={"supports": None})
    signs = s.signs(config)
    if rule == "excess-with-hardware-signs":
        deciding.append(excess)
        deciding.extend(sorted(signs, key=lambda e: -e.strength))
    else:
        evidence.append(excess)
        evidence.extend(signs)
    if h.group_verdicts:
        parts = ", ".join(f"{n} in {v} groups" for v, n in h.group_verdicts)
        ev = Evidence(
            kind="group-verdicts",
            supports=h.group_verdicts[0][0] if rule == "majority-of-groups" else None,
            text=f"host {s.host_id}: of its {s.crashes} crashes, {parts}",
            strength=2.0,
        )
        (deciding if rule == "majority-of-groups" else evidence).append(ev)
    if rule == "no-rule" and s.excess(config):
        deciding.append(
            Evidence(
                kind="excess",
                supports="undetermined",
                text=f"host {s.host_id}: excess crashes without a hardware sign",
                strength=1.0,
            )
        )
    evidence.sort(key=lambda e: -e.strength)
    return Attribution(verdict=verdict, rule=rule, evidence=deciding + evidence)
