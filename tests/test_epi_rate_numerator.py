"""A rate's numerator and denominator count the same crashes: the window's and each
group's rate divide the crashes *inside* exposure by the node-days of the exposure
intervals (breaker4 #20's companion: before, a crash outside every interval of its host
was counted above the line with no node-time below it). The crash totals stay whole,
and the findings say how many crashes the rate counts (``crashes_in_exposure``).
A window whose exposure is missing or too thin carries a flag
(``rates_undetermined_reason``) so that every renderer decides the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2

from coreepi.epi import EpiConfig, analyze_fleet
from coreepi.epi.models import FINDINGS_SCHEMA_VERSION

T0 = pd.Timestamp("2024-01-01", tz="UTC")


def d(days: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(days=days)


def _exposure(hosts: list[str], days: float) -> pd.DataFrame:
    return pd.DataFrame({
        "host_id": hosts, "start": [d(0)] * len(hosts), "end": [d(days)] * len(hosts),
        "kernel": ["5.15", "6.1"] * (len(hosts) // 2) + ["5.15"] * (len(hosts) % 2),
    })  # fmt: skip


def _crashes(rows: list[tuple[str, float]], signature: str = "s") -> pd.DataFrame:
    return pd.DataFrame({
        "crash_id": [f"c{i}" for i in range(len(rows))],
        "host_id": [h for h, _ in rows],
        "captured_at": [d(t) for _, t in rows],
        "signature": [signature] * len(rows),
        "phenotypes": [["null-deref"] for _ in rows],
        "hardware_phenotypes": [[] for _ in rows],
    })  # fmt: skip


def _garwood(k: int, node_days: float) -> tuple[float, float]:
    """Exact 95% Poisson limits per 1,000 node-days (Garwood 1936), from scipy's chi²."""
    return (chi2.ppf(0.025, 2 * k) / 2 / node_days * 1000,
            chi2.ppf(0.975, 2 * k + 2) / 2 / node_days * 1000)


