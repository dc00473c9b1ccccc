"""Rollout regressions: an attribute value took over node-time, and a group's rate moved with it.

A *rollout* of value ``v`` of attribute ``a`` (kernel, app version,
microcode, firmware, image) within the baseline + monitoring span: ``v``
held less than ``rollout_start_share`` of the node-time of the first day
that has any (a store younger than the span has none on its first days) and
reached ``rollout_share`` of a later day's. For each group, the *hosts*
with a crash of it on ``v`` since ``v`` first appeared, per node-time on
``v``, are compared with the hosts with a crash of it on every other value
over the whole span read, per node-time there (before the rollout and
alongside it: once a rollout is complete, the days alongside it hold too
little node-time on the old values to compare with). Hosts, not crashes:
crashes cluster on hosts, and one bad host that moved to ``v`` with its
44 crashes is one host's evidence, not 44 (a bad CPU must not read as a
version's regression). The exact conditional rate ratio
(:func:`coreepi.epi.rates.rate_ratio`; Breslow & Day 1987, vol. II §2.2),
Bonferroni-corrected over the (group, rollout) pairs tested. A regression
is reported when the ratio's lower 95% limit exceeds ``rollout_min_ratio``,
its p-value is below ``rollout_alpha`` / tests, and ``v`` holds at least
``rollout_min_crashes`` of the group's crashes on at least
``rollout_min_hosts`` hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from coreepi.epi.exposure import attach_attributes
from coreepi.epi.rates import rate_ratio
from coreepi.epi.surveillance.clock import FleetClock, days, to_timestamp
from coreepi.epi.surveillance.groups import windows
from coreepi.epi.surveillance.models import Detection, DetectorParams, ratio_evidence

__all__ = ["Rollout", "rollout_regressions", "rollouts"]


@dataclass(frozen=True)
class Rollout:
    """Value ``value`` of ``attribute`` rolled out: first seen ``first_seen``,
    reached the share threshold on the day starting ``reached`` (days since
    the epoch), with ``share`` its largest daily share of node-time."""

    attribute: str
    value: str
    first_seen: float
    reached: float
    share: float


def rollouts(exposure: pd.DataFrame, now: pd.Timestamp, params: DetectorParams) -> list[Rollout]:
    """The rollouts (see the module) in ``exposure`` up to ``now``, by attribute then value."""
    bs, _, t_now = windows(now, params)
    n_days = max(1, int(np.floor(t_now - bs)))
    edges = bs + np.arange(n_days + 1, dtype=np.float64)
    total = np.diff(FleetClock.from_exposure(exposure).at(edges))
    if not (total > 0).any():
        return []
    # the starting share is the first exposed day's: a value held from then on
    # was there before the store began, not rolled out
    first_day = int(np.argmax(total > 0))
    out: list[Rollout] = []
    for attr in params.rollout_attributes:
        if attr not in exposure.columns:
            continue
        values = exposure[attr].astype(object).where(exposure[attr].notna())
        for value, rows in exposure[values.notna()].groupby(values[values.notna()].astype(str)):
            clock = FleetClock.from_exposure(rows)
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(total > 0, np.diff(clock.at(edges)) / total, 0.0)
            if share[first_day] >= params.rollout_start_share or share.max() < params.rollout_share:
                continue
            reached = int(np.argmax(share >= params.rollout_share))
            first = float(max(days(rows["start"]).min(), bs))
            out.append(Rollout(attr, str(value), first, float(edges[reached]), float(share.max())))
    return out


def rollout_regressions(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams,
) -> list[Detection]:
    """Groups whose rate on a rolled-out value exceeds their rate on the others.

    Evidence: ``ratio``, ``lower``, ``upper`` (95%; None when unbounded; a
    ratio of affected hosts per node-time) with ``ratio_status``
    (:func:`~.models.ratio_evidence`), ``p_value``, ``crashes_on_value`` /
    ``hosts_on_value`` / ``node_days_on_value``, ``crashes_elsewhere`` /
    ``hosts_elsewhere`` / ``node_days_elsewhere`` (same days), ``share`` (largest daily share),
    ``first_seen`` and ``reached`` (ISO dates), ``tests`` (the Bonferroni
    denominator). ``at``: the latest crash counted on the value.
    """
    found = rollouts(exposure, now, params)
    if not found or crashes.empty:
        return []
    bs, _, t_now = windows(now, params)
    attrs = sorted({r.attribute for r in found})
    t = days(crashes["captured_at"])
    # merge_asof wants one datetime unit on both sides (frames may mix ns and µs)
    ns = "datetime64[ns, UTC]"
    framed = attach_attributes(
        crashes[t <= t_now].astype({"captured_at": ns}),
        exposure.astype({"start": ns, "end": ns}), attrs)
    t = days(framed["captured_at"])
    rows: list[tuple[Rollout, str, int, float, int, float, pd.Timestamp, int, int]] = []
    for r in found:
        known = exposure[r.attribute].notna()
        is_v = exposure[r.attribute].astype(str) == r.value
        e_on = FleetClock.from_exposure(exposure[is_v]).between(r.first_seen, t_now)
        e_off = FleetClock.from_exposure(exposure[known & ~is_v]).between(bs, t_now)
        span = framed[(t >= bs) & framed[r.attribute].notna()]
        on = (span[r.attribute].astype(str) == r.value).to_numpy()
        on_since = on & (days(span["captured_at"]) >= r.first_seen)
        c_on = span[on_since].groupby("signature").size()
        c_off = span[~on].groupby("signature").size()
        h_on = span[on_since].groupby("signature")["host_id"].nunique()
        h_off = span[~on].groupby("signature")["host_id"].nunique()
        last = span[on_since].groupby("signature")["captured_at"].max()
        for sig, n_on in c_on.items():
            if n_on >= params.rollout_min_crashes and h_on[sig] >= params.rollout_min_hosts:
                rows.append((r, str(sig), int(h_on[sig]), e_on, int(h_off.get(sig, 0)), e_off,
                             pd.Timestamp(last[sig]), int(n_on), int(c_off.get(sig, 0))))
    if not rows:
        return []
    rr = rate_ratio([x[2] for x in rows], [x[3] for x in rows],
                    [x[4] for x in rows], [x[5] for x in rows])
    tests = len(rows)
    out: list[Detection] = []
    for j, (r, sig, x1, t1, x2, t2, at, c1, c2) in enumerate(rows):
        if rr.p_value[j] < params.rollout_alpha / tests and rr.lower[j] > params.rollout_min_ratio:
            out.append(Detection(
                "rollout-regression",
                {"signature": sig, "attribute": r.attribute, "value": r.value},
                at,
                {**ratio_evidence(rr.ratio[j], rr.lower[j], rr.upper[j]),
                 "p_value": float(rr.p_value[j]),
                 "crashes_on_value": c1, "hosts_on_value": x1, "node_days_on_value": t1,
                 "crashes_elsewhere": c2, "hosts_elsewhere": x2, "node_days_elsewhere": t2,
                 "share": r.share,
                 "first_seen": to_timestamp(r.first_seen).isoformat(),
                 "reached": to_timestamp(r.reached).date().isoformat(), "tests": tests}))
    return out
