"""Attribution: hardware-suspect, software, environment-triggered or undetermined.

Each verdict comes from an ordered list of small rules (plain data, Socorro
style: a predicate and a verdict); the first rule whose predicate holds
decides. Every rule's evidence is data a person can check against the
tables (kind ``host-concentration``: 14 of 15 crashes on host h-017, expected
0.08, p < 1e-20; the facts and their evidence items are in :mod:`.facts`,
the sentences in ``coreepi.reporting.phrases``). The rules,
their order and the default thresholds (:class:`EpiConfig`) are explained in
``docs/epidemiology.md``.

Group rules (order matters: a one-host group is judged before any attribute
association, because one bad host makes every attribute it has look
"associated"):

1. ``too-few-crashes`` → undetermined
2. ``exposure-too-thin`` → undetermined
3. ``one-host-with-hardware-signs`` → hardware-suspect
4. ``one-host-without-hardware-signs`` → undetermined
5. ``hardware-phenotypes-on-hardware-attribute`` → hardware-suspect
6. ``environment-association`` → environment-triggered
7. ``hardware-attribute-association`` → hardware-suspect
8. ``rest-too-few-beside-hardware-host`` → undetermined
9. ``host-clustered`` → software
10. ``fleet-spread`` → software
11. ``no-rule`` → undetermined

Host rules:

1. ``insufficient-exposure`` → undetermined
2. ``exposure-too-thin`` → undetermined
3. ``too-few-crashes`` → undetermined
4. ``excess-with-hardware-signs`` → hardware-suspect
5. ``majority-of-groups`` → the verdict of the groups holding most of its crashes
6. ``no-rule`` → undetermined
"""

from __future__ import annotations

from collections.abc import Callable

from coreepi.epi.config import EpiConfig
from coreepi.epi.facts import AssociationFacts, GroupFacts, HostFacts, WindowExposure
from coreepi.epi.models import Attribution, Evidence, Tally, Verdict

__all__ = [
    "GROUP_RULES",
    "HOST_RULES",
    "attribute_group",
    "attribute_host",
    "explaining_association",
]


# --- group rules -----------------------------------------------------------------------


def explaining_association(
    g: GroupFacts, config: EpiConfig, attribute_class: str | None = None
) -> AssociationFacts | None:
    """The attribute value that best explains the group, if any.

    Significant crude association, surviving adjustment (fails closed: an
    adjustment that was needed and could not be made does not survive), with
    the host-level comparison agreeing and the crashes not clustered on a few
    hosts, holding at least ``environment_min_share`` of the group's crashes;
    the largest share wins, then the smallest p-value. With
    ``attribute_class``, only associations of that class are considered.
    """
    best: AssociationFacts | None = None
    for a in _covering(g, config):
        if attribute_class is not None and a.attribute_class != attribute_class:
            continue
        if not (a.survives_adjustment(config) and a.host_agrees(config)
                and not a.host_clustered(config)):
            continue
        if best is None or (a.share_of_group, -(a.p_value or 1.0)) > (
            best.share_of_group or 0.0,
            -(best.p_value or 1.0),
        ):
            best = a
    return best


def _covering(g: GroupFacts, config: EpiConfig) -> list[AssociationFacts]:
    """Crude-significant associations holding ≥ ``environment_min_share`` of the group."""
    return [a for a in g.associations if a.crude_significant(config)
            and a.share_of_group is not None and a.share_of_group >= config.environment_min_share]


def clustered_association(g: GroupFacts, config: EpiConfig) -> AssociationFacts | None:
    """A covering association whose crashes a few hosts hold (the largest share first)."""
    hits = [a for a in _covering(g, config) if a.host_clustered(config)]
    return max(hits, key=lambda a: (a.share_of_group or 0.0, a.clustered_crashes), default=None)


def _thin(exposure: WindowExposure | None, config: EpiConfig) -> bool:
    """The window's rates are undetermined (no or thin exposure): no verdict rests on them."""
    return exposure is not None and exposure.rates_undetermined(config) is not None


