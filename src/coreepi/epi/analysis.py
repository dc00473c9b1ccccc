"""``analyze_fleet``: from crash, exposure and telemetry tables to FleetFindings.

The one entry point of ``coreepi.epi``: a pipeline of named steps, each a
pure function of tables (its input frames and output are in its docstring):

1. :func:`frame_window` — validate, fix the window, clip exposure to it
   (:mod:`.tables`, :mod:`.exposure`);
2. :func:`attach_attributes` — give each crash the attributes of its
   exposure interval, bin numeric attributes, cap levels (:mod:`.exposure`);
3. :func:`find_groups` — groups by signature and by phenotype, rates with
   exact CIs, crude rate ratios for every group × attribute value, q-values by
   testing family (:mod:`.groups`, :mod:`.families`), and the host-level
   checks of the candidate associations (:mod:`.hostlevel`);
4. :func:`study_hosts` — SIR (standardized over ``standardize_by``) /
   diversity / hardware phenotypes / telemetry per host, host concentration
   per group (:mod:`.hosts`); only crashes inside exposure, and no test for a
   host under ``min_host_node_days``;
5. :func:`~coreepi.epi.assemble.group_findings` — adjusted rate ratios
   (Poisson GLM, :mod:`.confounding`) and attribution of each group
   (:mod:`.attribution`);
6. :func:`~coreepi.epi.assemble.host_findings` — attribution of each reported
   host, from its signs and the verdicts of its crashes' groups;
7. :func:`summarize_window` — fleet totals, and the notes.

Cost: one pass of sort/merge/groupby over the tables, then loops over at most
``max_groups`` groups and ``max_hosts`` hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import pandas as pd

from coreepi.epi.assemble import HostTables, group_findings, host_findings
from coreepi.epi.config import EpiConfig
from coreepi.epi.exposure import AttributeInfo, attach_sets, clip_exposure, prepare_attributes
from coreepi.epi.groups import association_table, group_table, memberships, value_host_counts
from coreepi.epi.hostlevel import host_level_associations
from coreepi.epi.lists import explode_lists
from coreepi.epi.hosts import (
    _list_lengths,
    host_concentration,
    host_table,
    telemetry_before_crashes,
)
from coreepi.epi.facts import WindowExposure
from coreepi.epi.models import AttributeSummary, FleetFindings, Window, num
from coreepi.epi.rates import incidence_rate
from coreepi.epi.tables import (
    EXPOSURE_SET,
    NodeTime,
    validate_crashes,
    validate_exposure,
    validate_node_time,
    validate_telemetry,
)

__all__ = [
    "Framed",
    "Grouped",
    "analyze_fleet",
    "attach_attributes",
    "find_groups",
    "frame_window",
    "study_hosts",
    "summarize_window",
    "window_exposure",
]

_NOT_ATTRIBUTES = ("crash_id", "captured_at", "signature", "phenotypes", "hardware_phenotypes")


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
    ignored; the crashes carry ``exposure_set``). Both give the same findings
    for the same fleet. A naive datetime is taken as UTC. Returns
    :class:`coreepi.epi.models.FleetFindings`. Raises
    :class:`coreepi.epi.tables.TableError` (a ValueError) on a broken table.
    """
    config = config or EpiConfig()
    framed = frame_window(crashes, exposure, telemetry, since, until)
    framed, infos = attach_attributes(framed, config)
    grouped = find_groups(framed, infos, config)
    hosts = study_hosts(framed, grouped, telemetry, config)
    # per-host exposure, where known, makes the adjusted ratios cluster-robust by host
    by_host = framed.host_level([i.name for i in infos])
    observed = window_exposure(framed)
    groups, sig_verdicts = group_findings(
        framed.crashes, framed.exposure if by_host is None else by_host, framed.node_days, grouped.groups, grouped.members,
        grouped.associations, hosts, config, observed,
    )  # fmt: skip
    window = summarize_window(framed, grouped, config, observed)
    return FleetFindings(
        window=window,
        attributes=[_attribute_summary(i) for i in infos],
        groups=groups,
        hosts=host_findings(framed.crashes, hosts, sig_verdicts, telemetry is not None, config,
                            observed),
        config=config.as_dict(),
        notes=_notes(framed, window, config),
    )


