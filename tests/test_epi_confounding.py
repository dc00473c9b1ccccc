"""Confounding: a version rolled out mostly on one CPU model must not be blamed on the CPU."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from coreepi.epi import analyze_fleet
from coreepi.epi.confounding import adjusted_rate_ratio, exposure_cube
from coreepi.reporting.phrases import evidence_text

T0 = pd.Timestamp("2024-01-01", tz="UTC")


def make_rollout(seed: int = 4, n_hosts: int = 400) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A fleet where app_version v2 causes a 10-fold crash rate and cpu_model does nothing.

    v2 is rolled out on day 10 to 85% of the cpu B hosts but only 10% of the cpu A
    hosts, so cpu B carries most of v2's node-time. Rates: 0.005 crashes per node-day
    on v1, 0.05 on v2 (true IRR 10), the same on both CPU models (true IRR 1).
    """
    rng = np.random.default_rng(seed)
    host = np.array([f"n{i:04d}" for i in range(n_hosts)])
    cpu = rng.choice(["A", "B"], n_hosts)
    gets_v2 = np.where(
        cpu == "B", rng.uniform(size=n_hosts) < 0.85, rng.uniform(size=n_hosts) < 0.10
    )
    rows = []
    for i in range(n_hosts):
        rows.append((host[i], T0, T0 + pd.Timedelta(days=10), cpu[i], "v1"))
        rows.append(
            (
                host[i],
                T0 + pd.Timedelta(days=10),
                T0 + pd.Timedelta(days=40),
                cpu[i],
                "v2" if gets_v2[i] else "v1",
            )
        )
    ex = pd.DataFrame(rows, columns=["host_id", "start", "end", "cpu_model", "app_version"])
    days = (ex["end"] - ex["start"]).dt.total_seconds().to_numpy() / 86400
    rate = np.where(ex["app_version"] == "v2", 0.05, 0.005)
    k = rng.poisson(rate * days)
    idx = np.repeat(np.arange(len(ex)), k)
    u = rng.uniform(size=idx.size)
    start = ex["start"].to_numpy()[idx]
    at = start + (ex["end"].to_numpy()[idx] - start) * u
    cr = pd.DataFrame(
        {
            "crash_id": [f"c{j}" for j in range(idx.size)],
            "host_id": ex["host_id"].to_numpy()[idx],
            "captured_at": pd.to_datetime(at, utc=True),
            "signature": "Parser::feed | Session::on_data",
            "phenotypes": [["null-deref"] for _ in range(idx.size)],
            "hardware_phenotypes": [[] for _ in range(idx.size)],
        }
    )
    return cr, ex


@pytest.fixture(scope="module")
def rollout() -> tuple[pd.DataFrame, pd.DataFrame]:
    return make_rollout()