def _fleet_with_outside_crashes() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Hosts a–d observed 10 days each (40 node-days); 3 crashes inside exposure (a, a, b),
    6 on host "ghost" that has no exposure, 2 on a after its exposure ended."""
    rows = [("a", 1), ("a", 2), ("b", 3)] + [("ghost", 4)] * 6 + [("a", 12), ("a", 13)]
    return _crashes(rows), _exposure(["a", "b", "c", "d"], 10)


def test_window_and_group_rates_count_only_crashes_inside_exposure() -> None:
    crashes, exposure = _fleet_with_outside_crashes()
    f = analyze_fleet(crashes, exposure, since=d(0), until=d(15))
    w = f.window
    assert (w.crashes, w.crashes_outside_exposure, w.crashes_in_exposure) == (11, 8, 3)
    assert w.node_days == pytest.approx(40.0)
    # 3 crashes inside exposure over 40 node-days = 75 per 1,000 node-days (before: 11/40)
    assert w.rate == pytest.approx(75.0)
    lo, hi = _garwood(3, 40.0)
    assert (w.rate_lower, w.rate_upper) == (pytest.approx(lo), pytest.approx(hi))
    assert w.rates_undetermined_reason is None
    for g in f.groups:  # the signature group and the phenotype group hold every crash
        assert (g.crashes, g.crashes_in_exposure) == (11, 3)
        assert g.rate == pytest.approx(75.0)
        assert (g.rate_lower, g.rate_upper) == (pytest.approx(lo), pytest.approx(hi))
    note = next(n for n in f.notes if "no exposure interval" in n)
    assert note.startswith("8 crash(es) fall in no exposure interval of their host: counted "
                           "in the window's and their groups' crash totals, left out of every "
                           "rate")
    assert "totals and rates" not in " ".join(f.notes)
    # the keys came with 2.4.0; later minor versions keep them
    assert f.schema_version == FINDINGS_SCHEMA_VERSION
    assert tuple(int(x) for x in FINDINGS_SCHEMA_VERSION.split(".")) >= (2, 4, 0)


def test_group_rate_counts_its_own_crashes_inside_exposure() -> None:
    # two signatures: "x" all inside, "y" half outside (its host has no exposure)
    crashes = pd.concat([_crashes([("a", 1), ("b", 2), ("c", 3), ("d", 4)], "x"),
                         _crashes([("a", 5), ("b", 6), ("ghost", 7), ("ghost", 8)], "y")],
                        ignore_index=True)
    crashes["crash_id"] = [f"c{i}" for i in range(len(crashes))]
    f = analyze_fleet(crashes, _exposure(["a", "b", "c", "d", "e"], 10))
    by_key = {g.key: g for g in f.groups if g.kind == "signature"}
    assert (by_key["x"].crashes_in_exposure, by_key["x"].rate) == (4, pytest.approx(80.0))
    assert (by_key["y"].crashes, by_key["y"].crashes_in_exposure) == (4, 2)
    assert by_key["y"].rate == pytest.approx(40.0)
    assert f.window.rate == pytest.approx(120.0)  # 6 of 8 crashes over 50 node-days


def test_no_exposure_flags_the_window() -> None:
    # every crash after the exposure ends: 0 node-days in the window
    f = analyze_fleet(_crashes([("a", 21), ("a", 22), ("b", 23)]), _exposure(["a", "b"], 10),
                      since=d(20), until=d(30))
    w = f.window
    assert (w.node_days, w.crashes_in_exposure, w.rate) == (0.0, 0, None)
    assert w.rates_undetermined_reason == "no-exposure"
    assert f.notes[0] == "no exposure in the window: rates, ratios and expectations are undefined"
    assert not any("no exposure interval" in n for n in f.notes)  # said once, above


def test_thin_exposure_flags_the_window_and_keeps_the_numbers() -> None:
    # two hosts with ~6 minutes of heartbeats each, crashes on three hosts (breaker4 #20)
    exposure = _exposure(["a", "b"], 0.004)
    crashes = _crashes([("a", 0.001), ("a", 0.002), ("b", 0.003), ("c", 0.0035), ("c", 0.0036)])
    f = analyze_fleet(crashes, exposure)
    w = f.window
    assert (w.hosts, w.hosts_with_crashes) == (2, 3)
    assert w.node_days == pytest.approx(0.008)
    assert w.rates_undetermined_reason == "thin-exposure"
    assert w.rate == pytest.approx(3 / 0.008 * 1000)  # the JSON keeps the number
    assert any(n.startswith("exposure too thin for rates: 0.008 node-days from 2 host(s) with "
                            "exposure, 3 with crashes") for n in f.notes)


@pytest.mark.parametrize(("node_days", "minimum", "reason"), [
    (0.9, 1.0, "thin-exposure"), (1.0, 1.0, None), (5.0, 10.0, "thin-exposure"),
    (5.0, 0.0, None)])
def test_thin_exposure_threshold_is_min_rate_node_days(
        node_days: float, minimum: float, reason: str | None) -> None:
    exposure = _exposure(["a"], node_days)
    f = analyze_fleet(_crashes([("a", node_days / 2)]), exposure,
                      config=EpiConfig(min_rate_node_days=minimum))
    assert f.window.rates_undetermined_reason == reason
    assert f.config["min_rate_node_days"] == minimum


def test_more_crashing_hosts_than_observed_hosts_is_thin_whatever_the_node_days() -> None:
    crashes, exposure = _fleet_with_outside_crashes()
    f = analyze_fleet(crashes, exposure[exposure["host_id"] == "a"], since=d(0), until=d(15))
    assert (f.window.hosts, f.window.hosts_with_crashes) == (1, 3)
    assert f.window.node_days == pytest.approx(10.0)
    assert f.window.rates_undetermined_reason == "thin-exposure"


def test_attribute_ratio_leaves_out_crashes_outside_exposure_even_with_a_sidecar_value() -> None:
    # 2 crashes inside exposure on kernel 6.1 (host b), and 6 on host "ghost" (no exposure)
    # whose sidecars say kernel 6.1: those have no node-time at 6.1, so they stay out of the
    # ratio's numerator (before: 8 crashes at 6.1 over b's and d's 20 node-days)
    crashes = _crashes([("b", 1), ("b", 2)] + [("ghost", 3)] * 6)
    crashes["kernel"] = "6.1"
    f = analyze_fleet(crashes, _exposure(["a", "b", "c", "d"], 10))
    sig = next(g for g in f.groups if g.kind == "signature")
    a = next(a for a in sig.associations if (a.attribute, a.value) == ("kernel", "6.1"))
    assert (a.crashes, a.rest_crashes) == (2, 0)
    assert (a.node_days, a.rest_node_days) == (pytest.approx(20.0), pytest.approx(20.0))
    assert a.rate == pytest.approx(100.0)  # 2 per 20 node-days, per 1,000
    assert a.share_of_group == 1.0


def test_crashes_outside_exposure_change_no_ratio_crude_or_adjusted() -> None:
    # kernel and zone both raise the rate (a two-attribute GLM, cluster-robust by host);
    # 15 crashes of host h01 after its exposure ends, whose sidecars name h01's own values,
    # fall in a cell of the model with node-time: before, they entered its counts
    hosts = [f"h{i:02d}" for i in range(40)]
    kernel = ["new" if i % 2 else "old" for i in range(40)]
    zone = ["x" if (i // 2) % 2 else "y" for i in range(40)]
    # nanosecond times on both sides (the crash times below are fractional days)
    exposure = pd.DataFrame({"host_id": hosts, "start": d(0), "end": d(20), "kernel": kernel,
                             "zone": zone}).astype({"start": "datetime64[ns, UTC]",
                                                    "end": "datetime64[ns, UTC]"})
    rng = np.random.default_rng(3)
    rows = [(h, float(t)) for h, k, z in zip(hosts, kernel, zone, strict=True)
            for t in rng.uniform(0, 20, rng.poisson((6 if k == "new" else 1)
                                                      * (3 if z == "x" else 1)))]
    inside = _crashes(rows)
    late = _crashes([("h01", 25.0 + 0.1 * j) for j in range(15)])
    late[["kernel", "zone"]] = ["new", "y"]
    both = pd.concat([inside, late], ignore_index=True)
    both["crash_id"] = [f"c{i}" for i in range(len(both))]

    def associations(crashes: pd.DataFrame) -> list[dict[str, object]]:
        f = analyze_fleet(crashes, exposure, until=d(30))
        assert f.window.crashes_in_exposure == len(inside)
        sig = next(g for g in f.groups if g.kind == "signature")
        return [a.model_dump() for a in sig.associations]

    alone = associations(inside)
    fitted = [a for a in alone if a["adjusted_irr"] is not None]
    assert {(a["attribute"], a["value"]) for a in fitted} == {("kernel", "new"), ("zone", "x")}
    assert fitted[0]["adjusted_method"] == "poisson-glm-cluster"
    assert associations(both) == alone
