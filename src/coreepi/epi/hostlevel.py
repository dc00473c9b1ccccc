"""The host as the unit of replication: host-level checks of an association.

A crash-level rate ratio treats every crash as an independent Poisson event.
Crashes are not independent: they cluster on hosts (a job only three hosts
run hits one bug ten times on each). Two host-level checks stand beside each
crash-level association (group g, attribute A = v):

* **hosts affected among hosts exposed** — the 2×2 table of (host, value)
  units with at least ``min_host_node_days`` of exposure: units at v with a
  crash of g, units at v without; the same for the other values of A. Its
  one-sided Fisher exact test (``hypergeom.sf``) asks whether the value
  affects more *hosts*, not only more crashes (Fisher 1935; Agresti 2002,
  *Categorical Data Analysis* §3.5.1). A host that changed value (a
  rollout) is one unit per value it ran.
* **host clustering** — within the hosts at v, the crashes of g expected on
  host h are ``μ_h = x_v · T_hv / T_v`` (the value's crashes spread by
  exposure); a host with ``P(X ≥ k_h | μ_h) < host_concentration_p`` holds
  improbably many (one-sided exact Poisson, the same test and threshold as
  host concentration). When such hosts hold at least ``host_cluster_share``
  of the value's crashes, the association is host-clustered: the crashes
  point at those hosts, not at the value.

Both need each host's exposure by value (the intervals, or the store's
per-host sets). Without it the Fisher test is not made (null) and the
clustering uses each host's total node-days for ``T_hv`` (which can only
make a host look less extreme).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from coreepi.epi.config import EpiConfig
from coreepi.epi.rates import poisson_upper_p

__all__ = ["host_level_associations"]

_HOST_COLUMNS = ("hosts_affected", "hosts_exposed", "rest_hosts_affected", "rest_hosts_exposed",
                 "host_p_value", "clustered_crashes")


def host_level_associations(
    assoc: pd.DataFrame, members: pd.DataFrame, crashes: pd.DataFrame,
    host_exposure: pd.DataFrame | None, host_node_days: pd.Series, config: EpiConfig,
) -> pd.DataFrame:
    """``assoc`` with the host-level columns, filled for the candidate associations.

    Candidates: q ≤ ``fdr_q`` and a crude CI above 1 (the ones a verdict may
    name). ``members``: ``gid``, ``row``; ``crashes``: with ``in_exposure``,
    ``host_id`` and the attribute columns; ``host_exposure``: ``host_id``,
    the attribute columns, ``node_days`` (None: unknown); ``host_node_days``:
    each host's total, indexed by host_id. Adds ``hosts_affected``,
    ``hosts_exposed``, ``rest_hosts_affected``, ``rest_hosts_exposed``,
    ``host_p_value`` (one-sided Fisher), ``clustered_hosts`` (list of host
    ids) and ``clustered_crashes``; NaN / empty elsewhere.
    """
    out = assoc.copy()
    for c in _HOST_COLUMNS:
        out[c] = np.nan
    clustered: dict[int, list[str]] = {}
    if not len(out):
        out["clustered_hosts"] = []
        return out
    cand = (out["q_value"] <= config.fdr_q) & (out["irr_lower"] > 1.0)
    inside = crashes["in_exposure"].to_numpy(bool)
    rows = members["row"].to_numpy()
    keep = inside[rows]
    mem = pd.DataFrame({"gid": members["gid"].to_numpy()[keep], "row": rows[keep]})
    for attr in out.loc[cand, "attribute"].unique():
        idx = out.index[cand & (out["attribute"] == attr)]
        gids = out.loc[idx, "gid"].unique()
        m = mem.loc[mem["gid"].isin(gids)]
        r = m["row"].to_numpy()
        # the member rows taken first: a column converted whole costs a Python object per crash
        k = pd.DataFrame({
            "gid": m["gid"].to_numpy(),
            "host_id": crashes["host_id"].iloc[r].to_numpy(object),
            "level": crashes[attr].iloc[r].astype(object).to_numpy(),
        }).dropna(subset=["level"]).groupby(["gid", "level", "host_id"], sort=False).size()
        k = k.rename("k").reset_index()
        k["level"] = k["level"].astype(str)
        t_hv = _host_value_exposure(host_exposure, attr)
        clustered |= _fill(out, idx, k, t_hv, host_node_days, config)
    out["clustered_hosts"] = [clustered.get(i, []) for i in out.index]
    return out


def _host_value_exposure(host_exposure: pd.DataFrame | None, attr: str) -> pd.Series | None:
    """Node-days per (host_id, level) of ``attr`` (None without per-host exposure)."""
    if host_exposure is None:
        return None
    he = host_exposure[["host_id", attr, "node_days"]].dropna(subset=[attr])
    t = he.groupby([he["host_id"].astype(object), he[attr].astype(str)], sort=False)[
        "node_days"].sum()
    t.index.names = ["host_id", "level"]
    return t


def _fill(
    out: pd.DataFrame, idx: pd.Index, k: pd.DataFrame, t_hv: pd.Series | None,
    host_node_days: pd.Series, config: EpiConfig,
) -> dict[int, list[str]]:
    """Fill the host-level columns of rows ``idx`` (one attribute) in place; returns the
    clustered hosts of each row, most crashes first."""
    clustered: dict[int, list[str]] = {}
    if t_hv is not None:
        exposed = t_hv[t_hv >= config.min_host_node_days]
        exposed_per_level = exposed.groupby(level="level", sort=False).size()
        total_exposed = int(exposed_per_level.sum())
        key = pd.MultiIndex.from_frame(k[["host_id", "level"]])
        k["t"] = t_hv.reindex(key).to_numpy(np.float64)
        k["exposed"] = k["t"].to_numpy() >= config.min_host_node_days
        affected = k.loc[k["exposed"]].groupby(["gid", "level"], sort=False).size()
        affected_all = affected.groupby(level="gid", sort=False).sum()
    else:
        k["t"] = host_node_days.reindex(k["host_id"]).to_numpy(np.float64)
    cells = k.groupby(["gid", "level"], sort=False).indices
    empty = np.empty(0, dtype=np.int64)
    for i in idx:
        gid, value = out.at[i, "gid"], str(out.at[i, "value"])
        kv = k.iloc[cells.get((gid, value), empty)]
        x_v = float(kv["k"].sum())
        if t_hv is not None:
            a = int(affected.get((gid, value), 0))
            e = int(exposed_per_level.get(value, 0))
            ra = int(affected_all.get(gid, 0)) - a
            re = total_exposed - e
            out.loc[i, ["hosts_affected", "hosts_exposed", "rest_hosts_affected",
                        "rest_hosts_exposed"]] = [a, e, ra, re]
            if e > 0 and re > 0:
                out.at[i, "host_p_value"] = float(stats.hypergeom.sf(a - 1, e + re, a + ra, e))
        t_v = float(out.at[i, "node_days"])
        if x_v <= 0 or t_v <= 0:
            continue
        mu = x_v * np.nan_to_num(kv["t"].to_numpy(np.float64)) / t_v
        p = np.where(mu > 0, poisson_upper_p(kv["k"].to_numpy(np.float64), mu), np.nan)
        hot = p < config.host_concentration_p
        order = np.argsort(-kv["k"].to_numpy()[hot], kind="stable")
        clustered[i] = [str(h) for h in kv["host_id"].to_numpy()[hot][order]]
        out.at[i, "clustered_crashes"] = float(kv["k"].to_numpy()[hot].sum())
    return clustered
