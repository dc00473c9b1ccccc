"""``analyze_fleet``: from crash, exposure and telemetry tables to FleetFindings.

The one entry point of ``coreepi.epi``. Steps, each a pure function of the
modules beside this one:

1. validate the tables (:mod:`.tables`), fix the window, clip exposure to it;
2. attach to each crash the attributes of its exposure interval, bin numeric
   attributes, cap levels (:mod:`.exposure`);
3. groups by signature and by phenotype, rates with exact CIs, crude rate
   ratios for every group × attribute value, BH q-values (:mod:`.groups`);
4. host concentration per group, SIR / diversity / hardware phenotypes /
   telemetry per host (:mod:`.hosts`);
5. adjusted rate ratios (Poisson GLM) for each group's significant
   associations (:mod:`.confounding`);
6. attribution of groups, then of hosts (:mod:`.attribution`).

Cost: one pass of sort/merge/groupby over the tables, then loops over at most
``max_groups`` groups and ``max_hosts`` hosts.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from coreepi.epi.attribution import (
    AssociationFacts,
    GroupFacts,
    HostFacts,
    HostSigns,
    attribute_group,
    attribute_host,
)
from coreepi.epi.config import EpiConfig
from coreepi.epi.confounding import AdjustedRatio, adjusted_rate_ratio, exposure_cube
from coreepi.epi.exposure import (
    AttributeInfo,
    attach_sets,
    clip_exposure,
    prepare_attributes,
)
from coreepi.epi.groups import association_table, group_table, memberships
from coreepi.epi.hosts import (
    _list_lengths,
    host_concentration,
    host_table,
    phenotype_counts,
    telemetry_before_crashes,
)
from coreepi.epi.models import (
    Association,
    AttributeSummary,
    Concentration,
    DayCount,
    FleetFindings,
    GroupFinding,
    HostCount,
    HostFinding,
    NamedCount,
    TelemetrySummary,
    Verdict,
    Window,
    num,
)
from coreepi.epi.rates import incidence_rate
from coreepi.epi.tables import (
    EXPOSURE_SET,
    NodeTime,
    validate_crashes,
    validate_exposure,
    validate_node_time,
    validate_telemetry,
)

__all__ = ["analyze_fleet"]


def _utc(ts: datetime | pd.Timestamp | str | None) -> pd.Timestamp | None:
    if ts is None:
        return None
    t = pd.Timestamp(ts)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def _to_utc_column(series: pd.Series) -> pd.Series:
    return series.dt.tz_convert("UTC")


def _window(
    exposure: pd.DataFrame, crashes: pd.DataFrame, lo: pd.Timestamp | None,
    hi: pd.Timestamp | None,
) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The window: as given, else the exposure's span widened to cover every crash."""
    if lo is None:
        candidates = [exposure["start"].min(), crashes["captured_at"].min()]
        lo = (
            min(c for c in candidates if pd.notna(c))
            if any(pd.notna(c) for c in candidates)
            else None
        )
    if hi is None:
        candidates = [exposure["end"].max(), crashes["captured_at"].max() + pd.Timedelta(seconds=1)]
        hi = (
            max(c for c in candidates if pd.notna(c))
            if any(pd.notna(c) for c in candidates)
            else None
        )
    if lo is None or hi is None:
        lo = hi = pd.Timestamp.now(tz="UTC")
    return lo, hi