@dataclass(frozen=True)
class Framed:
    """The tables restricted to the window (output of step 1, refined by step 2)."""

    crashes: pd.DataFrame
    """The crashes in ``[since, until)``, ``captured_at`` in UTC, index 0..n-1."""
    exposure: pd.DataFrame
    """Exposure rows in the window with ``node_days``: clipped intervals, or the store's
    summed attribute sets."""
    host_exposure: pd.DataFrame
    """``host_id``, ``node_days``: each host's exposure in the window."""
    since: pd.Timestamp
    until: pd.Timestamp
    node_days: float
    """Total exposure of the fleet in the window."""
    node_time: NodeTime | None
    """The store's summed exposure, when that path was taken."""
    crash_only: tuple[str, ...] = ()
    """Attribute columns of the crashes without exposure (cannot be tested)."""
    host_sets: pd.DataFrame | None = None
    """Node-time path only: ``host_id``, ``row`` (row of ``exposure``), ``node_days`` —
    each host's exposure per attribute set, when the store gave it."""

    def host_level(self, columns: list[str]) -> pd.DataFrame | None:
        """``host_id``, ``columns``, ``node_days``: each host's exposure by those attribute
        values (the clipped intervals, or the store's per-host sets); None when the
        node-time path came without per-host sets."""
        if self.node_time is None:
            return self.exposure[["host_id", *columns, "node_days"]]
        if self.host_sets is None:
            return None
        rows = self.host_sets["row"].to_numpy()
        out = self.exposure[columns].iloc[rows].reset_index(drop=True)
        out.insert(0, "host_id", self.host_sets["host_id"].to_numpy())
        out["node_days"] = self.host_sets["node_days"].to_numpy(np.float64)
        return out


def frame_window(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame | NodeTime,
    telemetry: pd.DataFrame | None,
    since: datetime | pd.Timestamp | str | None,
    until: datetime | pd.Timestamp | str | None,
) -> Framed:
    """Step 1: validate the tables, fix the window, keep the crashes and exposure in it.

    Input: the caller's tables (:mod:`.tables`). Output: :class:`Framed`. Raises
    :class:`~coreepi.epi.tables.TableError` on a broken table.
    """
    validate_crashes(crashes)
    node_time = exposure if isinstance(exposure, NodeTime) else None
    if node_time is not None:
        validate_node_time(node_time, crashes)
    else:
        validate_exposure(exposure)  # type: ignore[arg-type]
    if telemetry is not None:
        validate_telemetry(telemetry)
    # copy-on-write (pandas 3): the caller's frame is never changed, and the columns
    # this does not touch stay shared with it (no copy of a million rows)
    crashes = crashes.reset_index(drop=True)
    crashes["captured_at"] = crashes["captured_at"].dt.tz_convert("UTC")
    if node_time is not None:
        lo, hi = _utc(node_time.since), _utc(node_time.until)
        assert lo is not None and hi is not None
        exp_columns = {*node_time.sets.columns, "host_id", EXPOSURE_SET}
        positive = node_time.sets["node_days"].to_numpy(np.float64) > 0
        exp = node_time.sets.loc[positive].reset_index(drop=True)
        host_sets = _host_sets(node_time.host_sets, positive)
        by_host = node_time.by_host[node_time.by_host > 0]
        host_exp = pd.DataFrame(
            {"host_id": by_host.index.to_numpy(), "node_days": by_host.to_numpy(np.float64)}
        )
    else:
        exposure = exposure.copy()  # type: ignore[union-attr]
        exposure["start"] = exposure["start"].dt.tz_convert("UTC")
        exposure["end"] = exposure["end"].dt.tz_convert("UTC")
        lo, hi = _window(exposure, crashes, _utc(since), _utc(until))
        exp_columns = set(exposure.columns)
        exp = clip_exposure(exposure, lo, hi)
        host_exp = exp[["host_id", "node_days"]]
        host_sets = None
    in_window = (crashes["captured_at"] >= lo) & (crashes["captured_at"] < hi)
    if not in_window.all():
        crashes = crashes.loc[in_window].reset_index(drop=True)
    crash_only = tuple(
        str(c) for c in crashes.columns if c not in exp_columns and c not in _NOT_ATTRIBUTES
    )
    return Framed(crashes, exp, host_exp, lo, hi, float(exp["node_days"].sum()), node_time,
                  crash_only, host_sets)


def _host_sets(host_sets: pd.DataFrame | None, positive: np.ndarray) -> pd.DataFrame | None:
    """The store's per-host sets pointed at the kept rows (sets with exposure) of ``sets``."""
    if host_sets is None:
        return None
    position = np.full(len(positive) + 1, -1, dtype=np.int64)
    position[np.flatnonzero(positive)] = np.arange(int(positive.sum()))
    rows = position[host_sets["set"].to_numpy(np.int64)]
    keep = (rows >= 0) & (host_sets["node_days"].to_numpy(np.float64) > 0)
    return pd.DataFrame({
        "host_id": host_sets["host_id"].to_numpy(object)[keep],
        "row": rows[keep],
        "node_days": host_sets["node_days"].to_numpy(np.float64)[keep],
    })  # fmt: skip


