"""Steps 5 and 6 of :func:`~coreepi.epi.analyze_fleet`: findings from the tables.

:func:`group_findings` fits adjusted ratios and attributes each group;
:func:`host_findings` attributes each reported host. Both read the step-4
:class:`HostTables` and turn rows into the facts of :mod:`.facts`, then into
:mod:`.models` (evidence as data: the attribution rules are in
:mod:`.attribution`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from coreepi.epi.attribution import attribute_group, attribute_host, clustered_association
from coreepi.epi.config import EpiConfig
from coreepi.epi.confounding import AdjustedRatio, adjusted_rate_ratio, exposure_cube
from coreepi.epi.facts import AssociationFacts, GroupFacts, HostFacts, HostSigns, WindowExposure
from coreepi.epi.hosts import phenotype_counts
from coreepi.epi.models import (
    Association,
    Concentration,
    GroupFinding,
    HostCount,
    HostFinding,
    NamedCount,
    TelemetryLead,
    TelemetrySummary,
    Verdict,
    num,
    ratio_status,
    sir_status,
)
from coreepi.epi.digest import (
    epidemic_curves,
    group_hw_counts,
    named_counts,
    records_by_gid,
    rows_by_gid,
    telemetry_details,
    telemetry_examples,
    telemetry_leads,
    top_signatures,
)

__all__ = ["HostTables", "group_findings", "host_findings"]


@dataclass(frozen=True)
class HostTables:
    """Step 4's output: the host tables, and the signs of the hosts findings may cite."""

    hosts: pd.DataFrame
    """One row per host (index ``host_id``): :func:`~coreepi.epi.hosts.host_table` plus
    ``events``, ``hardware_events``, ``crashes_after_hardware_event``."""
    concentration: pd.DataFrame
    """``gid``, ``host_id``, ``crashes``, ``expected``, ``p_value``, ``share``; each
    group's hosts, most crashes first."""
    events: pd.DataFrame | None
    """Telemetry events that precede a crash of their host (None without telemetry)."""
    report_hosts: list[str]
    """The hosts reported: smallest SIR p-value first, at most ``max_hosts``."""
    signs: dict[str, HostSigns]
    """The facts of every host a finding may cite (each group's top host, every
    reported host)."""

    @classmethod
    def build(
        cls, crashes: pd.DataFrame, hosts: pd.DataFrame, concentration: pd.DataFrame,
        events: pd.DataFrame | None, fleet_node_days: float, config: EpiConfig,
    ) -> HostTables:
        """Pick the hosts to cite and gather their signs (one pass per table)."""
        report = _candidate_hosts(hosts, config)
        cite = set(concentration.groupby("gid", sort=False).head(1)["host_id"]) | set(report)
        cite &= set(hosts.index)
        hw = named_counts(phenotype_counts(crashes, "hardware_phenotypes", list(cite)))
        tel = telemetry_details(events, cite)
        leads = telemetry_leads(events)
        signs = {str(h): _signs(hosts.loc[h], str(h), hw, tel, leads, fleet_node_days, config)
                 for h in cite}
        return cls(hosts, concentration, events, report, signs)


def _signs(
    r: pd.Series, host_id: str, hw: dict[Any, tuple[tuple[str, int], ...]],
    tel: dict[str, tuple[tuple[tuple[str, int], ...], str | None]],
    leads: dict[str, TelemetryLead], fleet_node_days: float, config: EpiConfig,
) -> HostSigns:
    kinds, example = tel.get(host_id, ((), None))
    crashes, expected = int(r["crashes"]), float(r["expected"])
    sufficient = bool(r["exposure_sufficient"])
    status = (sir_status(int(r["sir_observed"]), expected, fleet_node_days) if sufficient
              else "undefined")
    return HostSigns(
        host_id=host_id, crashes=crashes, expected=expected, sir=num(r["sir"]),
        sir_status=status, sir_lower=num(r["sir_lower"]),
        sir_upper=num(r["sir_upper"]), p_value=num(r["p_value"]),
        distinct_signatures=int(r["distinct_signatures"]),
        expected_distinct=float(r["expected_distinct_signatures"]),
        private_signatures=int(r["private_signatures"]),
        hardware_phenotype_crashes=int(r["hardware_phenotype_crashes"]),
        hardware_phenotypes=hw.get(host_id, ()), hardware_events=int(r["hardware_events"]),
        crashes_after_hardware_event=int(r["crashes_after_hardware_event"]),
        telemetry_kinds=kinds, telemetry_example=example, telemetry_days=config.telemetry_days,
        telemetry_lead=leads.get(host_id), node_days=float(r["node_days"]),
        exposure_sufficient=sufficient,
    )  # fmt: skip


