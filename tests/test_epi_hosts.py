"""Per-host statistics of coreepi.epi.hosts: SIR, expectations, diversity, telemetry."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from coreepi.epi.hosts import (
    expected_by_host,
    expected_distinct,
    host_concentration,
    host_table,
    sir,
    telemetry_before_crashes,
)

T0 = pd.Timestamp("2024-01-01", tz="UTC")


def test_sir_on_the_welsh_nickel_refiners() -> None:
    # Standardized mortality ratio of the Welsh nickel refiners (Doll et al.; the data set of
    # Breslow & Day 1987 vol. II, as used in Dalgaard, "Introductory Statistics with R",
    # 2nd ed., ch. 15 and R's ?poisson.test): 137 observed where 24.19893 expected.
    #   > poisson.test(137, 24.19893)   ->  5.661407, 95% CI 4.753125 6.692709, p < 2.2e-16
    s, lo, hi, p = sir(137, 24.19893)
    assert float(s) == pytest.approx(5.661407, abs=5e-7)
    assert float(lo) == pytest.approx(4.753125, abs=5e-7)
    assert float(hi) == pytest.approx(6.692709, abs=5e-7)
    assert float(p) < 2.2e-16


def test_sir_zero_expected_is_undefined() -> None:
    s, _lo, _hi, p = sir([3, 0], [0.0, 0.0])
    assert np.isnan(s).all() and p[0] == 0.0 and p[1] == 1.0


def _exposure(rows: list[tuple[str, float, str]]) -> pd.DataFrame:
    """rows of (host, node_days, stratum)."""
    return pd.DataFrame(rows, columns=["host_id", "node_days", "kernel"])


def test_expected_by_host_indirect_standardization_by_hand() -> None:
    # Strata rates from the fleet: kernel a: 10 crashes / 100 node-days = 0.1 per node-day;
    # kernel b: 2 crashes / 200 node-days = 0.01.
    # Host x: 50 node-days on a, 10 on b  ->  E = 50·0.1 + 10·0.01 = 5.1
    # Host y: 50 on a, 190 on b           ->  E = 5 + 1.9 = 6.9 (total 12 = all crashes)
    exposure = _exposure([("x", 50, "a"), ("x", 10, "b"), ("y", 50, "a"), ("y", 190, "b")])
    crashes = pd.DataFrame({"host_id": ["x"] * 9 + ["y"] * 3, "kernel": ["a"] * 10 + ["b"] * 2})
    e = expected_by_host(crashes, exposure, by=["kernel"])
    assert e["x"] == pytest.approx(5.1)
    assert e["y"] == pytest.approx(6.9)
    # crude: fleet rate 12 / 300 = 0.04; x: 60·0.04 = 2.4, y: 240·0.04 = 9.6
    crude = expected_by_host(crashes, exposure)
    assert crude["x"] == pytest.approx(2.4) and crude["y"] == pytest.approx(9.6)


def test_expected_distinct_by_hand() -> None:
    # Two equally common signatures, 2 crashes: E = 2·(1 - 0.5²) = 1.5.
    assert expected_distinct([2], [0.5, 0.5])[0] == pytest.approx(1.5)
    # Birthday-style occupancy: 365 equally likely signatures, 23 crashes:
    # E = 365·(1 - (364/365)^23) = 22.31996... (exact rational arithmetic, fractions.Fraction)
    e = expected_distinct([23, 0, 1], np.full(365, 1 / 365))
    assert e[0] == pytest.approx(365 * (1 - (364 / 365) ** 23), rel=1e-12)
    assert e[0] == pytest.approx(22.31996, abs=1e-5)
    assert e[1] == 0.0 and e[2] == pytest.approx(1.0)
    # one signature is everything: any n > 0 gives exactly 1 distinct
    assert expected_distinct([5], [1.0])[0] == pytest.approx(1.0)


def test_expected_distinct_agrees_with_simulation() -> None:
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(40, 0.3))
    n = 25
    sims = [len(set(rng.choice(40, n, p=p))) for _ in range(4000)]
    assert expected_distinct([n], p)[0] == pytest.approx(np.mean(sims), abs=0.1)


def test_host_concentration_values() -> None:
    # Group 0: 15 crashes over a fleet of 1,000 node-days (rate 0.015/node-day);
    # host h1 has 14 of them in 5 node-days: expected 0.075, P(X >= 14 | 0.075).
    members = pd.DataFrame({"gid": [0] * 15, "host_id": ["h1"] * 14 + ["h2"]})
    host_days = pd.Series({"h1": 5.0, "h2": 995.0})
    out = host_concentration(members, host_days, 1000.0)
    top = out.iloc[0]
    assert top["host_id"] == "h1" and top["crashes"] == 14
    assert top["expected"] == pytest.approx(0.075)
    assert top["share"] == pytest.approx(14 / 15)
    # e^-0.075 · 0.075^14 / 14! = 0.92774 · 1.7818e-16 / 8.71783e10 = 1.896e-27
    assert top["p_value"] == pytest.approx(1.896e-27, rel=2e-2)
    h2 = out.iloc[1]
    assert h2["expected"] == pytest.approx(14.925)
    assert h2["p_value"] == pytest.approx(1.0 - 0.0, abs=1e-5)  # P(X >= 1 | 14.9) ≈ 1


def test_host_without_exposure_is_not_tested() -> None:
    members = pd.DataFrame({"gid": [0, 0], "host_id": ["ghost", "h1"]})
    out = host_concentration(members, pd.Series({"h1": 10.0}), 10.0).set_index("host_id")
    assert out.loc["ghost", "expected"] == 0.0 and np.isnan(out.loc["ghost", "p_value"])


def test_host_table_diversity_private_and_hardware() -> None:
    exposure = pd.DataFrame({"host_id": ["a", "b", "c"], "node_days": [10.0, 10.0, 10.0]})
    crashes = pd.DataFrame(
        {
            "host_id": ["a", "a", "a", "a", "b", "b", "c", "c"],
            "signature": ["s1", "s2", "s3", "s4", "s1", "s1", "s1", None],
            "hardware_phenotypes": [
                ["stack-misaligned"],
                [],
                ["sigbus-mce", "x"],
                None,
                [],
                [],
                [],
                [],
            ],
        }
    )
    t = host_table(crashes, exposure)
    a = t.loc["a"]
    assert a["crashes"] == 4 and a["expected"] == pytest.approx(8 / 3)
    assert a["distinct_signatures"] == 4 and a["private_signatures"] == 3  # s2, s3, s4
    assert a["hardware_phenotype_crashes"] == 2
    # fleet mix over the 7 signed crashes: s1 4/7, s2..s4 1/7 each; host a has 4 signed crashes
    mix = np.array([4, 1, 1, 1]) / 7
    assert a["expected_distinct_signatures"] == pytest.approx(float(np.sum(1 - (1 - mix) ** 4)))
    assert t.loc["c", "distinct_signatures"] == 1 and t.loc["b", "private_signatures"] == 0


def test_telemetry_before_crashes_window() -> None:
    crashes = pd.DataFrame(
        {
            "host_id": ["h", "h", "k"],
            "captured_at": [T0 + pd.Timedelta(days=d) for d in (10, 30, 10)],
        }
    )
    telemetry = pd.DataFrame(
        {
            "host_id": ["h", "h", "h", "k"],
            "ts": [T0 + pd.Timedelta(days=d) for d in (5, 8, 25.5, 1)],
            "kind": ["mce", "other", "edac_ce", "mce"],
            "hardware_indicative": [True, False, True, True],
            "summary": ["m1", "o", "e", "far"],
        }
    )
    events, per_host = telemetry_before_crashes(crashes, telemetry, days=7)
    # h: day 5 and day 8 precede the day-10 crash within 7 days; day 25.5 precedes day 30.
    # k: its event is 9 days before its crash: outside the window.
    assert sorted(events["summary"]) == ["e", "m1", "o"]
    assert per_host.loc["h", "events"] == 3 and per_host.loc["h", "hardware_events"] == 2
    assert per_host.loc["h", "crashes_after_hardware_event"] == 2
    assert per_host.loc["k", "crashes_after_hardware_event"] == 0
