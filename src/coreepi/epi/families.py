"""Testing families: which tests share a false-discovery-rate correction.

The association tests of a window are not one exchangeable family:

* **signature groups** are the primary family; **phenotype groups** are built
  from the same crashes (a crash is in one signature group and in several
  phenotype groups), so they form a family of their own;
* the levels of one attribute, each tested "value vs the rest", are dependent
  tests (the same crashes and node-days on both sides of every one of them).

So each family (one per group kind) is tested hierarchically, as in
Benjamini & Bogomolov (2014): every (group, attribute) pair is a sub-family
whose own p-value is the Bonferroni-combined p of its level tests
(``min(1, L · min p)``, valid whatever their dependence); Benjamini–Hochberg
over those p-values selects the (group, attribute) pairs at level q; within a
selected pair, its levels are tested by BH at level ``q · R / M`` (R selected
of M pairs). The level q-value reported is the BH-adjusted p within the pair
scaled by ``M / R`` — it is ≤ q exactly when the procedure rejects the level
— and, for a pair that was not selected, no smaller than the pair's own
q-value (so it never reads as significant).

*Benjamini, Y. & Bogomolov, M. (2014). Selective inference on multiple
families of hypotheses. JRSS B 76:297–318.* *Benjamini, Y. & Hochberg, Y.
(1995). JRSS B 57:289–300.*
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["grouped_bh", "hierarchical_qvalues"]

FloatArray = npt.NDArray[np.float64]


def grouped_bh(p: npt.ArrayLike, family: npt.ArrayLike) -> FloatArray:
    """Benjamini–Hochberg adjusted p-values computed separately within each ``family``.

    ``p``: p-values (NaN: no test, stays NaN, not counted); ``family``: one
    hashable label per p-value. Vectorized: ``q_(i) = min_{j ≥ i} p_(j) · m / j``
    within each family (Benjamini & Hochberg 1995).
    """
    pv = np.asarray(p, dtype=np.float64)
    fam = pd.factorize(pd.Series(np.asarray(family, dtype=object)))[0]
    out = np.full(pv.shape, np.nan)
    ok = np.isfinite(pv)
    if not ok.any():
        return out
    frame = pd.DataFrame({"p": pv[ok], "f": fam[ok], "i": np.flatnonzero(ok)})
    frame = frame.sort_values(["f", "p"], kind="stable")
    rank = frame.groupby("f", sort=False).cumcount().to_numpy() + 1
    m = frame.groupby("f", sort=False)["p"].transform("size").to_numpy()
    frame["raw"] = frame["p"].to_numpy() * m / rank
    # running minimum from the largest p down, within each family
    rev = frame.iloc[::-1]
    q = rev.groupby("f", sort=False)["raw"].cummin().iloc[::-1]
    out[frame["i"].to_numpy()] = np.minimum(q.to_numpy(), 1.0)
    return out


def hierarchical_qvalues(
    p: npt.ArrayLike, kind: npt.ArrayLike, pair: npt.ArrayLike, q_level: float
) -> tuple[FloatArray, FloatArray]:
    """Level q-values and pair q-values of the Benjamini–Bogomolov procedure.

    ``p``: the level tests' p-values (NaN: not a test — e.g. the mirror of a
    two-valued attribute); ``kind``: the family (group kind) of each test;
    ``pair``: the (group, attribute) label of each test; ``q_level``: the FDR
    level the selection is made at. Returns ``(q, pair_q)``, both aligned with
    ``p``: ``pair_q`` is the BH q-value of the test's (group, attribute) pair
    within its family, ``q`` the level's q-value as described in the module
    docstring (NaN where ``p`` is NaN).
    """
    pv = np.asarray(p, dtype=np.float64)
    kinds = np.asarray(kind, dtype=object)
    pairs = pd.Series(np.asarray(pair, dtype=object))
    frame = pd.DataFrame({"p": pv, "pair": pairs, "kind": kinds})
    tests = frame.loc[np.isfinite(pv)]
    by_pair = tests.groupby("pair", sort=False).agg(p_min=("p", "min"), n=("p", "size"),
                                                    kind=("kind", "first"))
    by_pair["p_pair"] = np.minimum(1.0, by_pair["p_min"] * by_pair["n"])
    by_pair["q_pair"] = grouped_bh(by_pair["p_pair"].to_numpy(), by_pair["kind"].to_numpy())
    selected = by_pair["q_pair"] <= q_level
    m = by_pair.groupby("kind", sort=False)["q_pair"].transform("size")
    r = selected.groupby(by_pair["kind"], sort=False).transform("sum")
    by_pair["scale"] = m / r.clip(lower=1)
    within = grouped_bh(pv, frame["pair"].to_numpy())
    scale = frame["pair"].map(by_pair["scale"]).to_numpy(np.float64)
    pair_q = frame["pair"].map(by_pair["q_pair"]).to_numpy(np.float64)
    chosen = frame["pair"].map(selected).fillna(False).to_numpy(bool)
    q = np.minimum(1.0, within * scale)
    q = np.where(chosen, q, np.maximum(q, pair_q))
    return np.where(np.isfinite(pv), q, np.nan), pair_q