GroupRule = tuple[str, Verdict, Callable[[GroupFacts, EpiConfig], bool]]

GROUP_RULES: list[GroupRule] = [
    # Before anything: too few crashes for any statistic to mean much.
    ("too-few-crashes", "undetermined", lambda g, c: g.crashes < c.min_group_crashes),
    # Every rate has a real denominator: an unobserved fleet (no node-time, or too little
    # of it) makes every concentration, association and spread meaningless.
    ("exposure-too-thin", "undetermined", lambda g, c: _thin(g.exposure, c)),
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
    # Before calling the group software: a top host with hardware signs may hold a share the
    # concentration test cannot single out in a thin window (3 of 6); what is left beside it
    # must be a group on its own, or the "spread" is that host plus a few chance crashes.
    (
        "rest-too-few-beside-hardware-host",
        "undetermined",
        lambda g, c: g.rest_too_few_beside_hardware_host(c),
    ),
    # An attribute that covers the group but whose crashes a few hosts hold: those hosts
    # (a job they run) explain it, not the attribute.
    (
        "host-clustered",
        "software",
        lambda g, c: g.hosts >= c.min_spread_hosts and clustered_association(g, c) is not None,
    ),
    ("fleet-spread", "software", lambda g, c: g.hosts >= c.min_spread_hosts),
    ("no-rule", "undetermined", lambda g, c: True),
]
"""Ordered group rules: the first whose predicate holds decides."""


_EXPLAINED_BY_ASSOCIATION = (
    "environment-association", "hardware-attribute-association",
    "hardware-phenotypes-on-hardware-attribute",
)  # fmt: skip


def attribute_group(g: GroupFacts, config: EpiConfig) -> Attribution:
    """The verdict and ranked evidence for one group: deciding evidence first, then the
    rest by decreasing strength."""
    rule, verdict = next((name, v) for name, v, pred in GROUP_RULES if pred(g, config))
    evidence: list[Evidence] = []
    deciding: list[Evidence] = []
    if rule == "too-few-crashes":
        deciding.append(Evidence(
            kind="sample-size", supports="undetermined", observed=g.crashes, hosts=g.hosts,
            minimum=config.min_group_crashes, strength=1.0,
        ))  # fmt: skip
    if rule == "exposure-too-thin":
        assert g.exposure is not None
        # nothing divided by the window's node-time (concentration, ratios, the spread's
        # expectation) is evidence here; the phenotypes are counts, they stand
        hw = [g.hardware_evidence()] if g.hardware_phenotype_crashes else []
        return Attribution(verdict=verdict, rule=rule,
                           evidence=[g.exposure.evidence(config), *hw])
    if g.top_host is not None and g.crashes > 0:
        conc = g.concentration_evidence("hardware-suspect" if g.concentrated(config) else None)
        (deciding if rule.startswith("one-host") else evidence).append(conc)
    if rule == "rest-too-few-beside-hardware-host":
        deciding.append(g.rest_evidence(config))
    if rule == "one-host-without-hardware-signs":
        deciding.append(Evidence(
            kind="concentration-without-signs", supports="undetermined",
            host_ids=[g.top_host] if g.top_host else [], strength=1.0,
        ))  # fmt: skip
    if g.hardware_phenotype_crashes:
        evidence.append(g.hardware_evidence())
    if g.top_host_signs is not None and (
        g.concentrated(config) or rule == "rest-too-few-beside-hardware-host"
    ):
        evidence.extend(g.top_host_signs.signs(config))
    assoc = [e for a in g.associations if (e := a.evidence(config)) is not None]
    if rule in _EXPLAINED_BY_ASSOCIATION:
        best = explaining_association(
            g, config,
            "hardware" if rule == "hardware-phenotypes-on-hardware-attribute" else None,
        )
        assert best is not None
        lead = next(e for e in assoc if e.kind == "rate-ratio"
                    and (e.attribute, e.level) == (best.attribute, best.value))
        assoc.remove(lead)
        deciding.append(lead.model_copy(update={"share": best.share_of_group}))
        if rule == "hardware-phenotypes-on-hardware-attribute":
            deciding.append(g.hardware_evidence())
            evidence = [e for e in evidence if e.kind != "hardware-phenotypes"]
        deciding.append(g.spread_evidence(config))
    elif rule == "host-clustered":
        hit = clustered_association(g, config)
        assert hit is not None
        deciding.extend(e for e in hit.host_evidence(config) if e.kind == "host-clustered")
        deciding.append(g.spread_evidence(config))
    elif rule == "fleet-spread":
        deciding.append(g.spread_evidence(config))
    else:
        evidence.append(g.spread_evidence(config))
    cited = {(e.kind, e.attribute, e.level) for e in deciding}
    for a in _covering(g, config):
        evidence.extend(e for e in a.host_evidence(config)
                        if (e.kind, e.attribute, e.level) not in cited)
    evidence.extend(assoc)
    evidence.sort(key=lambda e: -e.strength)
    return Attribution(verdict=verdict, rule=rule, evidence=deciding + evidence)