def _candidate_hosts(hosts: pd.DataFrame, config: EpiConfig) -> list[str]:
    """Hosts worth reporting: with a crash, smallest SIR p-value first, at most max_hosts."""
    cand = hosts.loc[hosts["crashes"] > 0].sort_values(
        ["p_value", "crashes"], ascending=[True, False]
    )
    return [str(h) for h in cand.index[: config.max_hosts]]


def group_findings(
    crashes: pd.DataFrame, exposure: pd.DataFrame, node_days: float, groups: pd.DataFrame,
    members: pd.DataFrame, associations: pd.DataFrame, hosts: HostTables, config: EpiConfig,
    observed: WindowExposure,
) -> tuple[list[GroupFinding], dict[str, Verdict]]:
    """Step 5: each group's associations (adjusted where it matters), attribution, finding.

    Input: the crashes and exposure of step 2 (with ``host_id`` when each host's
    exposure is known: the adjusted ratios are then cluster-robust by host), the
    groups, members and associations of step 3, the host tables of step 4, the
    window's exposure (no or thin exposure: every group undetermined). Output: the
    findings in group order, and ``{signature: verdict}`` of the signature groups.
    """
    glm_attrs = _glm_attributes(associations, config)
    cube = exposure_cube(exposure, glm_attrs) if glm_attrs else None
    group_hw = named_counts(group_hw_counts(members, crashes), key="gid")
    assoc_by_gid = records_by_gid(
        associations.assign(_neg_irr=-associations["irr"].fillna(np.inf)).sort_values(
            ["gid", "p_value", "_neg_irr"], na_position="last", kind="stable"
        )
    )
    conc = hosts.concentration
    conc_by_gid = records_by_gid(conc.loc[conc.groupby("gid", sort=False).cumcount() < 5])
    excess_by_gid = (
        (conc["p_value"] < config.host_concentration_p).groupby(conc["gid"], sort=False).sum()
    )
    rows = rows_by_gid(members)
    curves = epidemic_curves(members, crashes)
    out: list[GroupFinding] = []
    verdicts: dict[str, Verdict] = {}
    for g in groups.reset_index().to_dict("records"):
        gid = int(g["gid"])
        assoc = _associations(assoc_by_gid.get(gid, []), rows.get(gid), crashes, cube, config)
        top_hosts = conc_by_gid.get(gid, [])
        top = top_hosts[0] if top_hosts else None
        facts = GroupFacts(
            kind=str(g["kind"]), key=str(g["key"]), crashes=int(g["crashes"]),
            hosts=int(g["hosts"]), hardware_phenotype_crashes=int(g["hardware_phenotype_crashes"]),
            hardware_phenotypes=group_hw.get(gid, ()),
            top_host=str(top["host_id"]) if top is not None else None,
            top_host_crashes=int(top["crashes"]) if top is not None else 0,
            top_host_expected=num(top["expected"]) if top is not None else None,
            top_host_p=num(top["p_value"]) if top is not None else None,
            top_host_signs=hosts.signs.get(str(top["host_id"])) if top is not None else None,
            associations=tuple(_facts(a) for a in assoc), exposure=observed,
        )  # fmt: skip
        attribution = attribute_group(facts, config)
        if facts.kind == "signature":
            verdicts[facts.key] = attribution.verdict
        out.append(GroupFinding(
            kind=facts.kind,  # type: ignore[arg-type]
            key=facts.key, crashes=facts.crashes, hosts=facts.hosts, rate=num(g["rate"]),
            rate_lower=num(g["rate_lower"]), rate_upper=num(g["rate_upper"]),
            hardware_phenotype_crashes=facts.hardware_phenotype_crashes,
            hardware_phenotypes=[NamedCount(name=n, crashes=k)
                                 for n, k in facts.hardware_phenotypes],
            first_seen=g["first_seen"] if pd.notna(g["first_seen"]) else None,
            last_seen=g["last_seen"] if pd.notna(g["last_seen"]) else None,
            associations=[a for a, _, _ in assoc],
            concentration=_concentration(facts, top_hosts, int(excess_by_gid.get(gid, 0)),
                                         clustered_association(facts, config)),
            attribution=attribution, epidemic_curve=curves.get(gid, []),
            crashes_in_exposure=int(g["crashes_in_exposure"]),
        ))  # fmt: skip
    return out, verdicts