def attach_attributes(framed: Framed, config: EpiConfig) -> tuple[Framed, list[AttributeInfo]]:
    """Step 2: every exposure attribute as a categorical column of crashes and exposure.

    Input: :class:`Framed`. Output: the same with ``crashes`` gaining each
    attribute (the value of its exposure interval), ``in_exposure`` and
    ``_n_hw`` (hardware phenotypes per crash), and ``exposure``'s attributes
    binned and level-capped; plus one :class:`AttributeInfo` per tested attribute.
    """
    crashes, exp = framed.crashes, framed.exposure
    if framed.node_time is not None:
        attrs = [c for c in exp.columns if c != "node_days"]
        crashes = attach_sets(crashes, framed.node_time.sets, attrs)
    crashes, exp, infos = prepare_attributes(
        crashes, exp, config, attach=framed.node_time is None
    )
    crashes["_n_hw"] = _list_lengths(crashes["hardware_phenotypes"]).to_numpy()
    return replace(framed, crashes=crashes, exposure=exp), infos


@dataclass(frozen=True)
class Grouped:
    """Step 3's output: the groups and their crude associations."""

    groups: pd.DataFrame
    """One row per group (index ``gid``): see :func:`~coreepi.epi.groups.group_table`."""
    members: pd.DataFrame
    """``gid``, ``row`` (crash row): which crashes each group holds."""
    associations: pd.DataFrame
    """One row per (gid, attribute, value): see
    :func:`~coreepi.epi.groups.association_table`; ``attrs["tests"]`` counts the tests."""


def find_groups(framed: Framed, infos: list[AttributeInfo], config: EpiConfig) -> Grouped:
    """Step 3: signature and phenotype groups, their rates, and every crude rate ratio.

    Input: the crashes and exposure of step 2. Output: :class:`Grouped`.
    """
    groups, members = memberships(framed.crashes, config.max_groups)
    groups = group_table(groups, members, framed.crashes, framed.node_days,
                         per=config.rate_per, alpha=config.alpha)
    host_level = framed.host_level([i.name for i in infos])
    assoc = association_table(
        members, framed.crashes, framed.exposure, infos, groups["kind"].tolist(),
        alpha=config.alpha, per=config.rate_per, fdr_q=config.fdr_q,
        value_hosts=value_host_counts(host_level, infos) if host_level is not None else None,
        min_value_hosts=config.min_value_hosts,
    )  # fmt: skip
    host_nd = framed.host_exposure.groupby("host_id", sort=False)["node_days"].sum()
    assoc = host_level_associations(assoc, members, framed.crashes, host_level, host_nd,
                                    config)
    return Grouped(groups, members, assoc)


def study_hosts(
    framed: Framed, grouped: Grouped, telemetry: pd.DataFrame | None, config: EpiConfig
) -> HostTables:
    """Step 4: per-host statistics, per-group host concentration, telemetry before crashes.

    Input: the crashes and host exposure of step 2, the members of step 3, the
    telemetry table. Output: :class:`~coreepi.epi.assemble.HostTables`.
    """
    crashes = framed.crashes
    strata = [a for a in config.standardize_by if a in framed.exposure.columns]
    host_exp = framed.host_level(strata)
    if host_exp is None:  # summed node-time without per-host sets: fleet-wide rate
        strata, host_exp = [], framed.host_exposure
    hosts = host_table(crashes, host_exp, standardize_by=strata, alpha=config.alpha,
                       min_node_days=config.min_host_node_days)
    inside = crashes["in_exposure"].to_numpy(bool)[grouped.members["row"].to_numpy()]
    rows = grouped.members["row"].to_numpy()[inside]
    mem_hosts = pd.DataFrame({
        "gid": grouped.members["gid"].to_numpy()[inside],
        "host_id": crashes["host_id"].array.take(rows),  # no Python string per row
    })  # fmt: skip
    conc = host_concentration(mem_hosts, hosts["node_days"], framed.node_days,
                              config.min_host_node_days)
    events: pd.DataFrame | None = None
    if telemetry is not None and len(telemetry):
        tel = telemetry.copy()
        tel["ts"] = tel["ts"].dt.tz_convert("UTC")
        events, tel_host = telemetry_before_crashes(crashes, tel, config.telemetry_days)
        hosts = hosts.join(tel_host, how="left")
    for col in ("events", "hardware_events", "crashes_after_hardware_event"):
        if col not in hosts.columns:
            hosts[col] = 0
        hosts[col] = hosts[col].fillna(0).astype(np.int64)
    return HostTables.build(crashes, hosts, conc, events, framed.node_days, config)


def window_exposure(framed: Framed) -> WindowExposure:
    """The window's node-days, hosts with node-time and hosts with crashes: what
    ``rates_undetermined_reason`` and the ``exposure-too-thin`` rules judge."""
    host_exp = framed.host_exposure
    return WindowExposure(
        node_days=framed.node_days,
        hosts=int(host_exp.loc[host_exp["node_days"] > 0, "host_id"].nunique()),
        hosts_with_crashes=int(framed.crashes["host_id"].nunique()),
    )