# --- host rules ------------------------------------------------------------------------


HostRule = tuple[str, Callable[[HostFacts, EpiConfig], Verdict | None]]

HOST_RULES: list[HostRule] = [
    # Before anything: too little node-time for any test (a new node, crashes before the
    # first heartbeat): never a suspect.
    (
        "insufficient-exposure",
        lambda h, c: "undetermined" if not h.signs.exposure_sufficient else None,
    ),
    # A host with node-time of its own in a window whose rates are undetermined: its
    # expectation rests on the fleet's rate, which means nothing there.
    ("exposure-too-thin", lambda h, c: "undetermined" if _thin(h.exposure, c) else None),
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
    """The verdict and ranked evidence for one host: deciding evidence first, then the
    rest by decreasing strength."""
    rule: str = "no-rule"
    verdict: Verdict = "undetermined"
    for name, fn in HOST_RULES:
        v = fn(h, config)
        if v is not None:
            rule, verdict = name, v
            break
    s = h.signs
    hosts = [s.host_id]
    deciding: list[Evidence] = []
    evidence: list[Evidence] = []
    if rule == "insufficient-exposure":
        deciding.append(s.insufficient_evidence(config))
    if rule == "exposure-too-thin":
        assert h.exposure is not None
        deciding.append(h.exposure.evidence(config))
    if rule == "too-few-crashes":
        deciding.append(Evidence(
            kind="sample-size", supports="undetermined", host_ids=hosts, observed=s.crashes,
            minimum=config.min_host_crashes, strength=1.0,
        ))  # fmt: skip
    excess = s.sir_evidence("hardware-suspect" if s.excess(config) else None)
    signs = s.signs(config)
    if rule == "excess-with-hardware-signs":
        deciding.append(excess)
        deciding.extend(sorted(signs, key=lambda e: -e.strength))
    else:
        # no SIR from too little exposure, the host's or the window's
        if s.exposure_sufficient and rule != "exposure-too-thin":
            evidence.append(excess)
        evidence.extend(signs)
    if h.group_verdicts:
        ev = Evidence(
            kind="group-verdicts",
            supports=h.group_verdicts[0][0] if rule == "majority-of-groups" else None,
            host_ids=hosts, total=s.crashes,
            tallies=[Tally(name=v, count=n) for v, n in h.group_verdicts], strength=2.0,
        )
        (deciding if rule == "majority-of-groups" else evidence).append(ev)
    if rule == "no-rule" and s.excess(config):
        deciding.append(Evidence(
            kind="excess-without-signs", supports="undetermined", host_ids=hosts, strength=1.0,
        ))  # fmt: skip
    evidence.sort(key=lambda e: -e.strength)
    return Attribution(verdict=verdict, rule=rule, evidence=deciding + evidence)