def _concentration(facts: GroupFacts, top_hosts: list[dict[str, Any]], excess: int,
                   clustered: AssociationFacts | None) -> Concentration:
    return Concentration(
        clustered_hosts=list(clustered.clustered_hosts) if clustered else [],
        clustered_crashes=clustered.clustered_crashes if clustered else 0,
        hosts=facts.hosts, top_host=facts.top_host, top_host_crashes=facts.top_host_crashes,
        top_host_share=num(facts.top_share) if facts.crashes else None,
        top_host_expected=facts.top_host_expected, top_host_p_value=facts.top_host_p,
        excess_hosts=excess,
        top_hosts=[
            HostCount(host_id=str(r["host_id"]), crashes=int(r["crashes"]),
                      expected=float(r["expected"]), p_value=num(r["p_value"]),
                      share=float(r["share"]))
            for r in top_hosts
        ],
    )  # fmt: skip


def host_findings(
    crashes: pd.DataFrame, hosts: HostTables, sig_verdicts: dict[str, Verdict],
    with_telemetry: bool, config: EpiConfig, observed: WindowExposure,
) -> list[HostFinding]:
    """Step 6: each reported host's attribution, from its signs and the verdict mix of the
    signature groups holding its crashes.

    Input: the crashes of step 2, the host tables of step 4, the signature
    verdicts of step 5, the window's exposure (no or thin exposure: a host with node-time
    of its own is undetermined too). Output: hardware-suspect hosts first, then by SIR
    p-value.
    """
    # a host's mix counts only its own crashes: the reported hosts' rows
    # (a few thousand of a million) give the same counts in the same order
    mine = crashes.loc[crashes["host_id"].isin(hosts.report_hosts), ["host_id", "signature"]]
    # crashes in no analysed signature group count as undetermined
    verdict_of_crash = mine["signature"].map(sig_verdicts).fillna("undetermined")
    mix = (
        pd.DataFrame({"host_id": mine["host_id"].to_numpy(), "v": verdict_of_crash.to_numpy()})
        .groupby(["host_id", "v"], sort=False).size()
    )  # fmt: skip
    mix_hosts = set(mix.index.get_level_values(0))
    top_sigs = top_signatures(crashes, hosts.report_hosts)
    examples = telemetry_examples(hosts.events, hosts.report_hosts)
    out: list[HostFinding] = []
    for host_id in hosts.report_hosts:
        s = hosts.signs[host_id]
        vmix: tuple[tuple[Verdict, int], ...] = ()
        if host_id in mix_hosts:
            m = mix.loc[host_id].sort_values(ascending=False)
            vmix = tuple((str(v), int(n)) for v, n in m.items())  # type: ignore[misc]
        r = hosts.hosts.loc[host_id]
        telemetry = TelemetrySummary(
            window_days=config.telemetry_days, events=int(r["events"]),
            hardware_events=int(r["hardware_events"]),
            crashes_after_hardware_event=int(r["crashes_after_hardware_event"]),
            by_kind=dict(s.telemetry_kinds), examples=examples.get(host_id, []),
        ) if with_telemetry else None  # fmt: skip
        out.append(HostFinding(
            host_id=host_id, crashes=s.crashes, node_days=float(r["node_days"]),
            expected=s.expected, sir=s.sir, sir_status=s.sir_status, sir_lower=s.sir_lower,
            sir_upper=s.sir_upper, p_value=s.p_value,
            distinct_signatures=s.distinct_signatures,
            expected_distinct_signatures=s.expected_distinct,
            private_signatures=s.private_signatures, top_signatures=top_sigs.get(host_id, []),
            hardware_phenotype_crashes=s.hardware_phenotype_crashes,
            hardware_phenotypes=[NamedCount(name=n, crashes=k) for n, k in s.hardware_phenotypes],
            telemetry=telemetry,
            attribution=attribute_host(
                HostFacts(signs=s, group_verdicts=vmix, exposure=observed), config),
            exposure_sufficient=s.exposure_sufficient,
            crashes_outside_exposure=int(r["crashes_outside_exposure"]),
        ))  # fmt: skip
    out.sort(key=lambda h: (h.attribution.verdict != "hardware-suspect",
                            h.p_value if h.p_value is not None else 2.0))
    return out


