"""Group detectors: a new group, and a known one rising against its baseline.

Groups are signature groups (column ``signature``) or phenotype groups
(column ``phenotype`` of :func:`phenotype_crashes`: one row per crash and
phenotype, so a crash with two phenotypes is in both groups, as in the
findings' phenotype family). Inputs are the analytics' frames: crashes
(``host_id``, ``captured_at`` UTC, the group column) and exposure
(``host_id``, ``start``, ``end``); times
are cut at ``now`` (nothing after it is read, so a replay sees what a live
evaluation would have seen). Windows: the monitoring window is
``[now - window_days, now]``; the baseline the ``baseline_days`` before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np
import pandas as pd

from coreepi.epi.surveillance.clock import FleetClock, days
from coreepi.epi.surveillance.cusum import poisson_cusum, quasi_dispersion
from coreepi.epi.surveillance.models import Detection, DetectorParams, ratio_evidence

__all__ = ["GroupBy", "baseline_days_covered", "new_groups", "phenotype_crashes", "rising_groups",
           "windows"]

GroupBy = Literal["signature", "phenotype"]


def windows(now: pd.Timestamp, params: DetectorParams) -> tuple[float, float, float]:
    """``(baseline_start, window_start, now)`` in days (:func:`~.clock.days`)."""
    t_now = float(days(now)[0])
    ws = t_now - params.window_days
    return ws - params.baseline_days, ws, t_now


def baseline_days_covered(
    crashes: pd.DataFrame, exposure: pd.DataFrame, now: pd.Timestamp, params: DetectorParams,
    *, older_data: bool = False,
) -> float:
    """Days of the baseline ``[window_start - baseline_days, window_start]`` the
    frames cover, from the earliest node-time (or, without exposure, crash) in
    them; ``baseline_days`` when ``older_data`` (the store holds crashes from
    before the frames). A group is "new" only against a baseline the store has:
    on a store younger than it, every background group would be new."""
    bs, ws, _ = windows(now, params)
    if older_data:
        return params.baseline_days
    if not exposure.empty:
        first = float(days(exposure["start"]).min())
    elif not crashes.empty:
        first = float(days(crashes["captured_at"]).min())
    else:
        return 0.0
    return float(min(params.baseline_days, max(0.0, ws - max(first, bs))))


def phenotype_crashes(crashes: pd.DataFrame) -> pd.DataFrame:
    """One row per crash and phenotype: ``host_id``, ``captured_at``,
    ``phenotype`` (from the crash frame's ``phenotypes`` lists; a crash
    without one has no row). Empty (those columns) when the frame has no
    ``phenotypes`` column."""
    if "phenotypes" not in crashes.columns or crashes.empty:
        return pd.DataFrame({"host_id": pd.Series(dtype=object),
                             "captured_at": pd.Series(dtype="datetime64[ns, UTC]"),
                             "phenotype": pd.Series(dtype=object)})
    ex = crashes[["host_id", "captured_at", "phenotypes"]].explode("phenotypes")
    ex = ex[ex["phenotypes"].notna()].rename(columns={"phenotypes": "phenotype"})
    return ex.reset_index(drop=True)


def new_groups(
    crashes: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams,
    known: Iterable[str] = (),
    by: GroupBy = "signature",
) -> list[Detection]:
    """Groups (column ``by``) first seen in the monitoring window that
    reached ``new_min_crashes`` crashes on ``new_min_hosts`` hosts by ``now``.

    A group is known when ``crashes`` has it before the window or it is
    in ``known`` (the store's signatures older than the frames read).
    ``at`` is the crash that met both thresholds; the subject is
    ``{by: group}``. Evidence: ``crashes``, ``hosts`` (by now),
    ``first_seen`` (ISO).
    """
    _, ws, t_now = windows(now, params)
    t = days(crashes["captured_at"])
    before = set(crashes[by][t < ws].dropna().unique()) | set(known)
    recent = crashes.loc[(t >= ws) & (t <= t_now), [by, "host_id", "captured_at"]]
    recent = recent[recent[by].notna() & ~recent[by].isin(before)]
    out: list[Detection] = []
    for sig, g in recent.sort_values("captured_at").groupby(by, sort=True):
        n_hosts = (~g["host_id"].duplicated()).cumsum().to_numpy()
        n = np.arange(1, len(g) + 1)
        met = np.flatnonzero((n >= params.new_min_crashes) & (n_hosts >= params.new_min_hosts))
        if len(met):
            out.append(Detection(
                "new-group", {by: str(sig)}, g["captured_at"].iloc[met[0]],
                {"crashes": len(g), "hosts": int(n_hosts[-1]),
                 "first_seen": g["captured_at"].iloc[0].isoformat()}))
    return out


def rising_groups(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams,
    by: GroupBy = "signature",
) -> list[Detection]:
    """Groups (column ``by``) whose rate in the monitoring window rose against their baseline.

    Per group with at least ``rising_min_baseline`` baseline crashes:
    ``λ0`` = baseline crashes / fleet node-days of the baseline, the
    dispersion ``φ`` of its daily counts (:func:`~.cusum.quasi_dispersion`),
    then the Poisson CUSUM (:func:`~.cusum.poisson_cusum`, shift
    ``rising_ratio``, threshold ``rising_threshold``) over the window's
    crashes on the fleet's node-time clock. One detection per group, at its
    first alarm; the subject is ``{by: group}``. Evidence: baseline crashes / node-days, window crashes /
    node-days (up to the alarm), their ratio (with ``ratio_status``: unbounded
    when the run had no node-time; :func:`~.models.ratio_evidence`), ``dispersion``,
    ``statistic``.
    """
    bs, ws, t_now = windows(now, params)
    clock = FleetClock.from_exposure(exposure)
    t = days(crashes["captured_at"])
    keep = (t >= bs) & (t <= t_now) & crashes[by].notna().to_numpy()
    # row positions, not timestamps: a tz-aware column to numpy costs seconds per 1M rows
    frame = pd.DataFrame({"group": crashes[by].to_numpy()[keep], "t": t[keep],
                          "row": np.flatnonzero(keep)})
    at = crashes["captured_at"]
    n_days = int(np.ceil(params.baseline_days))
    edges = bs + np.arange(n_days + 1) * (params.baseline_days / n_days)
    daily_e = np.diff(clock.at(edges))
    base_e = float(daily_e.sum())
    e_ws = float(clock.at([ws])[0])
    out: list[Detection] = []
    if base_e <= 0:
        return out
    for sig, g in frame.groupby("group", sort=True):
        g = g.sort_values("t")
        times = g["t"].to_numpy()
        base = times[times < ws]
        win = times[times >= ws]
        win_rows = g["row"].to_numpy()[times >= ws]
        if len(base) < params.rising_min_baseline or not len(win):
            continue
        rate0 = len(base) / base_e
        counts = np.bincount(np.minimum(((base - bs) / (params.baseline_days / n_days)).astype(int),
                                        n_days - 1), minlength=n_days)
        phi = quasi_dispersion(counts, rate0 * daily_e)
        e_at = clock.at(win)
        run = poisson_cusum(e_at, rate0, params.rising_ratio, params.rising_threshold,
                            dispersion=phi, exposure_start=e_ws)
        if not len(run.alarms):
            continue
        i, j = int(run.alarms[0]), int(run.run_starts[0])
        # the run that alarmed: from its first crash to the alarm (the shift's estimate)
        run_e = float(e_at[i] - (e_at[j - 1] if j > 0 else e_ws))
        out.append(Detection(
            "rising", {by: str(sig)}, at.iloc[win_rows[i]],
            {"baseline_crashes": len(base), "baseline_node_days": base_e,
             "run_crashes": i - j + 1, "run_node_days": run_e,
             "run_start": at.iloc[win_rows[j]].isoformat(),
             **ratio_evidence(((i - j + 1) / run_e) / rate0 if run_e > 0 else float("inf")),
             "dispersion": float(phi), "statistic": float(run.statistic[i])}))
    return out
