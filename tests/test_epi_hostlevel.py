"""Issue 11: the host as the unit of replication, honest denominators, testing families."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from coreepi.epi import analyze_fleet
from coreepi.epi.families import grouped_bh, hierarchical_qvalues, tarone_testable
from coreepi.epi.hosts import expected_by_host

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"))
from report_fleets import host_clustered, new_node  # noqa: E402


def _run(fleet):  # type: ignore[no-untyped-def]
    return analyze_fleet(fleet.crashes.drop(columns=["disease"]), fleet.exposure,
                         since=fleet.exposure["start"].min(), until=fleet.until)


def test_host_clustered_bug_is_software_and_names_its_hosts() -> None:
    fleet = host_clustered(1)
    f = _run(fleet)
    g = next(g for g in f.groups if g.key == fleet.planted[0].signature)
    assert (g.attribution.verdict, g.attribution.rule) == ("software", "host-clustered")
    lead = g.attribution.evidence[0]
    assert lead.kind == "host-clustered" and sorted(lead.host_ids) == fleet.planted[0].hosts
    assert (lead.observed, lead.total, lead.attribute) == (30, 30, "kernel")
    assert sorted(g.concentration.clustered_hosts) == fleet.planted[0].hosts
    a = next(a for a in g.associations if (a.attribute, a.value) == ("kernel", "6.1.0-13"))
    # host level: 3 of 40 hosts vs 0 of 160, one-sided Fisher exact = C(40,3)/C(200,3)
    assert (a.hosts_affected, a.hosts_exposed, a.rest_hosts_affected, a.rest_hosts_exposed) == (
        3, 40, 0, 160)
    assert a.host_p_value == pytest.approx(stats.hypergeom.sf(2, 200, 3, 40), rel=1e-9)
    assert a.host_p_value == pytest.approx(9880 / 1313400, rel=1e-9)  # 0.0075225
    assert a.q_family == "signature" and a.attribute_q_value is not None


def test_new_node_is_never_suspect_under_its_exposure_threshold() -> None:
    f = _run(new_node(1))
    new = next(h for h in f.hosts if h.host_id == "h-new")
    assert (new.attribution.verdict, new.attribution.rule) == (
        "undetermined", "insufficient-exposure")
    assert new.sir is None and new.p_value is None and not new.exposure_sufficient
    assert new.crashes == 4 and new.crashes_outside_exposure == 2  # before its heartbeat


def test_standardized_expected_by_hand() -> None:
    # Two strata: kvstore 2 crashes over 100 node-days (0.02/day), indexer 9 over 30 (0.3/day).
    # Host x: 10 days kvstore + 5 days indexer -> E = 10 * 0.02 + 5 * 0.3 = 1.7.
    exposure = pd.DataFrame({
        "host_id": ["x", "x", "y", "z"], "workload": ["kvstore", "indexer", "kvstore", "indexer"],
        "node_days": [10.0, 5.0, 90.0, 25.0],
    })  # fmt: skip
    crashes = pd.DataFrame({"host_id": ["y"] * 2 + ["z"] * 9,
                            "workload": ["kvstore"] * 2 + ["indexer"] * 9})
    e = expected_by_host(crashes, exposure, ["workload"])
    assert e["x"] == pytest.approx(1.7)
    assert e["y"] == pytest.approx(90 * 0.02) and e["z"] == pytest.approx(25 * 0.3)
    # unstandardized: 11 crashes over 130 node-days for every host
    assert expected_by_host(crashes, exposure)["x"] == pytest.approx(15 * 11 / 130)


def test_grouped_bh_is_bh_within_each_family() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.2, 0.01, np.nan])
    fam = np.array(["a", "a", "a", "b", "b", "b"])
    q = grouped_bh(p, fam)
    # family a: sorted 0.01, 0.03, 0.04 -> 0.03, 0.04, 0.04; family b: 0.01, 0.2 -> 0.02, 0.2
    assert q[:5] == pytest.approx([0.03, 0.04, 0.04, 0.2, 0.02])
    assert np.isnan(q[5])


def test_hierarchical_qvalues_select_pairs_then_levels() -> None:
    # Two (group, attribute) pairs in one family. Pair A: levels p 0.001, 0.02, 0.5 -> pair p
    # = 3 * 0.001 = 0.003; pair B: 0.3, 0.6 -> 0.6. BH over pairs: 0.006, 0.6; only A is
    # selected (R = 1 of M = 2), so A's levels are BH within A (0.003, 0.03, 0.5) times 2.
    p = [0.001, 0.02, 0.5, 0.3, 0.6]
    q, pair_q = hierarchical_qvalues(p, ["sig"] * 5, ["A", "A", "A", "B", "B"], 0.05)
    assert pair_q == pytest.approx([0.006, 0.006, 0.006, 0.6, 0.6])
    assert q[:3] == pytest.approx([0.006, 0.06, 1.0])
    assert min(q[3:]) >= 0.6  # an unselected pair never reads as significant


def test_tarone_keeps_only_the_hypotheses_that_can_reach_their_threshold() -> None:
    # p* 0.001, 0.002, 0.3, 0.5 at 0.05: K = 1 keeps 2 (> 1), K = 2 keeps 2 (<= 2): the
    # first two; a second family is screened on its own
    keep = tarone_testable([0.001, 0.002, 0.3, 0.5, 0.2, np.nan], ["a"] * 4 + ["b"] * 2, 0.05)
    assert keep.tolist() == [True, True, False, False, False, False]
    # every p* tiny: nothing to drop
    assert tarone_testable([1e-9] * 5, ["a"] * 5, 0.05).all()


def test_untestable_pairs_leave_the_family() -> None:
    # Pair A (one level, p 0.004) among 9 pairs of groups too small to ever reach p 0.05/2
    # (p* = 0.5 each). Plain BH over 10 pairs: q = 0.04 * ... = 10 * 0.004 = 0.04 — with the
    # screen, M = 1 and q = 0.004; the small pairs cannot be rejected and get q = 1.
    p = [0.004] + [0.5] * 9
    pairs = [f"P{i}" for i in range(10)]
    p_min = [1e-6] + [0.5] * 9
    plain, plain_pair = hierarchical_qvalues(p, ["sig"] * 10, pairs, 0.05)
    q, pair_q = hierarchical_qvalues(p, ["sig"] * 10, pairs, 0.05, p_min=p_min)
    assert plain_pair[0] == pytest.approx(0.04) and plain[0] == pytest.approx(0.04)
    assert pair_q[0] == pytest.approx(0.004) and q[0] == pytest.approx(0.004)
    assert pair_q[1:].tolist() == [1.0] * 9 and q[1:].tolist() == [1.0] * 9


def test_numbers_given_as_text_are_binned_into_strata() -> None:
    # hosts.csv carries text: "912" and "30.5" are numbers, "6.1.0-13" is a label
    from coreepi.epi.exposure import _numbers

    assert _numbers(pd.Series(["912", None, "30.5"], dtype=object)).tolist()[::2] == [912.0, 30.5]
    labels = pd.Series(["6.1.0-13", "5.15"], dtype=object)
    assert _numbers(labels) is labels
    t0 = pd.Timestamp("2024-05-01", tz="UTC")
    exposure = pd.DataFrame({
        "host_id": [f"h{i}" for i in range(20)], "start": t0, "end": t0 + pd.Timedelta(days=10),
        "exceptions_per_s": [str(10 + i) for i in range(20)],
    })  # fmt: skip
    crashes = pd.DataFrame({
        "crash_id": ["c1"], "host_id": ["h19"], "captured_at": [t0 + pd.Timedelta(days=1)],
        "signature": ["s"], "phenotypes": [[]], "hardware_phenotypes": [[]],
    })  # fmt: skip
    f = analyze_fleet(crashes, exposure)
    info = next(a for a in f.attributes if a.name == "exceptions_per_s")
    assert info.kind == "strata" and info.levels[-1] == "≥25"  # quartiles of 10..29