def _glm_attributes(assoc: pd.DataFrame, config: EpiConfig) -> list[str]:
    """Every attribute any group's model may use: those with a significant association."""
    sig = assoc.loc[assoc["q_value"] <= config.fdr_q]
    order = sig.groupby("attribute", sort=False)["p_value"].min().sort_values()
    return [str(a) for a in order.index]


def _associations(
    records: list[dict[str, Any]], rows: np.ndarray | None, crashes: pd.DataFrame,
    cube: pd.DataFrame | None, config: EpiConfig,
) -> list[tuple[Association, list[str], int]]:
    """The group's associations (``records`` sorted by p-value), adjusted where fitted.

    Adjusted ratios are fitted for the significant associations with a rate
    ratio ≥ ``min_irr`` (the ones that could become evidence), adjusting for
    the group's other significant attributes.
    """
    if not records:
        return []
    adjusted = _adjusted(records, rows, crashes, cube, config)
    keep = records[: config.max_associations_per_group]
    keep += [r for r in records[config.max_associations_per_group:]
             if (r["attribute"], r["value"]) in adjusted]
    return [_association(r, adjusted.get((str(r["attribute"]), str(r["value"]))), config)
            for r in keep]


def _adjusted(
    records: list[dict[str, Any]], rows: np.ndarray | None, crashes: pd.DataFrame,
    cube: pd.DataFrame | None, config: EpiConfig,
) -> dict[tuple[str, str], AdjustedRatio]:
    """{(attribute, value): the GLM-adjusted ratio} for the associations worth fitting."""

    def significant(r: dict[str, Any]) -> bool:
        q = r["q_value"]
        return bool(np.isfinite(q)) and q <= config.fdr_q

    covariates: list[str] = []
    for r in records:  # sorted by p-value: first appearance is the attribute's best test
        if significant(r) and r["attribute"] not in covariates:
            covariates.append(str(r["attribute"]))
    covariates = covariates[: config.glm_max_attributes]
    to_fit = [
        r for r in records
        if significant(r)
        and not (r["irr"] < config.min_irr)  # NaN-safe: an unbounded ratio is fitted too
        and r["irr_lower"] > 1.0 and r["attribute"] in covariates
    ][: config.glm_max_fits_per_group]  # fmt: skip
    if cube is None or not to_fit or len(covariates) < 2 or rows is None:
        return {}
    keys = [*covariates, "host_id"] if "host_id" in cube.columns else covariates
    # a crash outside exposure has no node-time in the model's cells: not in its counts
    group_crashes = crashes[keys].iloc[rows[crashes["in_exposure"].to_numpy(bool)[rows]]]
    out: dict[tuple[str, str], AdjustedRatio] = {}
    for r in to_fit:
        attr, value = str(r["attribute"]), str(r["value"])
        out[(attr, value)] = adjusted_rate_ratio(
            group_crashes, cube, attr, value, [c for c in covariates if c != attr],
            alpha=config.alpha, max_abs_coef=config.glm_max_abs_coef,
        )  # fmt: skip
    return out