def summarize_window(
    framed: Framed, grouped: Grouped, config: EpiConfig, observed: WindowExposure
) -> Window:
    """Step 7: the window and fleet totals (every crash in it, its rate, the test count).

    The rate's numerator is the crashes inside exposure (``in_exposure``), its
    denominator the window's node-days: a crash before its host's first heartbeat has no
    node-time below the line, so it is not above it either. ``observed`` is
    :func:`window_exposure` of ``framed``; ``rates_undetermined_reason`` is its
    :meth:`~coreepi.epi.facts.WindowExposure.rates_undetermined`.
    """
    crashes = framed.crashes
    inside = int(crashes["in_exposure"].sum())
    rate, rlo, rhi = incidence_rate(inside, framed.node_days, per=config.rate_per,
                                    alpha=config.alpha)
    return Window(
        since=framed.since.to_pydatetime(),
        until=framed.until.to_pydatetime(),
        node_days=framed.node_days,
        hosts=observed.hosts,
        hosts_with_crashes=observed.hosts_with_crashes,
        crashes=len(crashes),
        crashes_outside_exposure=int((~crashes["in_exposure"]).sum()),
        crashes_without_signature=int(crashes["signature"].isna().sum()),
        rate=num(rate),
        rate_lower=num(rlo),
        rate_upper=num(rhi),
        signature_groups=int(crashes["signature"].nunique()),
        phenotype_groups=len(pd.unique(explode_lists(crashes["phenotypes"])[1])),
        tests=int(grouped.associations.attrs.get("tests", 0)),
        crashes_in_exposure=inside,
        rates_undetermined_reason=observed.rates_undetermined(config),
    )


def _notes(framed: Framed, window: Window, config: EpiConfig) -> list[str]:
    """What the engine could not do or left out."""
    notes: list[str] = []
    if framed.node_days <= 0:
        notes.append("no exposure in the window: rates, ratios and expectations are undefined")
    elif window.rates_undetermined_reason == "thin-exposure":
        notes.append(
            f"exposure too thin for rates: {framed.node_days:.3g} node-days from "
            f"{window.hosts} host(s) with exposure, {window.hosts_with_crashes} with crashes "
            f"(rates need at least min_rate_node_days = {config.min_rate_node_days:g} "
            "node-days, and no more hosts with crashes than with exposure): the rates are kept "
            "in the JSON, not shown")
    if framed.crash_only:
        notes.append("attribute(s) only on crashes, without exposure, not tested: "
                     + ", ".join(framed.crash_only))
    if window.crashes_outside_exposure and framed.node_days > 0:
        notes.append(
            f"{window.crashes_outside_exposure} crash(es) fall in no exposure interval of their "
            "host: counted in the window's and their groups' crash totals, left out of every "
            "rate (the window's, the groups', the attribute ratios and their adjustment: no "
            "node-time of theirs is in any denominator) and of every per-host test (SIR, host "
            "concentration)"
        )
    if framed.node_time is not None and framed.host_sets is None:
        notes.append("the summed node-time came without per-host sets: the SIR uses the "
                     "fleet-wide rate, the host-level comparison of associations is not made, "
                     "and an attribute value held by fewer than "
                     f"{config.min_value_hosts} hosts cannot be told apart (it is tested)")
    if window.signature_groups > config.max_groups:
        notes.append(f"{window.signature_groups} signatures: the {config.max_groups} largest "
                     "are analysed as groups")
    return notes


def _utc(ts: datetime | pd.Timestamp | str | None) -> pd.Timestamp | None:
    if ts is None:
        return None
    t = pd.Timestamp(ts)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def _window(
    exposure: pd.DataFrame, crashes: pd.DataFrame, lo: pd.Timestamp | None,
    hi: pd.Timestamp | None,
) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The window: as given, else the exposure's span widened to cover every crash."""
    if lo is None:
        candidates = [exposure["start"].min(), crashes["captured_at"].min()]
        known = [c for c in candidates if pd.notna(c)]
        lo = min(known) if known else None
    if hi is None:
        candidates = [exposure["end"].max(), crashes["captured_at"].max() + pd.Timedelta(seconds=1)]
        known = [c for c in candidates if pd.notna(c)]
        hi = max(known) if known else None
    if lo is None or hi is None:
        lo = hi = pd.Timestamp.now(tz="UTC")
    return lo, hi


def _attribute_summary(i: AttributeInfo) -> AttributeSummary:
    return AttributeSummary(
        name=i.name,
        attribute_class=i.attribute_class,
        kind=i.kind,
        edges=list(i.edges),
        levels=list(i.levels),
        pooled_levels=i.pooled_levels,
    )