def analyze_fleet(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame | NodeTime,
    telemetry: pd.DataFrame | None = None,
    *,
    since: datetime | pd.Timestamp | str | None = None,
    until: datetime | pd.Timestamp | str | None = None,
    config: EpiConfig | None = None,
) -> FleetFindings:
    """Study a fleet's crashes as a population over ``[since, until)``.

    Tables as defined in :mod:`coreepi.epi.tables`. ``since``/``until``
    default to the earliest start / latest end of the exposure (widened to
    cover every crash). ``exposure`` is either the intervals or a
    :class:`~coreepi.epi.tables.NodeTime` (exposure the store already summed
    over its window, which then is the window: ``since``/``until`` are
    ignored; the crashes carry ``exposure_set``). A naive datetime is taken as UTC. Returns
    :class:`coreepi.epi.models.FleetFindings`. Raises
    :class:`coreepi.epi.tables.TableError` (a ValueError) on a broken table.
    """
    config = config or EpiConfig()
    validate_crashes(crashes)
    node_time = exposure if isinstance(exposure, NodeTime) else None
    if node_time is not None:
        validate_node_time(node_time, crashes)
    else:
        validate_exposure(exposure)  # type: ignore[arg-type]
    if telemetry is not None:
        validate_telemetry(telemetry)
    notes: list[str] = []

    crashes = crashes.reset_index(drop=True).copy()
    crashes["captured_at"] = _to_utc_column(crashes["captured_at"])

    # 1. window
    if node_time is not None:
        lo, hi = _utc(node_time.since), _utc(node_time.until)
        assert lo is not None and hi is not None
        exp_columns = {*node_time.sets.columns, "host_id", EXPOSURE_SET}
    else:
        exposure = exposure.copy()  # type: ignore[union-attr]
        exposure["start"] = _to_utc_column(exposure["start"])
        exposure["end"] = _to_utc_column(exposure["end"])
        lo, hi = _window(exposure, crashes, _utc(since), _utc(until))
        exp_columns = set(exposure.columns)
    in_window = (crashes["captured_at"] >= lo) & (crashes["captured_at"] < hi)
    crashes = crashes.loc[in_window].reset_index(drop=True)
    if node_time is not None:
        exp = node_time.sets.loc[node_time.sets["node_days"] > 0].reset_index(drop=True)
        by_host = node_time.by_host[node_time.by_host > 0]
        host_exp = pd.DataFrame(
            {"host_id": by_host.index.to_numpy(), "node_days": by_host.to_numpy(np.float64)}
        )
    else:
        exp = clip_exposure(exposure, lo, hi)  # type: ignore[arg-type]
        host_exp = exp[["host_id", "node_days"]]
    total_t = float(exp["node_days"].sum())
    if total_t <= 0:
        notes.append("no exposure in the window: rates, ratios and expectations are undefined")

    # 2. attributes
    crash_only = [
        c
        for c in crashes.columns
        if c not in exp_columns
        and c not in ("crash_id", "captured_at", "signature", "phenotypes", "hardware_phenotypes")
    ]
    if crash_only:
        notes.append(
            "attribute(s) only on crashes, without exposure, not tested: " + ", ".join(crash_only)
        )
    if node_time is not None:
        attrs = [c for c in exp.columns if c != "node_days"]
        crashes = attach_sets(crashes, node_time.sets, attrs)
    crashes, exp, infos = prepare_attributes(crashes, exp, config, attach=node_time is None)
    crashes["_n_hw"] = _list_lengths(crashes["hardware_phenotypes"]).to_numpy()

    # 3. groups and crude associations
    groups, members = memberships(crashes, config.max_groups)
    groups = group_table(groups, members, crashes, total_t, per=config.rate_per, alpha=config.alpha)
    assoc = association_table(
        members, crashes, exp, infos, len(groups), alpha=config.alpha, per=config.rate_per
    )

    # 4. hosts
    hosts = host_table(crashes, host_exp, alpha=config.alpha)
    host_nd = hosts["node_days"]
    mem_hosts = pd.DataFrame(
        {
            "gid": members["gid"].to_numpy(),
            "host_id": crashes["host_id"].to_numpy()[members["row"].to_numpy()],
        }
    )
    conc = host_concentration(mem_hosts, host_nd, total_t)
    tel_events: pd.DataFrame | None = None
    if telemetry is not None and len(telemetry):
        tel = telemetry.copy()
        tel["ts"] = _to_utc_column(tel["ts"])
        tel_events, tel_host = telemetry_before_crashes(crashes, tel, config.telemetry_days)
        hosts = hosts.join(tel_host, how="left")
    for col in ("events", "hardware_events", "crashes_after_hardware_event"):
        if col not in hosts.columns:
            hosts[col] = 0
        hosts[col] = hosts[col].fillna(0).astype(np.int64)

    # host-level hardware phenotype names, for hosts we may cite
    cite_hosts = set(conc.groupby("gid", sort=False).head(1)["host_id"])
    cite_hosts |= set(_candidate_hosts(hosts, config))
    hw_by_host = _named_counts(phenotype_counts(crashes, "hardware_phenotypes", list(cite_hosts)))
    tel_by_host = _telemetry_details(tel_events, cite_hosts)
    tel_leads = _telemetry_leads(tel_events)

    host_index = set(hosts.index)  # one hash set, not one Index lookup table per call

    def signs_of(host_id: str) -> HostSigns:
        r = hosts.loc[host_id]
        kinds, example = tel_by_host.get(host_id, ((), None))
        return HostSigns(
            host_id=str(host_id),
            crashes=int(r["crashes"]),
            expected=float(r["expected"]),
            sir=num(r["sir"]),
            sir_lower=num(r["sir_lower"]),
            sir_upper=num(r["sir_upper"]),
            p_value=num(r["p_value"]),
            distinct_signatures=int(r["distinct_signatures"]),
            expected_distinct=float(r["expected_distinct_signatures"]),
            private_signatures=int(r["private_signatures"]),
            hardware_phenotype_crashes=int(r["hardware_phenotype_crashes"]),
            hardware_phenotypes=hw_by_host.get(str(host_id), ()),
            hardware_events=int(r["hardware_events"]),
            crashes_after_hardware_event=int(r["crashes_after_hardware_event"]),
            telemetry_kinds=kinds,
            telemetry_example=example,
            telemetry_days=config.telemetry_days,
            telemetry_lead=tel_leads.get(str(host_id)),
        )

    # 5 + 6. groups: adjusted ratios, attribution
    glm_attrs = _glm_attributes(assoc, config)
    cube = exposure_cube(exp, glm_attrs) if glm_attrs else None
    group_hw = _named_counts(_group_hw_counts(members, crashes), key="gid")
    assoc_by_gid = _records_by_gid(
        assoc.assign(_neg_irr=-assoc["irr"].fillna(np.inf)).sort_values(
            ["gid", "p_value", "_neg_irr"], na_position="last", kind="stable"
        )
    )
    conc_top = conc.loc[conc.groupby("gid", sort=False).cumcount().to_numpy() < 5]
    conc_by_gid = _records_by_gid(conc_top)
    excess_by_gid = (
        (conc["p_value"] < config.host_concentration_p).groupby(conc["gid"], sort=False).sum()
    )
    rows_by_gid = _rows_by_gid(members)
    curves = _epidemic_curves(members, crashes)
    group_findings: list[GroupFinding] = []
    sig_verdict: dict[str, Verdict] = {}
    for g in groups.reset_index().to_dict("records"):
        gid = int(g["gid"])
        associations = _associations_for_group(
            assoc_by_gid.get(gid, []), rows_by_gid.get(gid), crashes, cube, config
        )
        c_recs = conc_by_gid.get(gid, [])
        top = c_recs[0] if c_recs else None
        facts = GroupFacts(
            kind=str(g["kind"]),
            key=str(g["key"]),
            crashes=int(g["crashes"]),
            hosts=int(g["hosts"]),
            hardware_phenotype_crashes=int(g["hardware_phenotype_crashes"]),
            hardware_phenotypes=group_hw.get(gid, ()),
            top_host=str(top["host_id"]) if top is not None else None,
            top_host_crashes=int(top["crashes"]) if top is not None else 0,
            top_host_expected=num(top["expected"]) if top is not None else None,
            top_host_p=num(top["p_value"]) if top is not None else None,
            top_host_signs=(
                signs_of(top["host_id"])
                if top is not None and top["host_id"] in host_index
                else None
            ),
            associations=tuple(_assoc_facts(a) for a in associations),
        )
        attribution = attribute_group(facts, config)
        if facts.kind == "signature":
            sig_verdict[facts.key] = attribution.verdict
        excess_hosts = int(excess_by_gid.get(gid, 0))
        group_findings.append(
            GroupFinding(
                kind=facts.kind,  # type: ignore[arg-type]
                key=facts.key,
                crashes=facts.crashes,
                hosts=facts.hosts,
                rate=num(g["rate"]),
                rate_lower=num(g["rate_lower"]),
                rate_upper=num(g["rate_upper"]),
                hardware_phenotype_crashes=facts.hardware_phenotype_crashes,
                hardware_phenotypes=[
                    NamedCount(name=n, crashes=k) for n, k in facts.hardware_phenotypes
                ],
                first_seen=g["first_seen"] if pd.notna(g["first_seen"]) else None,
                last_seen=g["last_seen"] if pd.notna(g["last_seen"]) else None,
                associations=associations,
                concentration=Concentration(
                    hosts=facts.hosts,
                    top_host=facts.top_host,
                    top_host_crashes=facts.top_host_crashes,
                    top_host_share=num(facts.top_share) if facts.crashes else None,
                    top_host_expected=facts.top_host_expected,
                    top_host_p_value=facts.top_host_p,
                    excess_hosts=excess_hosts,
                    top_hosts=[
                        HostCount(
                            host_id=str(r["host_id"]),
                            crashes=int(r["crashes"]),
                            expected=float(r["expected"]),
                            p_value=num(r["p_value"]),
                            share=float(r["share"]),
                        )
                        for r in c_recs
                    ],
                ),
                attribution=attribution,
                epidemic_curve=curves.get(gid, []),
            )
        )

    # 6b. hosts: verdict mix of their crashes' signature groups, then attribution
    verdict_of_crash = crashes["signature"].map(sig_verdict).fillna("undetermined")
    mix = (
        pd.DataFrame({"host_id": crashes["host_id"].to_numpy(), "v": verdict_of_crash.to_numpy()})
        .groupby(["host_id", "v"], sort=False)
        .size()
    )
    mix_hosts = set(mix.index.get_level_values(0))
    host_rows = _report_hosts(hosts, config)
    host_findings: list[HostFinding] = []
    extra_hw = _named_counts(
        phenotype_counts(
            crashes, "hardware_phenotypes", [h for h in host_rows if h not in cite_hosts]
        )
    )
    hw_by_host.update(extra_hw)
    tel_by_host.update(_telemetry_details(tel_events, set(host_rows) - cite_hosts))
    top_sigs = _top_signatures(crashes, host_rows)
    tel_examples = _examples_by_host(tel_events)
    for host_id in host_rows:
        s = signs_of(host_id)
        vmix: tuple[tuple[Verdict, int], ...] = ()
        if host_id in mix_hosts:
            m = mix.loc[host_id].sort_values(ascending=False)
            vmix = tuple((str(v), int(n)) for v, n in m.items())  # type: ignore[misc]
        attribution = attribute_host(HostFacts(signs=s, group_verdicts=vmix), config)
        r = hosts.loc[host_id]
        kinds, _ = tel_by_host.get(host_id, ((), None))
        host_findings.append(
            HostFinding(
                host_id=str(host_id),
                crashes=s.crashes,
                node_days=float(r["node_days"]),
                expected=s.expected,
                sir=s.sir,
                sir_lower=s.sir_lower,
                sir_upper=s.sir_upper,
                p_value=s.p_value,
                distinct_signatures=s.distinct_signatures,
                expected_distinct_signatures=s.expected_distinct,
                private_signatures=s.private_signatures,
                top_signatures=top_sigs.get(host_id, []),
                hardware_phenotype_crashes=s.hardware_phenotype_crashes,
                hardware_phenotypes=[
                    NamedCount(name=n, crashes=k) for n, k in s.hardware_phenotypes
                ],
                telemetry=(
                    TelemetrySummary(
                        window_days=config.telemetry_days,
                        events=int(r["events"]),
                        hardware_events=int(r["hardware_events"]),
                        crashes_after_hardware_event=int(r["crashes_after_hardware_event"]),
                        by_kind=dict(kinds),
                        examples=_examples(tel_examples, host_id),
                    )
                    if telemetry is not None
                    else None
                ),
                attribution=attribution,
            )
        )
    order = {"hardware-suspect": 0}
    host_findings.sort(
        key=lambda h: (
            order.get(h.attribution.verdict, 1),
            h.p_value if h.p_value is not None else 2.0,
        )
    )

    rate, rlo, rhi = incidence_rate(len(crashes), total_t, per=config.rate_per, alpha=config.alpha)
    window = Window(
        since=lo.to_pydatetime(),
        until=hi.to_pydatetime(),
        node_days=total_t,
        hosts=int(host_exp.loc[host_exp["node_days"] > 0, "host_id"].nunique()),
        hosts_with_crashes=int(crashes["host_id"].nunique()),
        crashes=len(crashes),
        crashes_outside_exposure=int((~crashes["in_exposure"]).sum()),
        crashes_without_signature=int(crashes["signature"].isna().sum()),
        rate=num(rate),
        rate_lower=num(rlo),
        rate_upper=num(rhi),
        signature_groups=int(crashes["signature"].nunique()),
        phenotype_groups=int(crashes["phenotypes"].explode().nunique()),
        tests=int(assoc.attrs.get("tests", 0)),
    )
    if window.crashes_outside_exposure:
        notes.append(
            f"{window.crashes_outside_exposure} crash(es) fall in no exposure interval of their "
            "host: counted in every rate, but their attributes are unknown"
        )
    n_sig = window.signature_groups
    if n_sig > config.max_groups:
        notes.append(f"{n_sig} signatures: the {config.max_groups} largest are analysed as groups")
    return FleetFindings(
        window=window,
        attributes=[_attribute_summary(i) for i in infos],
        groups=group_findings,
        hosts=host_findings,
        config=config.as_dict(),
        notes=notes,
    )


