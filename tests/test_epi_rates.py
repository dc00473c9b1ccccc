"""Exact statistics of coreepi.epi.rates against published and independently computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from coreepi.epi.rates import (
    bh_qvalues,
    binomial_two_sided_p,
    incidence_rate,
    poisson_ci,
    poisson_upper_p,
    rate_ratio,
    rate_ratio_test,
)

# Exact 95% limits for a Poisson count k, as printed in the standard table
# (Garwood 1936, Biometrika 28:437; reproduced e.g. in Sahai & Khurshid 1993 and
# in the documentation of R's epitools::pois.exact: "for x = 0 ... pois.exact
# returns 3.689"). Values rounded as the table prints them.
GARWOOD_TABLE = [
    # k, lower, upper
    (0, 0.0, 3.689),
    (1, 0.0253, 5.572),
    (2, 0.2422, 7.225),
    (5, 1.623, 11.67),
    (10, 4.795, 18.39),
    (20, 12.22, 30.89),
]


@pytest.mark.parametrize(("k", "lower", "upper"), GARWOOD_TABLE)
def test_poisson_ci_matches_garwood_table(k: int, lower: float, upper: float) -> None:
    lo, hi = poisson_ci(k)
    assert float(lo) == pytest.approx(lower, abs=5e-4 * max(1, lower), rel=5e-4)
    assert float(hi) == pytest.approx(upper, rel=5e-4)


def test_poisson_ci_is_vectorized_and_matches_the_gamma_form() -> None:
    k = np.array([0, 1, 3, 50, 1000])
    lo, hi = poisson_ci(k, alpha=0.1)
    # the same limits from the gamma distribution: lower = Gamma(k).ppf(a/2), upper = Gamma(k+1).ppf(1-a/2)
    assert lo[0] == 0.0
    np.testing.assert_allclose(lo[1:], stats.gamma.ppf(0.05, k[1:]), rtol=1e-10)
    np.testing.assert_allclose(hi, stats.gamma.ppf(0.95, k + 1), rtol=1e-10)


def test_one_sample_rate_matches_r_poisson_test() -> None:
    # R's ?poisson.test example (data from Dalgaard, "Introductory Statistics with R",
    # the Welsh nickel refiners, after Breslow & Day 1987 vol. II):
    #   > poisson.test(137, 24.19893)
    #   95 percent confidence interval: 4.753125 6.692709
    #   sample estimates: event rate 5.661407
    rate, lo, hi = incidence_rate(137, 24.19893, per=1.0)
    assert float(rate) == pytest.approx(5.661407, abs=5e-7)
    assert float(lo) == pytest.approx(4.753125, abs=5e-7)
    assert float(hi) == pytest.approx(6.692709, abs=5e-7)


def test_incidence_rate_units_and_zero_exposure() -> None:
    # 14 crashes in 400 node-days = 35 per 1,000 node-days; exact 95% CI 19.135–58.724
    # (StatsDirect's worked example "14 events in 400 person-years: 0.019135 to 0.058724").
    rate, lo, hi = incidence_rate([14, 3], [400.0, 0.0])
    assert rate[0] == pytest.approx(35.0)
    assert lo[0] == pytest.approx(19.135, abs=1e-3)
    assert hi[0] == pytest.approx(58.724, abs=1e-3)
    assert math.isnan(rate[1]) and math.isnan(hi[1])


def test_rate_ratio_matches_r_poisson_test_two_sample() -> None:
    # R's ?poisson.test example, "eba1977: compare Fredericia to other three cities for
    # ages 55-59" (Breslow & Day 1987 vol. II):
    #   > poisson.test(c(11, 6+8+7), c(800, 1083+1050+878))
    #   count1 = 11, expected count1 = 6.7174, p-value = 0.07967
    #   95 percent confidence interval: 0.8584264 4.2772659
    #   sample estimates: rate ratio 1.971488
    # By hand: n = 32, π0 = 800/3811 = 0.20992; expected count1 = 32·π0 = 6.7174.
    # Clopper–Pearson for 11/32: (0.18572, 0.53193); × (1/(1-π))·3011/800 gives the CI.
    rr = rate_ratio(11, 800, 21, 3011)
    assert float(rr.ratio) == pytest.approx(1.971488, abs=5e-7)
    assert float(rr.lower) == pytest.approx(0.8584264, abs=5e-8)
    assert float(rr.upper) == pytest.approx(4.2772659, abs=5e-8)
    assert float(rr.p_value) == pytest.approx(0.07967, abs=5e-6)
    assert float(rr.expected1) == pytest.approx(6.7174, abs=5e-5)
    # the scalar reference (scipy.stats.binomtest) agrees
    ratio, lo, hi, p = rate_ratio_test(11, 800, 21, 3011)
    assert (ratio, lo, hi, p) == pytest.approx(
        (float(rr.ratio), float(rr.lower), float(rr.upper), float(rr.p_value)), rel=1e-12
    )


def test_rate_ratio_clopper_pearson_by_hand() -> None:
    # x1 = 5, x2 = 0: π's Clopper–Pearson lower limit is (α/2)^(1/n) = 0.025^(1/5) = 0.47818;
    # with t1 = t2 the ratio's lower limit is π/(1-π) = 0.91636 and the upper one unbounded.
    # Two-sided exact p for 5 of 5 at π0 = 1/2: 2·0.5^5 = 0.0625.
    rr = rate_ratio(5, 10.0, 0, 10.0)
    pi_lo = 0.025 ** (1 / 5)
    assert float(rr.lower) == pytest.approx(pi_lo / (1 - pi_lo), rel=1e-9)
    assert float(rr.lower) == pytest.approx(0.91636, abs=1e-5)
    assert math.isinf(float(rr.upper)) and math.isinf(float(rr.ratio))
    assert float(rr.p_value) == pytest.approx(0.0625, rel=1e-12)


def test_rate_ratio_undefined_without_crashes_or_exposure() -> None:
    rr = rate_ratio([0, 3], [10.0, 0.0], [0, 1], [5.0, 5.0])
    assert np.isnan(rr.ratio).all() and np.isnan(rr.p_value).all()


def test_vectorized_binomial_p_equals_scipy_binomtest() -> None:
    rng = np.random.default_rng(12345)
    n = rng.integers(1, 400, 1000)
    x = rng.integers(0, n + 1)
    p = rng.uniform(0.0005, 0.9995, 1000)
    ours = binomial_two_sided_p(x, n, p)
    ref = np.array([stats.binomtest(int(a), int(b), float(c)).pvalue for a, b, c in zip(x, n, p)])
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-300)


def test_binomial_p_edge_cases() -> None:
    # x at the mean: p = 1; degenerate null proportions follow R's binom.test
    assert binomial_two_sided_p(5, 10, 0.5) == pytest.approx(1.0)
    assert binomial_two_sided_p(0, 10, 0.0) == 1.0
    assert binomial_two_sided_p(1, 10, 0.0) == 0.0
    assert binomial_two_sided_p(10, 10, 1.0) == 1.0


def test_poisson_upper_p_by_hand() -> None:
    # P(X >= 14 | mu = 0.08) ≈ e^-0.08 · 0.08^14 / 14! = 0.923116 · 4.398e-16 / 8.71783e10
    #                        = 4.657e-27 (later terms add < 1%)
    assert float(poisson_upper_p(14, 0.08)) == pytest.approx(4.657e-27, rel=1e-2)
    # P(X >= 1 | mu) = 1 - e^-mu
    assert float(poisson_upper_p(1, 0.5)) == pytest.approx(1 - math.exp(-0.5), rel=1e-12)
    assert float(poisson_upper_p(0, 3.0)) == 1.0
    assert float(poisson_upper_p(2, 0.0)) == 0.0


BH_1995 = [
    0.0001,
    0.0004,
    0.0019,
    0.0095,
    0.0201,
    0.0278,
    0.0298,
    0.0344,
    0.0459,
    0.3240,
    0.4262,
    0.5719,
    0.6528,
    0.7590,
    1.000,
]


def test_bh_on_the_benjamini_hochberg_1995_example() -> None:
    # Benjamini & Hochberg (1995), JRSS B 57:289, section 4: 15 p-values from a
    # myocardial infarction study; at q = 0.05 the procedure rejects the four
    # smallest (Bonferroni would reject three).
    q = bh_qvalues(BH_1995)
    assert list(q <= 0.05) == [True] * 4 + [False] * 11
    # q_(i) = min_{j >= i} p_(j)·m/j: q_(4) = 0.0095·15/4 = 0.035625, q_(5) = 0.0201·15/5 = 0.0603
    assert q[3] == pytest.approx(0.035625)
    assert q[4] == pytest.approx(0.0603)
    assert q[0] == pytest.approx(0.0015)
    bonferroni = np.array(BH_1995) * 15 <= 0.05
    assert bonferroni.sum() == 3


def test_bh_keeps_nan_and_order() -> None:
    q = bh_qvalues([0.04, float("nan"), 0.01])
    assert math.isnan(q[1])
    assert q[0] == pytest.approx(0.04) and q[2] == pytest.approx(0.02)
