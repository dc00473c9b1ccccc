"""Exact conditional inference for a rate ratio common to strata (person-time data).

In stratum s, ``x_s`` of the ``n_s`` events fall in the exposed node-time
``t1_s`` (the rest in ``t0_s``). Conditional on every ``n_s``,
``x_s ~ Binomial(n_s, π_s(R))`` with ``π_s(R) = t1_s R / (t1_s R + t0_s)``;
``X = Σ x_s`` is sufficient for the common rate ratio R and its
distribution, free of the stratum rates, is the convolution of those
binomials. Then

* the exact CI: ``R_L`` with ``P(X ≥ x; R_L) = α/2`` (0 when x = 0) and
  ``R_U`` with ``P(X ≤ x; R_U) = α/2`` (unbounded when x = Σ n_s);
* the conditional MLE: ``E[X; R] = x`` (unbounded / 0 at the extremes);
* the two-sided p-value of R = 1: twice the smaller tail, capped at 1.

Strata without both exposed and unexposed node-time, or without events,
carry no information and are dropped. With one stratum this is exactly the
conditional binomial test of :func:`coreepi.epi.rates.rate_ratio`.

*Breslow, N.E. & Day, N.E. (1987). Statistical Methods in Cancer Research II,
§3.4 and §7.4. Gart, J.J. (1978). The analysis of ratios and cross-product
ratios of Poisson variates with application to incidence rates. Commun.
Statist. A7:917–937. Hirji, K.F. (2006). Exact Analysis of Discrete Data, ch. 4.*
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize, stats

__all__ = ["ExactRatio", "MAX_EXACT_EVENTS", "exact_common_ratio"]

MAX_EXACT_EVENTS = 20_000
"""Above this many events the convolution is not attempted (it costs ~ events × strata)."""

_LOG_R = 40.0  # search log R in [-40, 40]: e^40 ≈ 2.4e17 is "unbounded" for any fleet


@dataclass(frozen=True)
class ExactRatio:
    """The exact conditional estimate: ``ratio`` (inf: unbounded), CI, p; None if no data."""

    ratio: float
    lower: float
    upper: float
    p_value: float
    strata: int
    """Informative strata used."""


def _pmf(n: np.ndarray, t1: np.ndarray, t0: np.ndarray, log_r: float) -> np.ndarray:
    """The distribution of X = Σ x_s at R = e^log_r (a convolution of binomials)."""
    pi = 1.0 / (1.0 + t0 / t1 * math.exp(-log_r))
    acc = np.ones(1)
    for ns, ps in zip(n, pi, strict=True):
        acc = np.convolve(acc, stats.binom.pmf(np.arange(ns + 1), ns, ps))
    return acc


def exact_common_ratio(
    x: npt.ArrayLike, n: npt.ArrayLike, t1: npt.ArrayLike, t0: npt.ArrayLike,
    *, alpha: float = 0.05,
) -> ExactRatio | None:
    """Exact conditional rate ratio over strata; None when no stratum is informative or
    there are more than :data:`MAX_EXACT_EVENTS` events.

    ``x``: events with the value per stratum; ``n``: all events per stratum;
    ``t1``, ``t0``: node-time with / without the value per stratum.
    """
    xa, na = np.asarray(x, np.int64), np.asarray(n, np.int64)
    t1a, t0a = np.asarray(t1, np.float64), np.asarray(t0, np.float64)
    ok = (na > 0) & (t1a > 0) & (t0a > 0)
    if not ok.any() or int(na[ok].sum()) > MAX_EXACT_EVENTS:
        return None
    xa, na, t1a, t0a = xa[ok], na[ok], t1a[ok], t0a[ok]
    xo, total = int(xa.sum()), int(na.sum())

    def upper_tail(log_r: float) -> float:  # P(X ≥ xo), increasing in R
        return float(_pmf(na, t1a, t0a, log_r)[xo:].sum())

    def lower_tail(log_r: float) -> float:  # P(X ≤ xo), decreasing in R
        return float(_pmf(na, t1a, t0a, log_r)[: xo + 1].sum())

    def mean(log_r: float) -> float:
        pmf = _pmf(na, t1a, t0a, log_r)
        return float(np.arange(pmf.size) @ pmf)

    half = alpha / 2
    lo = 0.0 if xo == 0 else _root(lambda v: upper_tail(v) - half)
    hi = math.inf if xo == total else _root(lambda v: lower_tail(v) - half)
    if xo == 0:
        est = 0.0
    elif xo == total:
        est = math.inf
    else:
        est = _root(lambda v: mean(v) - xo)
    p = min(1.0, 2.0 * min(upper_tail(0.0), lower_tail(0.0)))
    return ExactRatio(est, lo, hi, p, int(ok.sum()))


def _root(f: Callable[[float], float]) -> float:
    """e^v for the root v of the monotone ``f`` on [-_LOG_R, _LOG_R] (clamped at the ends)."""
    a, b = f(-_LOG_R), f(_LOG_R)
    if a * b > 0:
        return math.exp(-_LOG_R) if abs(a) < abs(b) else math.inf
    return math.exp(optimize.brentq(f, -_LOG_R, _LOG_R, xtol=1e-6))
