"""Per-host statistics: concentration of a group, SIR, diversity, hardware signs.

* :func:`host_concentration` — for each group, every host's observed count vs
  the count expected from the group's fleet rate and the host's exposure,
  with the one-sided exact Poisson p-value ``poisson.sf(k - 1, mu)``;
* :func:`sir` and :func:`expected_by_host` — the standardized incidence ratio
  (observed / expected over all groups; indirect standardization, Breslow &
  Day 1987 vol. II §2.3) with its exact CI;
* :func:`expected_distinct` — distinct signatures expected among n crashes
  drawn from the fleet's signature mix (a bad CPU crashes in many unrelated
  places; a software bug repeats one place);
* :func:`host_table` — all of the above per host, plus hardware-indicative
  phenotypes and signatures seen on no other host;
* :func:`telemetry_before_crashes` — hardware/kernel events in the N days
  before each host's crashes.

Everything is groupby/merge over whole tables; nothing loops over crashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import numpy.typing as npt
import pandas as pd

from coreepi.epi.rates import poisson_ci, poisson_upper_p

__all__ = [
    "expected_by_host",
    "expected_distinct",
    "host_concentration",
    "host_table",
    "sir",
    "telemetry_before_crashes",
]

FloatArray = npt.NDArray[np.float64]


def sir(
    observed: npt.ArrayLike, expected: npt.ArrayLike, *, alpha: float = 0.05
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Standardized incidence ratio O/E, exact CI and one-sided p-value of excess.

    The CI treats O as Poisson and E as fixed: ``(poisson_ci(O) / E)`` (Breslow
    & Day 1987 vol. II eq. 2.11 ff.). The p-value is ``P(X ≥ O | mean E)``.
    Returns ``(sir, lower, upper, p)``; NaN (p: 1 or 0) where E = 0.
    """
    o = np.asarray(observed, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    lo, hi = poisson_ci(o, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(e > 0, 1.0 / e, np.nan)
    return o * inv, lo * inv, hi * inv, poisson_upper_p(o, e)


def expected_by_host(
    crashes: pd.DataFrame, exposure: pd.DataFrame, by: Sequence[str] = ()
) -> pd.Series:
    """Expected crash count per host by indirect standardization over strata ``by``.

    ``E_h = Σ_s r_s · T_hs`` where ``r_s`` is the fleet rate in stratum s
    (crashes / node-days) and ``T_hs`` the host's node-days in it (Breslow &
    Day 1987 vol. II §2.3). With no strata this is the fleet rate times the
    host's node-days. Crashes with an unknown stratum value are left out of the
    stratum rates. ``crashes``: the crashes that count (inside exposure);
    ``exposure``: ``host_id``, ``node_days`` and the ``by`` columns. Indexed by
    ``host_id``; 0 where the stratum has no exposure.
    """
    keys = list(by)
    if not keys:
        total_t = float(exposure["node_days"].sum())
        rate = len(crashes) / total_t if total_t > 0 else 0.0
        return exposure.groupby("host_id", sort=False)["node_days"].sum() * rate
    t_s = exposure.groupby(keys, observed=True)["node_days"].sum()
    n_s = crashes.groupby(keys, observed=True).size()
    r_s = (n_s.reindex(t_s.index, fill_value=0) / t_s).rename("_rate")
    rows = exposure[["host_id", "node_days", *keys]].join(r_s, on=keys)
    contrib = rows["node_days"] * rows["_rate"].astype(np.float64).fillna(0.0)
    return contrib.groupby(rows["host_id"], sort=False).sum()


def host_concentration(
    memberships: pd.DataFrame,
    host_node_days: pd.Series,
    total_node_days: float,
    min_node_days: float = 0.0,
) -> pd.DataFrame:
    """Observed vs expected count of each group on each host with a crash in it.

    ``memberships`` has one row per (crash, group): columns ``gid`` (int group
    id) and ``host_id``. The group's fleet rate is its count over
    ``total_node_days``; a host's expected count is that rate times its
    node-days (``host_node_days``, indexed by host_id; a host without exposure
    has expected 0 and p-value NaN: no denominator, no test; so has a host with
    fewer than ``min_node_days``). Only crashes inside exposure belong in
    ``memberships`` (the exposure rule of :func:`host_table`).

    Returns one row per (gid, host_id): ``crashes``, ``expected``, ``p_value``
    (one-sided exact Poisson, ``poisson.sf(k - 1, expected)``), ``share`` (of
    the group), sorted by gid then crashes descending.
    """
    # pairs counted on integer codes, in first-seen order (groupby's sort=False order,
    # which the final sort keeps among ties)
    host, hosts = pd.factorize(memberships["host_id"])
    n_hosts = max(len(hosts), 1)
    pair, pairs = pd.factorize(memberships["gid"].to_numpy(np.int64) * n_hosts + host)
    pairs = np.asarray(pairs, dtype=np.int64)
    counts = pd.DataFrame({
        "gid": pairs // n_hosts,
        "host_id": hosts.take(pairs % n_hosts),
        "crashes": np.bincount(pair, minlength=len(pairs)),
    })  # fmt: skip
    totals = counts.groupby("gid", sort=False)["crashes"].transform("sum")
    t_host = host_node_days.reindex(hosts).to_numpy(np.float64)
    t_h = pd.Series(t_host[pairs % n_hosts] if len(hosts) else np.empty(0))
    rate = totals / total_node_days if total_node_days > 0 else totals * np.nan
    counts["expected"] = (rate * t_h.fillna(0.0)).to_numpy()
    p = poisson_upper_p(counts["crashes"].to_numpy(), counts["expected"].to_numpy())
    t = t_h.fillna(0.0).to_numpy()
    counts["p_value"] = np.where((t > 0) & (t >= min_node_days), p, np.nan)
    counts["share"] = counts["crashes"] / totals
    return counts.sort_values(["gid", "crashes", "p_value"], ascending=[True, False, True])


def expected_distinct(n: npt.ArrayLike, proportions: npt.ArrayLike) -> FloatArray:
    """Expected number of distinct categories among n draws from a multinomial mix.

    ``E(n) = Σ_g 1 - (1 - p_g)^n`` (each category appears at least once with
    probability 1 - (1-p_g)^n). Computed once per distinct n, in blocks, so a
    100k-host fleet with 100k signatures costs (distinct n) × (signatures).
    """
    n_arr = np.asarray(n, dtype=np.float64)
    p = np.asarray(proportions, dtype=np.float64)
    p = p[p > 0]
    with np.errstate(divide="ignore"):
        log_q = np.log1p(-np.minimum(p, 1.0))  # log(1 - p_g); -inf where p_g = 1
    uniq, inverse = np.unique(n_arr.ravel(), return_inverse=True)
    result = np.empty(uniq.shape, dtype=np.float64)
    block = max(1, 2_000_000 // max(1, p.size))
    for i in range(0, uniq.size, block):
        chunk = uniq[i : i + block]
        with np.errstate(invalid="ignore"):
            powers = np.exp(np.outer(chunk, log_q))  # (1 - p_g)^n
        powers = np.where(np.isnan(powers), 1.0, powers)  # 0 · -inf: n = 0 draws nothing
        result[i : i + block] = (1.0 - powers).sum(axis=1)
    return result[inverse].reshape(n_arr.shape)


def host_table(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    *,
    standardize_by: Sequence[str] = (),
    alpha: float = 0.05,
    min_node_days: float = 0.0,
) -> pd.DataFrame:
    """One row per host with a crash or with exposure.

    ``exposure``: ``host_id``, ``node_days`` and the ``standardize_by`` columns.
    Exposure rule: the SIR compares a host's crashes *inside* its exposure
    (``crashes["in_exposure"]``, when present) with the expectation from its
    node-days, so a crash outside every interval (before a node's first
    heartbeat) never divides by ~0; a host with fewer than ``min_node_days``
    node-days gets no SIR at all (NaN: too little exposure for a test).

    Columns: ``crashes`` (all), ``sir_observed`` (inside exposure),
    ``crashes_outside_exposure``, ``node_days``, ``expected`` (indirectly
    standardized over ``standardize_by``), ``sir``, ``sir_lower``, ``sir_upper``,
    ``p_value`` (one-sided, excess), ``exposure_sufficient``, ``distinct_signatures``,
    ``expected_distinct_signatures`` (from the fleet signature mix),
    ``private_signatures`` (signatures seen on this host only),
    ``hardware_phenotype_crashes`` (crashes with ≥ 1 hardware-indicative
    phenotype). Indexed by ``host_id``.
    """
    node_days = exposure.groupby("host_id", sort=False)["node_days"].sum()
    inside = (crashes["in_exposure"].to_numpy(bool) if "in_exposure" in crashes.columns
              else np.ones(len(crashes), dtype=bool))
    expected = expected_by_host(crashes.loc[inside, list(standardize_by)], exposure,
                                standardize_by)
    # counted on integer codes: a million crashes grouped by text a dozen times
    # was most of this function's cost
    host, hosts = pd.factorize(crashes["host_id"])
    n_hosts = len(hosts)
    observed = pd.Series(np.bincount(host, minlength=n_hosts), index=hosts)
    index = node_days.index.union(observed.index)
    out = pd.DataFrame(index=index)
    out.index.name = "host_id"

    def per_host(counts: npt.ArrayLike, fill: float = 0) -> pd.Series:
        return pd.Series(counts, index=hosts).reindex(index, fill_value=fill)

    out["crashes"] = observed.reindex(index, fill_value=0).astype(np.int64)
    out["sir_observed"] = per_host(np.bincount(host[inside], minlength=n_hosts)).astype(np.int64)
    out["crashes_outside_exposure"] = out["crashes"] - out["sir_observed"]
    out["node_days"] = node_days.reindex(index, fill_value=0.0)
    out["expected"] = expected.reindex(index, fill_value=0.0)
    out["exposure_sufficient"] = (out["node_days"] >= min_node_days) & (out["node_days"] > 0)
    s, lo, hi, p = sir(out["sir_observed"].to_numpy(), out["expected"].to_numpy(), alpha=alpha)
    ok = out["exposure_sufficient"].to_numpy()
    out["sir"], out["sir_lower"], out["sir_upper"] = (np.where(ok, x, np.nan) for x in (s, lo, hi))
    out["p_value"] = np.where(ok, p, np.nan)
    for name, values in _signature_diversity(crashes["signature"], host, n_hosts).items():
        out[name] = per_host(values)
    out["expected_distinct_signatures"] = out["expected_distinct_signatures"].astype(np.float64)

    n_hw = (crashes["_n_hw"] if "_n_hw" in crashes.columns  # counted once, by the pipeline
            else _list_lengths(crashes["hardware_phenotypes"]))
    has_hw = n_hw.to_numpy() > 0
    out["hardware_phenotype_crashes"] = per_host(
        np.bincount(host[has_hw], minlength=n_hosts)).astype(np.int64)
    return out


def _signature_diversity(
    signature: pd.Series, host: np.ndarray, n_hosts: int
) -> dict[str, np.ndarray]:
    """Per host code (``host``: each crash's, 0..n_hosts-1): ``distinct_signatures``,
    ``expected_distinct_signatures`` (:func:`expected_distinct` over the fleet's
    signature mix) and ``private_signatures`` (signatures no other host has);
    crashes without a signature are left out."""
    sig, sigs = pd.factorize(signature)
    signed = sig >= 0
    s_host, s_sig = host[signed], sig[signed]
    width = max(len(sigs), 1)  # a (host, signature) pair as one integer
    pairs = pd.unique(s_host.astype(np.int64) * width + s_sig)
    pair_host, pair_sig = pairs // width, pairs % width
    n_signed = np.bincount(s_host, minlength=n_hosts)
    # the mix in value_counts' order (count descending), as the sum's order fixes its last bits
    mix = (pd.Series(np.bincount(s_sig, minlength=len(sigs)), index=sigs)
           .sort_values(ascending=False).to_numpy() / max(int(signed.sum()), 1))
    private = np.bincount(pair_sig, minlength=len(sigs)) == 1
    return {
        "distinct_signatures": np.bincount(pair_host, minlength=n_hosts).astype(np.int64),
        "expected_distinct_signatures": expected_distinct(n_signed, mix),
        "private_signatures": np.bincount(pair_host[private[pair_sig]],
                                          minlength=n_hosts).astype(np.int64),
    }


def _list_lengths(series: pd.Series) -> pd.Series:
    """Number of non-null items in each list cell (None/NaN/empty: 0).

    The store's cells are all lists without a None: their ``len`` is the
    count, taken by C-level ``map`` (a million cells in tens of ms); any other
    cell (None, NaN, an array, a None item) takes the general path, explode."""
    cells = series.to_numpy(dtype=object)
    if set(map(type, cells)) <= {list} and None not in chain.from_iterable(cells):
        lengths = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))
        return pd.Series(lengths, index=series.index)
    flat = series.reset_index(drop=True).explode()
    counted = flat.notna().groupby(level=0).sum()
    return pd.Series(counted.to_numpy(), index=series.index)


def phenotype_counts(crashes: pd.DataFrame, column: str, hosts: Sequence[str]) -> pd.DataFrame:
    """Per (host, phenotype) crash counts for ``hosts`` from the list column ``column``."""
    sub = crashes.loc[crashes["host_id"].isin(list(hosts)), ["host_id", column]]
    exploded = sub.explode(column).dropna(subset=[column])
    return (
        exploded.groupby(["host_id", column], sort=False)
        .size()
        .rename("crashes")
        .reset_index()
        .rename(columns={column: "phenotype"})
    )


def telemetry_before_crashes(
    crashes: pd.DataFrame, telemetry: pd.DataFrame, days: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Telemetry events within ``days`` before a crash of the same host.

    Returns ``(events, per_host)``. ``events`` holds each event that precedes
    some crash of its host by at most ``days`` (columns of ``telemetry`` plus
    ``next_crash_at``). ``per_host`` is indexed by host_id with ``events``,
    ``hardware_events`` (hardware-indicative ones) and
    ``crashes_after_hardware_event`` (crashes with a hardware-indicative event
    in the ``days`` before them).
    """
    tol = pd.Timedelta(days=days)
    tel = telemetry.loc[telemetry["ts"].notna()].copy()
    tel["host_id"] = tel["host_id"].astype(object)
    # an event only meets crashes of its own host: the crashes of hosts with
    # telemetry give the same matches (the others count 0 either way)
    cr = crashes.loc[crashes["host_id"].isin(tel["host_id"].unique()), ["host_id", "captured_at"]]
    cr["host_id"] = cr["host_id"].astype(object)
    cr = cr.sort_values("captured_at")
    tel = tel.sort_values("ts")
    cr_r = cr.rename(columns={"captured_at": "next_crash_at"})
    fwd = pd.merge_asof(
        tel,
        cr_r.assign(_t=cr_r["next_crash_at"]),
        left_on="ts",
        right_on="_t",
        by="host_id",
        direction="forward",
        tolerance=tol,
    ).drop(columns=["_t"])
    events = fwd.loc[fwd["next_crash_at"].notna()].reset_index(drop=True)
    hw_ind = events["hardware_indicative"].astype(bool)
    per_host = pd.DataFrame(
        {
            "events": events.groupby("host_id", sort=False).size(),
            "hardware_events": hw_ind.groupby(events["host_id"], sort=False).sum(),
        }
    )
    hw_tel = tel.loc[tel["hardware_indicative"].astype(bool), ["host_id", "ts"]]
    back = pd.merge_asof(
        cr,
        hw_tel.assign(_ev=hw_tel["ts"]),
        left_on="captured_at",
        right_on="ts",
        by="host_id",
        direction="backward",
        tolerance=tol,
    )
    after = back["_ev"].notna().groupby(back["host_id"], sort=False).sum()
    per_host = per_host.join(after.rename("crashes_after_hardware_event"), how="outer")
    per_host = per_host.fillna(0).astype(np.int64)
    per_host.index.name = "host_id"
    return events, per_host
