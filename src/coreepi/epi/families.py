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

Untestable pairs leave the family first. The tests are discrete: a group
with n crashes of known value has only n + 1 outcomes, so its smallest
achievable p-value p* (all n crashes on the value, or none) is fixed by the
margins the test conditions on (n and the node-days) before the crashes are
placed. A group of two crashes can never reach p = 1e-4, yet in a plain BH
family it still counts in m and makes every other test pay for it. Tarone
(1990) drops such hypotheses from a Bonferroni family: K is the smallest
integer with m(K) ≤ K, where m(K) counts the hypotheses with p* ≤ α/K, and
only those m(K) are tested. Gilbert (2005) applies BH at level α to the same
m(K) hypotheses and shows that the FDR stays controlled. Here the screen runs on
the pairs of each family (a pair's p* is ``min(1, L · min p*)`` of its
levels); the screened-out pairs cannot be rejected and get q = 1, and M of
the second stage is the number of testable pairs. Because p* depends only
on the margins, the screen uses nothing the tests then look at.

*Benjamini, Y. & Bogomolov, M. (2014). Selective inference on multiple
families of hypotheses. JRSS B 76:297–318.* *Benjamini, Y. & Hochberg, Y.
(1995). JRSS B 57:289–300.* *Tarone, R. E. (1990). A modified Bonferroni
method for discrete data. Biometrics 46:515–522.* *Gilbert, P. B. (2005). A
modified false discovery rate multiple-comparisons procedure for discrete
data, applied to human immunodeficiency virus genetics. JRSS C 54:143–158.*
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["grouped_bh", "hierarchical_qvalues", "tarone_testable"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


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


def tarone_testable(p_min: npt.ArrayLike, family: npt.ArrayLike, q_level: float) -> BoolArray:
    """Which hypotheses Tarone's screen keeps, separately within each ``family``.

    ``p_min``: each hypothesis' smallest achievable p-value (NaN: not a test,
    never kept); ``q_level``: the level α of the procedure. Within a family
    of m tests, K is the smallest integer in 1..m with
    ``#{p_min ≤ α/K} ≤ K`` (Tarone 1990; Gilbert 2005's Tarone–BH screen);
    the tests with ``p_min ≤ α/K`` are kept. Example: p* = 0.001, 0.002, 0.3,
    0.5 at α = 0.05: K = 1 keeps 2 > 1, K = 2 keeps 2 ≤ 2, so the first two
    are kept (a plain BH would count m = 4).
    """
    pm = np.asarray(p_min, dtype=np.float64)
    fam = pd.factorize(pd.Series(np.asarray(family, dtype=object)))[0]
    keep = np.zeros(pm.shape, dtype=bool)
    ok = np.isfinite(pm)
    for f in np.unique(fam[ok]):
        idx = np.flatnonzero(ok & (fam == f))
        srt = np.sort(pm[idx])
        k = np.arange(1, len(idx) + 1)
        # m(K) for every K at once: how many p* are ≤ α/K
        m_k = np.searchsorted(srt, q_level / k, side="right")
        first = int(np.argmax(m_k <= k))  # m(m) ≤ m always holds, so some K qualifies
        keep[idx] = pm[idx] <= q_level / k[first]
    return keep


def hierarchical_qvalues(
    p: npt.ArrayLike, kind: npt.ArrayLike, pair: npt.ArrayLike, q_level: float,
    p_min: npt.ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Level q-values and pair q-values of the Benjamini–Bogomolov procedure.

    ``p``: the level tests' p-values (NaN: not a test — e.g. the mirror of a
    two-valued attribute); ``kind``: the family (group kind) of each test;
    ``pair``: the (group, attribute) label of each test; ``q_level``: the FDR
    level the selection is made at; ``p_min``: each test's smallest achievable
    p-value (None: no screen, every pair is testable). Returns ``(q, pair_q)``,
    both aligned with ``p``: ``pair_q`` is the BH q-value of the test's
    (group, attribute) pair among the testable pairs of its family (1 for a
    pair Tarone's screen drops), ``q`` the level's q-value as described in the
    module docstring (NaN where ``p`` is NaN).
    """
    pv = np.asarray(p, dtype=np.float64)
    pm = pv * 0.0 if p_min is None else np.asarray(p_min, dtype=np.float64)
    kinds = np.asarray(kind, dtype=object)
    pairs = pd.Series(np.asarray(pair, dtype=object))
    frame = pd.DataFrame({"p": pv, "p_min": pm, "pair": pairs, "kind": kinds})
    tests = frame.loc[np.isfinite(pv)]
    by_pair = tests.groupby("pair", sort=False).agg(
        p_best=("p", "min"), n=("p", "size"), kind=("kind", "first"), floor=("p_min", "min"))
    by_pair["p_pair"] = np.minimum(1.0, by_pair["p_best"] * by_pair["n"])
    testable = tarone_testable(np.minimum(1.0, by_pair["floor"] * by_pair["n"]).to_numpy(),
                               by_pair["kind"].to_numpy(), q_level)
    by_pair["q_pair"] = 1.0
    by_pair.loc[testable, "q_pair"] = grouped_bh(
        by_pair.loc[testable, "p_pair"].to_numpy(), by_pair.loc[testable, "kind"].to_numpy())
    selected = by_pair["q_pair"] <= q_level
    m = testable.astype(np.float64)
    m = pd.Series(m, index=by_pair.index).groupby(by_pair["kind"], sort=False).transform("sum")
    r = selected.groupby(by_pair["kind"], sort=False).transform("sum")
    by_pair["scale"] = m / r.clip(lower=1)
    within = grouped_bh(pv, frame["pair"].to_numpy())
    scale = frame["pair"].map(by_pair["scale"]).to_numpy(np.float64)
    pair_q = frame["pair"].map(by_pair["q_pair"]).to_numpy(np.float64)
    chosen = frame["pair"].map(selected).fillna(False).to_numpy(bool)
    q = np.minimum(1.0, within * scale)
    q = np.where(chosen, q, np.maximum(q, pair_q))
    return np.where(np.isfinite(pv), q, np.nan), pair_q
