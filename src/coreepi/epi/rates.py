"""Exact statistics for counts over exposure: rates, rate ratios, FDR.

Every function takes scalars or numpy arrays (broadcast together) and returns
floats or arrays, so one call covers every group × attribute value of a
window. Formulas and sources are in ``docs/epidemiology.md``:

* exact Poisson confidence limits: Garwood (1936), through the chi-square
  quantiles ``chi2.ppf(a/2, 2k)/2`` and ``chi2.ppf(1-a/2, 2k+2)/2``;
* the rate ratio of two Poisson counts: conditional on the total
  ``n = x1 + x2``, ``x1 ~ Binomial(n, π)`` with ``π = t1·R / (t1·R + t2)``
  (Breslow & Day 1987, vol. II §2.2; R's ``poisson.test(c(x1, x2), c(t1, t2))``).
  The Clopper–Pearson interval of π maps to the ratio by ``π/(1-π)·t2/t1``;
  the two-sided p-value is the exact binomial test's (sum of the
  probabilities no larger than the observed one, as R's ``binom.test`` and
  ``scipy.stats.binomtest`` compute it);
* Benjamini–Hochberg q-values (Benjamini & Hochberg 1995), via
  ``statsmodels.stats.multitest.multipletests(method="fdr_bh")``.

Units: exposure is in node-days; rates are per 1,000 node-days unless the
``per`` argument says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

__all__ = [
    "RateRatio",
    "bh_qvalues",
    "binomial_two_sided_p",
    "incidence_rate",
    "poisson_ci",
    "poisson_upper_p",
    "rate_ratio",
    "rate_ratio_test",
]

FloatArray = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

# R's binom.test and scipy's binomtest count an outcome as "no more likely than
# the observed one" with this relative tolerance on the probabilities.
_RELATIVE_ERROR = 1 + 1e-7


def poisson_ci(k: ArrayLike, alpha: float = 0.05) -> tuple[FloatArray, FloatArray]:
    """Exact (Garwood 1936) two-sided ``1 - alpha`` confidence limits of a Poisson mean.

    ``k`` is the observed count (integers ≥ 0). Returns ``(lower, upper)`` for
    the mean count, i.e. ``chi2.ppf(alpha/2, 2k)/2`` (0 when k = 0) and
    ``chi2.ppf(1 - alpha/2, 2k + 2)/2``. Divide by the exposure for a rate.
    For k = 0 the 95% upper limit is 3.689; for k = 10 the limits are 4.795–18.39.
    """
    k_arr = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lower = np.where(k_arr > 0, stats.chi2.ppf(alpha / 2, 2 * k_arr) / 2, 0.0)
    upper = stats.chi2.ppf(1 - alpha / 2, 2 * k_arr + 2) / 2
    return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)


def incidence_rate(
    k: ArrayLike, exposure: ArrayLike, *, per: float = 1000.0, alpha: float = 0.05
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Incidence rate ``k / exposure × per`` with its exact Poisson CI.

    ``exposure`` in node-days; with the default ``per`` the result is crashes
    per 1,000 node-days. Returns ``(rate, lower, upper)``; NaN where the
    exposure is 0.
    """
    k_arr = np.asarray(k, dtype=np.float64)
    t = np.asarray(exposure, dtype=np.float64)
    lower, upper = poisson_ci(k_arr, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(t > 0, per / t, np.nan)
    return k_arr * scale, lower * scale, upper * scale


def poisson_upper_p(k: ArrayLike, mu: ArrayLike) -> FloatArray:
    """One-sided exact Poisson p-value ``P(X ≥ k | mean mu)`` = ``poisson.sf(k - 1, mu)``.

    1.0 where k = 0; 0.0 where mu = 0 and k > 0 (a count where none was expected).
    """
    k_arr = np.asarray(k, dtype=np.float64)
    mu_arr = np.asarray(mu, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        p = stats.poisson.sf(k_arr - 1, mu_arr)
    p = np.where(k_arr <= 0, 1.0, p)
    p = np.where((mu_arr <= 0) & (k_arr > 0), 0.0, p)
    return np.asarray(p, dtype=np.float64)


def _clopper_pearson(x: FloatArray, n: FloatArray, alpha: float) -> tuple[FloatArray, FloatArray]:
    """Exact (Clopper–Pearson) limits of a binomial proportion x/n (NaN where n = 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(x > 0, stats.beta.ppf(alpha / 2, x, n - x + 1), 0.0)
        hi = np.where(x < n, stats.beta.ppf(1 - alpha / 2, x + 1, n - x), 1.0)
    lo = np.where(n > 0, lo, np.nan)
    hi = np.where(n > 0, hi, np.nan)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


def binomial_two_sided_p(x: ArrayLike, n: ArrayLike, p: ArrayLike) -> FloatArray:
    """Two-sided exact binomial p-value, vectorized; equal to ``scipy.stats.binomtest``.

    The p-value sums the probabilities of every outcome no more likely than
    the observed ``x`` (with R's relative tolerance 1e-7). The tail opposite
    the observation is found by a vectorized bisection on the unimodal
    binomial pmf, the method scipy's ``binomtest`` uses one test at a time.
    """
    x_a, n_a, p_a = np.broadcast_arrays(
        np.asarray(x, dtype=np.float64),
        np.asarray(n, dtype=np.float64),
        np.asarray(p, dtype=np.float64),
    )
    shape = x_a.shape
    x_a, n_a, p_a = (a.ravel().copy() for a in (x_a, n_a, p_a))
    out = np.ones_like(x_a)
    mean = n_a * p_a
    d = stats.binom.pmf(x_a, n_a, p_a) * _RELATIVE_ERROR

    # Degenerate null proportions: only x = 0 (p = 0) or x = n (p = 1) is possible.
    edge0 = p_a <= 0
    edge1 = p_a >= 1
    out[edge0] = np.where(x_a[edge0] == 0, 1.0, 0.0)
    out[edge1] = np.where(x_a[edge1] == n_a[edge1], 1.0, 0.0)
    inner = ~(edge0 | edge1) & (n_a > 0)

    low = inner & (x_a < mean)
    high = inner & (x_a > mean)
    # x below the mean: count outcomes in [ceil(mean), n] with pmf <= d, i.e. find the
    # first i >= ceil(mean) whose pmf <= d (pmf decreases on that side).
    if low.any():
        nn, pp, dd = n_a[low], p_a[low], d[low]
        lo_i = np.ceil(mean[low])
        hi_i = nn.copy()
        first = _first_index_at_or_below(lo_i, hi_i, nn, pp, dd, decreasing=True)
        y = nn - first + 1  # number of outcomes in [first, n]
        out[low] = stats.binom.cdf(x_a[low], nn, pp) + stats.binom.sf(nn - y, nn, pp)
    # x above the mean: count outcomes in [0, floor(mean)] with pmf <= d (pmf increases
    # there), i.e. the last such index + 1.
    if high.any():
        nn, pp, dd = n_a[high], p_a[high], d[high]
        lo_i = np.zeros_like(nn)
        hi_i = np.floor(mean[high])
        last = _first_index_at_or_below(lo_i, hi_i, nn, pp, dd, decreasing=False)
        y = last + 1  # number of outcomes in [0, last]
        out[high] = stats.binom.cdf(y - 1, nn, pp) + stats.binom.sf(x_a[high] - 1, nn, pp)
    return np.asarray(np.minimum(out, 1.0).reshape(shape), dtype=np.float64)


def _first_index_at_or_below(
    lo: FloatArray,
    hi: FloatArray,
    n: FloatArray,
    p: FloatArray,
    d: FloatArray,
    *,
    decreasing: bool,
) -> FloatArray:
    """Bisection over integer indexes in [lo, hi] of a monotone pmf segment.

    ``decreasing=True``: the first index whose pmf <= d (hi + 1 when none).
    ``decreasing=False``: the last index whose pmf <= d (lo - 1 when none).
    """
    lo = lo.copy()
    hi = hi.copy()
    if decreasing:
        # invariant: answer in [lo, hi + 1]
        hi = hi + 1
        while True:
            active = lo < hi
            if not active.any():
                return lo
            mid = np.floor((lo + hi) / 2)
            below = stats.binom.pmf(mid, n, p) <= d
            hi = np.where(active & below, mid, hi)
            lo = np.where(active & ~below, mid + 1, lo)
    # increasing segment: answer in [lo - 1, hi]
    lo = lo - 1
    while True:
        active = lo < hi
        if not active.any():
            return hi
        mid = np.ceil((lo + hi) / 2)
        below = stats.binom.pmf(mid, n, p) <= d
        lo = np.where(active & below, mid, lo)
        hi = np.where(active & ~below, mid - 1, hi)


@dataclass(frozen=True)
class RateRatio:
    """Rate ratio of group 1 vs group 2, its exact CI and two-sided p-value (arrays)."""

    ratio: FloatArray
    lower: FloatArray
    upper: FloatArray
    p_value: FloatArray
    expected1: FloatArray
    """Expected count in group 1 under equal rates: ``n · t1 / (t1 + t2)``."""


def rate_ratio(
    x1: ArrayLike,
    t1: ArrayLike,
    x2: ArrayLike,
    t2: ArrayLike,
    *,
    alpha: float = 0.05,
) -> RateRatio:
    """Incidence rate ratio ``(x1/t1) / (x2/t2)`` by the conditional binomial method.

    Vectorized over broadcastable arrays. Given ``n = x1 + x2``, the count
    ``x1`` is Binomial(n, π) with π = t1/(t1 + t2) when the rates are equal.
    The CI is the Clopper–Pearson interval (π_L, π_U) of x1/n mapped by
    ``π/(1-π) · t2/t1``; the p-value is the two-sided exact binomial test of
    π = t1/(t1 + t2). This is what R's ``poisson.test(c(x1, x2), c(t1, t2))``
    reports. ``ratio`` and ``upper`` are ``inf`` when x2 = 0; everything is
    NaN when n = 0 or an exposure is 0.
    """
    x1_a, t1_a, x2_a, t2_a = (
        np.asarray(a, dtype=np.float64) for a in np.broadcast_arrays(x1, t1, x2, t2)
    )
    n = x1_a + x2_a
    valid = (n > 0) & (t1_a > 0) & (t2_a > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(valid, (x1_a / t1_a) / (x2_a / t2_a), np.nan)
        pi_lo, pi_hi = _clopper_pearson(x1_a, n, alpha)
        scale = t2_a / t1_a
        lower = np.where(valid, pi_lo / (1 - pi_lo) * scale, np.nan)
        upper = np.where(valid, np.where(pi_hi >= 1, np.inf, pi_hi / (1 - pi_hi) * scale), np.nan)
        pi0 = np.where(valid, t1_a / (t1_a + t2_a), 0.5)
        expected1 = np.where(valid, n * pi0, np.nan)
    p_value = np.where(valid, binomial_two_sided_p(x1_a, n, pi0).reshape(n.shape), np.nan)
    return RateRatio(
        ratio=np.asarray(ratio, dtype=np.float64),
        lower=np.asarray(lower, dtype=np.float64),
        upper=np.asarray(upper, dtype=np.float64),
        p_value=np.asarray(p_value, dtype=np.float64),
        expected1=np.asarray(expected1, dtype=np.float64),
    )


def rate_ratio_test(
    x1: int, t1: float, x2: int, t2: float, *, alpha: float = 0.05
) -> tuple[float, float, float, float]:
    """Scalar reference implementation of :func:`rate_ratio` with ``scipy.stats.binomtest``.

    Returns ``(ratio, lower, upper, p_value)``. Slow (one scipy call per test);
    the engine uses :func:`rate_ratio`, and the tests check that both agree.
    """
    n = x1 + x2
    if n == 0 or t1 <= 0 or t2 <= 0:
        return (float("nan"),) * 4
    res = stats.binomtest(int(x1), int(n), t1 / (t1 + t2))
    ci = res.proportion_ci(confidence_level=1 - alpha, method="exact")
    ratio = (x1 / t1) / (x2 / t2) if x2 > 0 else float("inf")
    lower = ci.low / (1 - ci.low) * t2 / t1
    upper = float("inf") if ci.high >= 1 else ci.high / (1 - ci.high) * t2 / t1
    return float(ratio), float(lower), float(upper), float(res.pvalue)


def bh_qvalues(p_values: ArrayLike) -> FloatArray:
    """Benjamini–Hochberg (1995) q-values (FDR-adjusted p-values); NaNs stay NaN.

    Uses ``statsmodels.stats.multitest.multipletests(method="fdr_bh")`` over the
    finite p-values. A hypothesis is rejected at FDR level q when its q-value ≤ q.
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.isfinite(p)
    if finite.any():
        from statsmodels.stats.multitest import multipletests

        out[finite] = multipletests(p[finite], method="fdr_bh")[1]
    return out