def _association(r: dict[str, Any], adj: AdjustedRatio | None, config: EpiConfig
                 ) -> tuple[Association, list[str], int]:
    """The association, with its clustered hosts and their crashes (facts, not output)."""
    return Association(
        attribute=str(r["attribute"]), attribute_class=r["attribute_class"],
        value=str(r["value"]), crashes=int(r["crashes"]), node_days=float(r["node_days"]),
        rate=num(r["rate"]), rest_crashes=int(r["rest_crashes"]),
        rest_node_days=float(r["rest_node_days"]), share_of_group=num(r["share_of_group"]),
        expected=num(r["expected"]), irr=num(r["irr"]), irr_status=ratio_status(r["irr"]),
        irr_lower=num(r["irr_lower"]), irr_upper=num(r["irr_upper"]),
        p_value=num(r["p_value"]), q_value=num(r["q_value"]),
        adjusted_irr=num(adj.irr) if adj else None,
        adjusted_status=ratio_status(adj.irr) if adj and adj.irr is not None else None,
        adjusted_lower=adj.lower if adj else None, adjusted_upper=adj.upper if adj else None,
        adjusted_p_value=adj.p_value if adj else None,
        adjusted_for=list(adj.adjusted_for) if adj else [],
        adjustment_note=adj.note if adj else None,
        adjusted_method=adj.method if adj else None,
        adjustment_assessable=adj.assessable if adj else None,
        q_family=str(r["q_family"]), attribute_q_value=num(r["attribute_q_value"]),
        hosts_affected=_int(r["hosts_affected"]), hosts_exposed=_int(r["hosts_exposed"]),
        rest_hosts_affected=_int(r["rest_hosts_affected"]),
        rest_hosts_exposed=_int(r["rest_hosts_exposed"]), host_p_value=num(r["host_p_value"]),
        value_hosts=_int(r["value_hosts"]), rest_value_hosts=_int(r["rest_value_hosts"]),
        untested="few-hosts" if _few_hosts(r, config) else None,
    ), list(r["clustered_hosts"]), _int(r["clustered_crashes"]) or 0  # fmt: skip


def _few_hosts(r: dict[str, Any], config: EpiConfig) -> bool:
    """The row was not tested: its value or the rest is on too few hosts (groups.py)."""
    return any(_int(r[c]) is not None and int(r[c]) < config.min_value_hosts
               for c in ("value_hosts", "rest_value_hosts"))


def _int(x: Any) -> int | None:
    return None if x is None or not np.isfinite(x) else int(x)


def _facts(item: tuple[Association, list[str], int]) -> AssociationFacts:
    a, clustered, clustered_crashes = item
    return AssociationFacts(
        attribute=a.attribute, attribute_class=a.attribute_class, value=a.value,
        crashes=a.crashes, share_of_group=a.share_of_group, irr=a.irr,
        irr_status=a.irr_status, irr_lower=a.irr_lower, irr_upper=a.irr_upper,
        p_value=a.p_value, q_value=a.q_value, q_family=a.q_family, adjusted_irr=a.adjusted_irr,
        adjusted_status=a.adjusted_status, adjusted_lower=a.adjusted_lower,
        adjusted_upper=a.adjusted_upper, adjusted_for=tuple(a.adjusted_for),
        adjustment_note=a.adjustment_note, adjustment_assessable=a.adjustment_assessable,
        adjusted_method=a.adjusted_method, hosts_affected=a.hosts_affected,
        hosts_exposed=a.hosts_exposed, rest_hosts_affected=a.rest_hosts_affected,
        rest_hosts_exposed=a.rest_hosts_exposed, host_p_value=a.host_p_value,
        clustered_hosts=tuple(clustered), clustered_crashes=clustered_crashes,
    )  # fmt: skip
