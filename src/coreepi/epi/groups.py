"""Groups (by signature, by phenotype) and their crude attribute associations.

* :func:`memberships` — one row per (crash, group) for the largest groups;
* :func:`group_table` — count, hosts, rate with exact CI, hardware phenotypes;
* :func:`association_table` — for every group × attribute value, the rate
  ratio vs the rest of the fleet (conditional binomial, exact), over one
  vectorized call per attribute, then hierarchical q-values (pairs, then
  levels; untestable pairs screened out by their smallest achievable p-value).

"The rest of the fleet" for a value v of attribute A is every other *known*
value of A: crashes with an unknown A (an interval without A) and node-days
with an unknown A are left out of both sides. A crash outside exposure is left
out even when its sidecar names A: no node-time of it is in the denominator.
For a two-valued attribute the two tests are one test seen from both sides;
it counts once in the FDR correction and both rows share its q-value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from coreepi.epi.exposure import AttributeInfo
from coreepi.epi.families import hierarchical_qvalues
from coreepi.epi.lists import explode_lists
from coreepi.epi.rates import binomial_two_sided_p, incidence_rate, rate_ratio

__all__ = ["association_table", "group_table", "memberships", "value_host_counts"]

SIGNATURE = "signature"
PHENOTYPE = "phenotype"


def memberships(crashes: pd.DataFrame, max_groups: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Crash-to-group rows for the ``max_groups`` largest signature and phenotype groups.

    ``crashes`` must have a unique RangeIndex. Returns ``(groups, members)``:
    ``groups`` has one row per group (``gid`` 0..G-1, ``kind``, ``key``,
    ``crashes``), signature groups first, each kind by decreasing size then
    key; ``members`` has ``gid`` and ``row`` (the crash's index) per membership.
    """
    # counted on integer codes; the phenotype lists exploded once per distinct list
    sig_code, sig_keys = pd.factorize(crashes["signature"])
    sig_top = _top(_counts(sig_code, sig_keys), max_groups)
    phen_pos, phen_items = explode_lists(crashes["phenotypes"])
    phen_code, phen_keys = pd.factorize(phen_items)
    phen_top = _top(_counts(phen_code, phen_keys), max_groups)
    groups = pd.DataFrame(
        {
            "kind": [SIGNATURE] * len(sig_top) + [PHENOTYPE] * len(phen_top),
            "key": [str(k) for k in sig_top.index] + [str(k) for k in phen_top.index],
            "crashes": np.concatenate([sig_top.to_numpy(), phen_top.to_numpy()]).astype(np.int64),
        }
    )
    groups.index.name = "gid"
    sig_gid = _gid_of_code(sig_keys, sig_top.index, 0)[sig_code]
    phen_gid = _gid_of_code(phen_keys, phen_top.index, len(sig_top))[phen_code]
    sig_rows = np.flatnonzero(sig_gid >= 0)
    in_phen = phen_gid >= 0
    members = pd.DataFrame({
        "gid": np.concatenate([sig_gid[sig_rows], phen_gid[in_phen]]).astype(np.int64),
        "row": np.concatenate([sig_rows, phen_pos[in_phen]]).astype(np.int64),
    })  # fmt: skip
    # a phenotype named twice in one crash's list is one membership (as
    # drop_duplicates, on one integer key: a tenth of its cost)
    key = members["row"].to_numpy() * (len(groups) + 1) + members["gid"].to_numpy()
    dup = pd.Series(key).duplicated().to_numpy()
    return groups, members.loc[~dup] if dup.any() else members


def _counts(code: np.ndarray, keys: pd.Index | np.ndarray) -> pd.Series:
    """How many times each key occurs (``code``: factorize codes, -1 for missing)."""
    return pd.Series(np.bincount(code[code >= 0], minlength=len(keys)), index=keys)