def test_crude_blames_the_cpu_adjusted_does_not(rollout: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    crashes, exposure = rollout
    findings = analyze_fleet(crashes, exposure)
    group = next(g for g in findings.groups if g.kind == "signature")
    assoc = {(a.attribute, a.value): a for a in group.associations}
    cpu_b = assoc[("cpu_model", "B")]
    v2 = assoc[("app_version", "v2")]
    # Crude: cpu B looks 4-fold worse, far from 1.
    assert cpu_b.irr is not None and cpu_b.irr > 3.0
    assert cpu_b.irr_lower is not None and cpu_b.irr_lower > 2.0
    assert cpu_b.q_value is not None and cpu_b.q_value < 1e-10
    # Adjusted for app_version: about 1, and the interval covers 1.
    assert cpu_b.adjusted_for == ["app_version"]
    assert cpu_b.adjusted_irr == pytest.approx(1.0, abs=0.35)
    assert cpu_b.adjusted_lower < 1.0 < cpu_b.adjusted_upper  # type: ignore[operator]
    # v2 keeps a large adjusted ratio whose interval covers the true 10.
    assert v2.adjusted_for == ["cpu_model"]
    assert v2.adjusted_lower > 5.0  # type: ignore[operator]
    assert v2.adjusted_lower < 10.0 < v2.adjusted_upper  # type: ignore[operator]
    # The verdict is software, and the evidence says cpu B was a confounder.
    assert group.attribution.verdict == "software"
    texts = [evidence_text(e) for e in group.attribution.evidence]
    assert any(t.startswith("cpu_model=B: crude rate ratio") and "confounding" in t for t in texts)
    v2_text = next(t for t in texts if t.startswith("app_version=v2:"))
    assert v2.adjusted_method == "poisson-glm-cluster"  # each host's exposure is known here
    assert "adjusted for cpu_model (Poisson GLM, CI robust to clustering by host)" in v2_text


def test_adjusted_ratio_equals_an_independent_statsmodels_formula_fit(
    rollout: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    crashes, exposure = rollout
    findings = analyze_fleet(crashes, exposure)
    group = next(g for g in findings.groups if g.kind == "signature")
    cpu_b = next(a for a in group.associations if (a.attribute, a.value) == ("cpu_model", "B"))
    # Independent computation: cells by hand from the raw tables, then a formula GLM.
    ex = exposure.assign(node_days=(exposure["end"] - exposure["start"]).dt.total_seconds() / 86400)
    cells = ex.groupby(["cpu_model", "app_version"])["node_days"].sum().reset_index()
    joined = pd.merge_asof(
        crashes.sort_values("captured_at"),
        ex.sort_values("start")[["host_id", "start", "cpu_model", "app_version"]],
        left_on="captured_at",
        right_on="start",
        by="host_id",
    )
    counts = joined.groupby(["cpu_model", "app_version"]).size().rename("crashes")
    cells = cells.join(counts, on=["cpu_model", "app_version"]).fillna({"crashes": 0})
    fit = smf.glm(
        "crashes ~ C(cpu_model, Treatment('A')) + C(app_version, Treatment('v1'))",
        data=cells,
        family=sm.families.Poisson(),
        offset=np.log(cells["node_days"]),
    ).fit()
    term = "C(cpu_model, Treatment('A'))[T.B]"
    coef = fit.params[term]
    assert cpu_b.adjusted_irr == pytest.approx(np.exp(coef), rel=1e-6)
    # the interval: the same model on host-level cells, cluster-robust by host; the standard
    # error is the larger of the sandwich and the model-based one
    host_cells = ex.groupby(["host_id", "cpu_model", "app_version"])["node_days"].sum()
    host_counts = joined.groupby(["host_id", "cpu_model", "app_version"]).size()
    host_cells = host_cells.reset_index().join(
        host_counts.rename("crashes"), on=["host_id", "cpu_model", "app_version"]
    ).fillna({"crashes": 0})
    robust = smf.glm(
        "crashes ~ C(cpu_model, Treatment('A')) + C(app_version, Treatment('v1'))",
        data=host_cells, family=sm.families.Poisson(), offset=np.log(host_cells["node_days"]),
    ).fit(cov_type="cluster", cov_kwds={"groups": pd.factorize(host_cells["host_id"])[0]})
    assert robust.params[term] == pytest.approx(coef, rel=1e-6)
    se = max(fit.bse[term], robust.bse[term])
    assert cpu_b.adjusted_method == "poisson-glm-cluster"
    assert cpu_b.adjusted_lower == pytest.approx(np.exp(coef - 1.959964 * se), rel=1e-5)
    assert cpu_b.adjusted_upper == pytest.approx(np.exp(coef + 1.959964 * se), rel=1e-5)


def test_host_clustered_crashes_widen_the_adjusted_interval() -> None:
    # 200 hosts of 10 node-days, kernel 6.1 on 40 of them, cpu A/B alternating (independent
    # of the kernel). Three 6.1 hosts crash 8 times each (a job they run); 40 crashes fall one
    # each on 40 of the 160 other hosts. Crude ratio (24/400) / (40/1600) = 2.4. Counted as
    # 64 independent crashes the interval excludes 1; by host it is 3 hosts of 40 against 40
    # of 160, and the cluster-robust interval covers 1.
    hosts = [f"h{i:03d}" for i in range(200)]
    kernel = ["6.1" if i < 40 else "5.15" for i in range(200)]
    cpu = ["A" if i % 2 else "B" for i in range(200)]
    exposure = pd.DataFrame({"host_id": hosts, "kernel": kernel, "cpu_model": cpu,
                             "node_days": 10.0})
    crash_hosts = [0] * 8 + [1] * 8 + [2] * 8 + list(range(40, 80))
    crashes = pd.DataFrame({"host_id": [hosts[i] for i in crash_hosts],
                            "kernel": [kernel[i] for i in crash_hosts],
                            "cpu_model": [cpu[i] for i in crash_hosts]})
    naive = adjusted_rate_ratio(crashes.drop(columns="host_id"),
                                exposure_cube(exposure.drop(columns="host_id"),
                                              ["kernel", "cpu_model"]),
                                "kernel", "6.1", ["cpu_model"])
    robust = adjusted_rate_ratio(crashes, exposure_cube(exposure, ["kernel", "cpu_model"]),
                                 "kernel", "6.1", ["cpu_model"])
    assert naive.method == "poisson-glm" and robust.method == "poisson-glm-cluster"
    assert naive.irr == pytest.approx(2.4, rel=1e-6) and robust.irr == pytest.approx(2.4, rel=1e-6)
    assert naive.lower is not None and naive.lower > 1.4
    assert robust.lower is not None and robust.upper is not None
    assert robust.lower < 1.0 < robust.upper
    assert robust.p_value is not None and naive.p_value is not None
    assert robust.p_value > 0.05 > 0.001 > naive.p_value
    # the sandwich is statsmodels' own on the host cells (its small-sample factor included)
    cells = exposure.assign(crashes=np.bincount(crash_hosts, minlength=200).astype(float))
    ref = smf.glm("crashes ~ C(kernel, Treatment('5.15')) + C(cpu_model)", data=cells,
                  family=sm.families.Poisson(), offset=np.log(cells["node_days"])).fit(
        cov_type="cluster", cov_kwds={"groups": np.arange(200)})
    lo, hi = np.exp(ref.conf_int().loc["C(kernel, Treatment('5.15'))[T.6.1]"])
    assert robust.lower == pytest.approx(lo, rel=1e-5)
    assert robust.upper == pytest.approx(hi, rel=1e-5)


def _cells_and_crashes(kernel_of_crash: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    exposure = pd.DataFrame(
        {
            "kernel": ["5.15", "5.15", "6.1", "6.1"],
            "cpu_model": ["A", "B", "A", "B"],
            "node_days": [100.0, 100.0, 100.0, 100.0],
        }
    )
    crashes = pd.DataFrame(
        {"kernel": kernel_of_crash, "cpu_model": ["A", "B"] * (len(kernel_of_crash) // 2)}
    )
    return exposure, crashes


def test_separation_is_estimated_by_the_exact_conditional_method() -> None:
    # Every crash has kernel 6.1; two cpu strata of 100 + 100 node-days, 5 crashes each.
    # By hand: X = 10 = N, so P(X >= 10; R) = pi^10 with pi = R / (R + 1) in both strata;
    # the lower limit solves pi^10 = 0.025: pi = 0.025^0.1 = 0.691503, R_L = pi / (1 - pi)
    # = 2.24151; the MLE is unbounded; p = 2 * (1/2)^10 = 0.001953125.
    exposure, crashes = _cells_and_crashes(["6.1"] * 10)
    cube = exposure_cube(exposure, ["kernel", "cpu_model"])
    res = adjusted_rate_ratio(crashes, cube, "kernel", "6.1", ["cpu_model"])
    assert res.method == "exact-conditional" and res.assessable
    assert res.irr == float("inf") and res.upper is None
    pi = 0.025 ** 0.1
    assert res.lower == pytest.approx(pi / (1 - pi), rel=1e-5)
    assert res.p_value == pytest.approx(2 * 0.5**10, rel=1e-9)
    assert res.note is not None and "separation" in res.note


def test_exact_conditional_matches_the_conditional_binomial_in_one_stratum() -> None:
    # One stratum: the exact conditional method is R's poisson.test(c(11, 21), c(800, 3011))
    # (Breslow & Day's Fredericia example): 1.971488, CI 0.8584264-4.2772659. The p-value
    # is the doubled smaller tail (Breslow & Day's convention), not R's sum of less likely
    # outcomes (0.07967): 2 * P(X >= 11 | Binomial(32, 800 / 3811)).
    from scipy import stats

    from coreepi.epi.exact import exact_common_ratio

    est = exact_common_ratio([11], [32], [800.0], [3011.0])
    assert est is not None
    assert est.ratio == pytest.approx(1.971488, rel=1e-5)
    assert est.lower == pytest.approx(0.8584264, rel=1e-5)
    assert est.upper == pytest.approx(4.2772659, rel=1e-5)
    assert est.p_value == pytest.approx(2 * stats.binom.sf(10, 32, 800 / 3811), rel=1e-9)


def test_no_informative_stratum_fails_closed() -> None:
    # kernel 6.1 only on cpu B and every crash on it: no stratum holds both kernels
    exposure = pd.DataFrame(
        {"kernel": ["5.15", "6.1"], "cpu_model": ["A", "B"], "node_days": [100.0, 100.0]}
    )
    crashes = pd.DataFrame({"kernel": ["6.1"] * 9, "cpu_model": ["B"] * 9})
    cube = exposure_cube(exposure, ["kernel", "cpu_model"])
    res = adjusted_rate_ratio(crashes, cube, "kernel", "6.1", ["cpu_model"])
    assert res.irr is None and not res.assessable
    assert res.inseparable == ("cpu_model",)
    assert res.note is not None and "cannot be assessed" in res.note


def test_collinear_covariate_is_left_out_with_a_note() -> None:
    # kernel 6.1 only ever ran on cpu B: their effects cannot be told apart
    exposure = pd.DataFrame(
        {"kernel": ["5.15", "6.1"], "cpu_model": ["A", "B"], "node_days": [100.0, 100.0]}
    )
    crashes = pd.DataFrame(
        {"kernel": ["5.15"] * 3 + ["6.1"] * 9, "cpu_model": ["A"] * 3 + ["B"] * 9}
    )
    cube = exposure_cube(exposure, ["kernel", "cpu_model"])
    res = adjusted_rate_ratio(crashes, cube, "kernel", "6.1", ["cpu_model"])
    assert res.adjusted_for == ()
    assert res.note is not None and "not adjusted for cpu_model" in res.note
    # with nothing left to adjust for, the GLM gives the crude ratio 9/3 = 3, but kernel and
    # cpu cannot be told apart: confounding is not assessable (fails closed)
    assert res.irr == pytest.approx(3.0, rel=1e-6)
    assert res.inseparable == ("cpu_model",) and not res.assessable


def test_a_refinement_of_the_value_is_not_adjusted_for() -> None:
    # microcode m1 and m2 both run only on cpu Gold (m3 only elsewhere): microcode subdivides
    # cpu=Gold, so it cannot confound it; every crash on Gold, 6 on m1, none on m2
    exposure = pd.DataFrame({"cpu_model": ["Gold", "Gold", "EPYC"],
                             "microcode": ["m1", "m2", "m3"], "node_days": [50.0, 50.0, 100.0]})
    crashes = pd.DataFrame({"cpu_model": ["Gold"] * 6, "microcode": ["m1"] * 6})
    cube = exposure_cube(exposure, ["cpu_model", "microcode"])
    res = adjusted_rate_ratio(crashes, cube, "cpu_model", "Gold", ["microcode"])
    assert res.assessable and res.adjusted_for == ()
    assert res.note is not None and "refinement, not a confounder" in res.note
    # by hand: one stratum, X = 6 = N: pi^6 = 0.025 with pi = R / (R + 1) (100 vs 100 days)
    pi = 0.025 ** (1 / 6)
    assert res.lower == pytest.approx(pi / (1 - pi), rel=1e-5)