# --- helpers ------------------------------------------------------------------------------


def _attribute_summary(i: AttributeInfo) -> AttributeSummary:
    return AttributeSummary(
        name=i.name,
        attribute_class=i.attribute_class,
        kind=i.kind,
        edges=list(i.edges),
        levels=list(i.levels),
        pooled_levels=i.pooled_levels,
    )


def _glm_attributes(assoc: pd.DataFrame, config: EpiConfig) -> list[str]:
    """Every attribute any group's model may use: those with a significant association."""
    sig = assoc.loc[assoc["q_value"] <= config.fdr_q]
    order = sig.groupby("attribute", sort=False)["p_value"].min().sort_values()
    return [str(a) for a in order.index]


def _records_by_gid(frame: pd.DataFrame) -> dict[int, list[dict[str, Any]]]:
    """{gid: [row dicts in frame order]}, without a pandas operation per group."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rec in frame.to_dict("records"):
        out.setdefault(int(rec["gid"]), []).append(rec)
    return out


def _rows_by_gid(members: pd.DataFrame) -> dict[int, np.ndarray]:
    """{gid: crash row indexes}."""
    order = np.argsort(members["gid"].to_numpy(), kind="stable")
    gids = members["gid"].to_numpy()[order]
    rows = members["row"].to_numpy()[order]
    uniq, starts = np.unique(gids, return_index=True)
    bounds = [*starts[1:], len(gids)]
    return {int(g): rows[s:e] for g, s, e in zip(uniq, starts, bounds, strict=True)}


def _associations_for_group(
    records: list[dict[str, Any]],
    rows: np.ndarray | None,
    crashes: pd.DataFrame,
    cube: pd.DataFrame | None,
    config: EpiConfig,
) -> list[Association]:
    """The group's associations (``records`` sorted by p-value), adjusted where fitted.

    Adjusted ratios are fitted for the significant associations with a rate
    ratio ≥ ``min_irr`` (the ones that could become evidence), adjusting for
    the group's other significant attributes.
    """
    if not records:
        return []

    def significant(r: dict[str, Any]) -> bool:
        q = r["q_value"]
        return bool(np.isfinite(q)) and q <= config.fdr_q

    covariates: list[str] = []
    for r in records:  # sorted by p-value: first appearance is the attribute's best test
        if significant(r) and r["attribute"] not in covariates:
            covariates.append(str(r["attribute"]))
    covariates = covariates[: config.glm_max_attributes]
    to_fit = [
        r
        for r in records
        if significant(r)
        and not (r["irr"] < config.min_irr)  # NaN-safe: an unbounded ratio is fitted too
        and r["irr_lower"] > 1.0
        and r["attribute"] in covariates
    ][: config.glm_max_fits_per_group]
    adjusted: dict[tuple[str, str], AdjustedRatio] = {}
    if cube is not None and to_fit and len(covariates) > 1 and rows is not None:
        group_crashes = crashes[covariates].iloc[rows]
        for r in to_fit:
            attr, value = str(r["attribute"]), str(r["value"])
            adjusted[(attr, value)] = adjusted_rate_ratio(
                group_crashes,
                cube,
                attr,
                value,
                [c for c in covariates if c != attr],
                alpha=config.alpha,
                max_abs_coef=config.glm_max_abs_coef,
            )
    keep = records[: config.max_associations_per_group]
    keep += [
        r
        for r in records[config.max_associations_per_group :]
        if (r["attribute"], r["value"]) in adjusted
    ]
    out: list[Association] = []
    for r in keep:
        adj = adjusted.get((str(r["attribute"]), str(r["value"])))
        out.append(
            Association(
                attribute=str(r["attribute"]),
                attribute_class=r["attribute_class"],
                value=str(r["value"]),
                crashes=int(r["crashes"]),
                node_days=float(r["node_days"]),
                rate=num(r["rate"]),
                rest_crashes=int(r["rest_crashes"]),
                rest_node_days=float(r["rest_node_days"]),
                share_of_group=num(r["share_of_group"]),
                expected=num(r["expected"]),
                irr=num(r["irr"]),
                irr_lower=num(r["irr_lower"]),
                irr_upper=num(r["irr_upper"]),
                p_value=num(r["p_value"]),
                q_value=num(r["q_value"]),
                adjusted_irr=adj.irr if adj else None,
                adjusted_lower=adj.lower if adj else None,
                adjusted_upper=adj.upper if adj else None,
                adjusted_p_value=adj.p_value if adj else None,
                adjusted_for=list(adj.adjusted_for) if adj else [],
                adjustment_note=adj.note if adj else None,
            )
        )
    return out


def _assoc_facts(a: Association) -> AssociationFacts:
    # an infinite crude ratio (no crash outside the value) is None in the model: unbounded
    irr = a.irr if a.irr is not None or a.rest_crashes > 0 else None
    return AssociationFacts(
        attribute=a.attribute,
        attribute_class=a.attribute_class,
        value=a.value,
        crashes=a.crashes,
        share_of_group=a.share_of_group,
        irr=irr,
        irr_lower=a.irr_lower,
        irr_upper=a.irr_upper,
        p_value=a.p_value,
        q_value=a.q_value,
        adjusted_irr=a.adjusted_irr,
        adjusted_lower=a.adjusted_lower,
        adjusted_upper=a.adjusted_upper,
        adjusted_for=tuple(a.adjusted_for),
        adjustment_note=a.adjustment_note,
    )


def _epidemic_curves(members: pd.DataFrame, crashes: pd.DataFrame) -> dict[int, list[DayCount]]:
    """{gid: crashes per UTC day, days in order, days without a crash left out}."""
    out: dict[int, list[DayCount]] = {}
    if not len(members):
        return out
    at = crashes["captured_at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    day = at.astype("datetime64[D]").astype(np.int64)[members["row"].to_numpy()]
    counts = (
        pd.DataFrame({"gid": members["gid"].to_numpy(), "day": day})
        .groupby(["gid", "day"], sort=True)
        .size()
    )
    epoch = date(1970, 1, 1)
    for (gid, d), n in zip(counts.index, counts.to_numpy(), strict=True):
        out.setdefault(int(gid), []).append(
            DayCount(day=epoch + timedelta(days=int(d)), crashes=int(n))
        )
    return out


def _group_hw_counts(members: pd.DataFrame, crashes: pd.DataFrame) -> pd.DataFrame:
    hw = crashes["hardware_phenotypes"].iloc[members["row"].to_numpy()]
    frame = pd.DataFrame({"gid": members["gid"].to_numpy(), "phenotype": hw.to_numpy()})
    frame = frame.explode("phenotype").dropna(subset=["phenotype"])
    return frame.groupby(["gid", "phenotype"], sort=False).size().rename("crashes").reset_index()


def _named_counts(
    frame: pd.DataFrame, key: str = "host_id"
) -> dict[Any, tuple[tuple[str, int], ...]]:
    """{key: ((name, count), ...) largest first} from a (key, phenotype, crashes) frame."""
    out: dict[Any, tuple[tuple[str, int], ...]] = {}
    if not len(frame):
        return out
    frame = frame.sort_values([key, "crashes", "phenotype"], ascending=[True, False, True])
    for k, sub in frame.groupby(key, sort=False):
        out[k] = tuple(
            (str(p), int(n)) for p, n in zip(sub["phenotype"], sub["crashes"], strict=True)
        )
    return out


def _telemetry_details(
    events: pd.DataFrame | None, hosts: set[str]
) -> dict[str, tuple[tuple[tuple[str, int], ...], str | None]]:
    """{host: (((kind, n), ...), latest hardware event summary)} for ``hosts``."""
    out: dict[str, tuple[tuple[tuple[str, int], ...], str | None]] = {}
    if events is None or not len(events) or not hosts:
        return out
    sub = events.loc[events["host_id"].isin(list(hosts))]
    for h, frame in sub.groupby("host_id", sort=False):
        kinds = frame["kind"].astype(str).value_counts()
        hw = frame.loc[frame["hardware_indicative"].astype(bool)].sort_values("ts")
        example = str(hw["summary"].iloc[-1]) if len(hw) else None
        out[str(h)] = (tuple((str(k), int(n)) for k, n in kinds.items()), example)
    return out


_EVENT_WORDS = {
    "edac_ue": "EDAC uncorrected error", "edac_ce": "EDAC corrected error",
    "mce": "machine check", "xid": "NVIDIA Xid error", "aer": "PCIe AER error",
    "sigbus_mce": "SIGBUS memory-error kill", "other": "hardware event",
}


def _telemetry_leads(events: pd.DataFrame | None) -> dict[str, str]:
    """{host: "3 EDAC uncorrected errors on DIMM_B2"}: per host, the commonest
    (kind, component) among the hardware events that precede its crashes."""
    if events is None or not len(events):
        return {}
    hw = events.loc[events["hardware_indicative"].astype(bool)]
    component = hw["component"] if "component" in hw.columns else pd.Series("", index=hw.index)
    counts = (
        hw.assign(_c=component.astype(object).fillna(""), _k=hw["kind"].astype(str))
        .groupby(["host_id", "_k", "_c"], sort=False).size().rename("n").reset_index()
        .sort_values(["host_id", "n", "_k", "_c"], ascending=[True, False, True, True])
        .drop_duplicates("host_id")
    )
    out = {}
    for host, kind, component, n in counts[["host_id", "_k", "_c", "n"]].itertuples(index=False):
        word = _EVENT_WORDS.get(kind, kind)
        out[str(host)] = f"{n} {word}{'s' if n != 1 else ''}" + (
            f" on {component}" if component else "")
    return out


def _examples_by_host(events: pd.DataFrame | None) -> dict[Any, pd.DataFrame]:
    """{host_id: its events, in frame order}: one group-by instead of a scan per host."""
    if events is None or not len(events):
        return {}
    return {h: sub for h, sub in events.groupby("host_id", sort=False, dropna=True)}


def _examples(events_by_host: dict[Any, pd.DataFrame], host_id: str) -> list[str]:
    sub = events_by_host.get(host_id)
    if sub is None:
        return []
    sub = sub.sort_values("ts", ascending=False)
    return [str(s) for s in sub["summary"].head(3)]


def _candidate_hosts(hosts: pd.DataFrame, config: EpiConfig) -> list[str]:
    """Hosts worth reporting: at least min_host_crashes crashes, smallest SIR p-value first."""
    cand = hosts.loc[hosts["crashes"] > 0].sort_values(
        ["p_value", "crashes"], ascending=[True, False]
    )
    return [str(h) for h in cand.index[: config.max_hosts]]


def _report_hosts(hosts: pd.DataFrame, config: EpiConfig) -> list[str]:
    return _candidate_hosts(hosts, config)


def _top_signatures(crashes: pd.DataFrame, host_ids: list[str]) -> dict[str, list[NamedCount]]:
    sub = crashes.loc[
        crashes["host_id"].isin(host_ids) & crashes["signature"].notna(), ["host_id", "signature"]
    ]
    counts = sub.groupby(["host_id", "signature"], sort=False).size().rename("n").reset_index()
    counts = counts.sort_values(["host_id", "n", "signature"], ascending=[True, False, True])
    out: dict[str, list[NamedCount]] = {}
    for h, frame in counts.groupby("host_id", sort=False):
        out[str(h)] = [
            NamedCount(name=str(s), crashes=int(n))
            for s, n in zip(frame["signature"].head(5), frame["n"].head(5), strict=True)
        ]
    return out