def _gid_of_code(keys: pd.Index | np.ndarray, top: pd.Index, first_gid: int) -> np.ndarray:
    """Group id per key code (``first_gid`` + rank in ``top``), -1 for keys not in
    ``top``; one extra -1 at the end, so a missing code (-1) maps to no group."""
    gid = np.full(len(keys) + 1, -1, dtype=np.int64)
    gid[pd.Index(keys).get_indexer(top)] = np.arange(len(top)) + first_gid
    return gid


def _top(counts: pd.Series, n: int) -> pd.Series:
    """The n largest counts, ties broken by key, deterministically."""
    frame = pd.DataFrame(
        {"key": counts.index.astype(str), "n": counts.to_numpy()}, index=counts.index
    )
    frame = frame.sort_values(["n", "key"], ascending=[False, True]).head(n)
    return frame["n"]


def group_table(
    groups: pd.DataFrame,
    members: pd.DataFrame,
    crashes: pd.DataFrame,
    total_node_days: float,
    *,
    per: float,
    alpha: float,
) -> pd.DataFrame:
    """Add ``hosts``, ``crashes_in_exposure``, ``rate``/``rate_lower``/``rate_upper``,
    ``hardware_phenotype_crashes``, ``first_seen`` and ``last_seen`` to ``groups``.

    ``crashes`` needs ``in_exposure``, ``host_id``, ``captured_at``, ``_n_hw``. The rate
    is the group's crashes *inside* exposure over ``total_node_days`` (per ``per``
    node-days, exact Garwood CI at ``1 - alpha``): a crash in no exposure interval of its
    host has no node-time in the denominator, so it stays out of the numerator too (it
    still counts in ``crashes``).
    """
    out = groups.copy()
    host = crashes["host_id"].to_numpy()[members["row"].to_numpy()]
    inside = crashes["in_exposure"].to_numpy(bool)[members["row"].to_numpy()]
    # keep the tz-aware dtype: .to_numpy() of it would build one Timestamp object per row
    at = crashes["captured_at"].iloc[members["row"].to_numpy()].reset_index(drop=True)
    has_hw = crashes["_n_hw"].to_numpy()[members["row"].to_numpy()] > 0
    frame = pd.DataFrame(
        {"gid": members["gid"].to_numpy(), "host_id": host, "hw": has_hw, "at": at,
         "inside": inside}
    )
    by = frame.groupby("gid", sort=True)
    out["hosts"] = by["host_id"].nunique().reindex(out.index, fill_value=0).astype(np.int64)
    out["hardware_phenotype_crashes"] = (
        by["hw"].sum().reindex(out.index, fill_value=0).astype(np.int64)
    )
    out["crashes_in_exposure"] = (
        by["inside"].sum().reindex(out.index, fill_value=0).astype(np.int64)
    )
    out["first_seen"] = by["at"].min().reindex(out.index)
    out["last_seen"] = by["at"].max().reindex(out.index)
    rate, lo, hi = incidence_rate(
        out["crashes_in_exposure"].to_numpy(), np.full(len(out), total_node_days), per=per,
        alpha=alpha,
    )
    out["rate"], out["rate_lower"], out["rate_upper"] = rate, lo, hi
    return out


def association_table(
    members: pd.DataFrame,
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    attributes: Sequence[AttributeInfo],
    kinds: Sequence[str],
    *,
    alpha: float,
    per: float,
    fdr_q: float = 0.05,
    value_hosts: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    min_value_hosts: int = 2,
) -> pd.DataFrame:
    """Crude rate ratio of every (group, attribute value) vs the rest, with q-values.

    ``kinds``: the kind of each group (by gid), which is its testing family.
    q-values are hierarchical (:func:`coreepi.epi.families.hierarchical_qvalues`:
    signature and phenotype groups are separate families; within a family,
    (group, attribute) pairs first, then the attribute's levels, at ``fdr_q``).

    One row per (gid, attribute, value) where the value has exposure and the
    group has at least one crash with a known value of the attribute. Columns:
    ``gid``, ``attribute``, ``value``, ``crashes``, ``node_days``, ``rate``,
    ``rest_crashes``, ``rest_node_days``, ``share_of_group``, ``expected``,
    ``irr``, ``irr_lower``, ``irr_upper``, ``p_value``, ``q_value``, ``q_family``,
    ``attribute_q_value``, ``value_hosts`` and ``rest_value_hosts``.

    The host is the unit of replication: ``value_hosts`` gives, per attribute, the
    hosts with exposure at each level and the hosts with exposure at another level
    (:func:`value_host_counts`); a value or rest held by fewer than
    ``min_value_hosts`` hosts is not tested (its p-value, ratio bounds and q are NaN:
    one host's node-days are not independent units, and the value cannot be told
    from the host). Without ``value_hosts`` every row is tested and the host counts
    are NaN.
    """
    n_groups = len(kinds)
    rows = members["row"].to_numpy()
    gids = members["gid"].to_numpy()
    inside = crashes["in_exposure"].to_numpy(bool)[rows]
    blocks: list[pd.DataFrame] = []
    for info in attributes:
        a = info.name
        levels = list(exposure[a].cat.categories)
        n_levels = len(levels)
        t = (
            exposure["node_days"]
            .groupby(exposure[a].cat.codes.to_numpy())
            .sum()
            .reindex(range(n_levels), fill_value=0.0)
            .to_numpy()
        )
        codes = crashes[a].cat.codes.to_numpy()[rows]
        known = (codes >= 0) & inside
        flat = gids[known] * n_levels + codes[known]
        x = np.bincount(flat, minlength=n_groups * n_levels).reshape(n_groups, n_levels)
        known_g = x.sum(axis=1)
        t_known = t.sum()
        x1 = x.astype(np.float64)
        x2 = known_g[:, None] - x1
        t1 = np.broadcast_to(t, x1.shape)
        t2 = t_known - t1
        test = (known_g[:, None] > 0) & (t1 > 0) & (t2 > 0)
        g_idx, l_idx = np.nonzero(test)
        rr = rate_ratio(x1[test], t1[test], x2[test], t2[test], alpha=alpha)
        hosts_v, hosts_rest = _value_hosts(value_hosts, a, l_idx)
        few = (hosts_v < min_value_hosts) | (hosts_rest < min_value_hosts)  # NaN: False
        rate, _, _ = incidence_rate(x1[test], t1[test], per=per, alpha=alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = x1[test] / known_g[g_idx]
        block = pd.DataFrame(
            {
                "gid": g_idx,
                "attribute": a,
                "attribute_class": info.attribute_class,
                "value": [str(levels[i]) for i in l_idx],
                "crashes": x1[test].astype(np.int64),
                "node_days": t1[test],
                "rate": rate,
                "rest_crashes": x2[test].astype(np.int64),
                "rest_node_days": t2[test],
                "share_of_group": share,
                "expected": rr.expected1,
                "irr": rr.ratio,
                "irr_lower": np.where(few, np.nan, rr.lower),
                "irr_upper": np.where(few, np.nan, rr.upper),
                "p_value": np.where(few, np.nan, rr.p_value),
                "value_hosts": hosts_v,
                "rest_value_hosts": hosts_rest,
                "_p_min": np.where(few, np.nan,
                                   _smallest_p(known_g[g_idx], t1[test], t2[test])),
                # the second value of a two-valued attribute mirrors the first: same test
                "_mirror": (l_idx == 1) & (n_levels == 2),
            }
        )
        blocks.append(block)
    if not blocks:
        return _empty_associations()
    table = pd.concat(blocks, ignore_index=True)
    primary = ~table["_mirror"].to_numpy()
    family = np.asarray(kinds, dtype=object)[table["gid"].to_numpy(np.int64)]
    pair = table["gid"].astype(str) + "\x1f" + table["attribute"].astype(str)
    p = np.where(primary, table["p_value"].to_numpy(np.float64), np.nan)
    q, pair_q = hierarchical_qvalues(p, family, pair.to_numpy(), fdr_q,
                                     p_min=table["_p_min"].to_numpy(np.float64))
    table["q_value"] = q
    table["q_family"] = family
    # mirrors take the q-values of their partner (same gid and attribute, the other value)
    partner = pd.DataFrame({"pair": pair, "q": q, "pq": pair_q}).loc[primary]
    partner = partner.groupby("pair", sort=False)[["q", "pq"]].min()
    table["attribute_q_value"] = pair.map(partner["pq"]).to_numpy(np.float64)
    if (~primary).any():
        table.loc[~primary, "q_value"] = pair[~primary].map(partner["q"]).to_numpy()
    table.attrs["tests"] = int(np.isfinite(table.loc[primary, "p_value"]).sum())
    return table.drop(columns=["_mirror", "_p_min"])


def _value_hosts(
    value_hosts: dict[str, tuple[np.ndarray, np.ndarray]] | None, attribute: str,
    levels: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Hosts with exposure at each of ``levels`` and at another level of ``attribute``
    (float, NaN when unknown)."""
    if value_hosts is None or attribute not in value_hosts:
        nan = np.full(len(levels), np.nan)
        return nan, nan.copy()
    at, rest = value_hosts[attribute]
    return at[levels].astype(np.float64), rest[levels].astype(np.float64)


def value_host_counts(
    host_exposure: pd.DataFrame, attributes: Sequence[AttributeInfo],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per attribute, by level code: the hosts with exposure at the level, and the hosts
    with exposure at some other level. ``host_exposure``: ``host_id``, the attribute
    columns (categorical, as the exposure's), ``node_days`` — each host's exposure per
    attribute set."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    seen = host_exposure.loc[host_exposure["node_days"].to_numpy(np.float64) > 0]
    host, _ = pd.factorize(seen["host_id"])
    for info in attributes:
        a = info.name
        n_levels = len(seen[a].cat.categories)
        code = seen[a].cat.codes.to_numpy()
        known = code >= 0
        pairs = pd.unique(host[known].astype(np.int64) * max(n_levels, 1) + code[known])
        pair_host, pair_level = pairs // max(n_levels, 1), pairs % max(n_levels, 1)
        at = np.bincount(pair_level, minlength=n_levels)
        levels_of_host = np.bincount(pair_host, minlength=int(host.max()) + 1 if len(host) else 0)
        only = levels_of_host[pair_host] == 1  # hosts that had this level alone
        only_at = np.bincount(pair_level[only], minlength=n_levels)
        hosts_known = int((levels_of_host > 0).sum())
        out[a] = (at, hosts_known - only_at)
    return out


def _smallest_p(n: np.ndarray, t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
    """The smallest p-value the conditional rate-ratio test can reach with ``n`` crashes:
    all of them on the value or none (the binomial pmf is unimodal, so one of the two
    ends is the least likely outcome). Fixed by the margins alone (Tarone 1990)."""
    n = n.astype(np.float64)
    pi0 = t1 / (t1 + t2)
    return np.minimum(binomial_two_sided_p(n, n, pi0), binomial_two_sided_p(0.0 * n, n, pi0))


def _empty_associations() -> pd.DataFrame:
    cols = [
        "gid",
        "attribute",
        "attribute_class",
        "value",
        "crashes",
        "node_days",
        "rate",
        "rest_crashes",
        "rest_node_days",
        "share_of_group",
        "expected",
        "irr",
        "irr_lower",
        "irr_upper",
        "p_value",
        "q_value",
        "q_family",
        "attribute_q_value",
        "value_hosts",
        "rest_value_hosts",
    ]
    table = pd.DataFrame({c: [] for c in cols})
    table.attrs["tests"] = 0
    return table
