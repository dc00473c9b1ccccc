"""The surveillance detectors: hand-computed CUSUM and clocks, then planted fleets."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from coreepi.epi.surveillance import (
    DetectorParams, FleetClock, HostClocks, baseline_days_covered, clip_drained, days, detect,
    drain_recheck, new_groups,
    phenotype_crashes, poisson_cusum, polya_concentration, quasi_dispersion, rising_groups,
    signature_llr, rollout_regressions, rollouts,
    suspect_hosts, marked_poisson_sprt, wald_bounds, delay_bound_days,
)  # fmt: skip
from coreepi.simulate.timeline import BadHost, KernelRollout, Rise, TimelineFleet, make_timeline

T0 = pd.Timestamp("2026-10-01", tz="UTC")


def _exp(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame({"host_id": [r[0] for r in rows],
                         "start": [T0 + pd.Timedelta(days=r[1]) for r in rows],
                         "end": [T0 + pd.Timedelta(days=r[2]) for r in rows]})


def test_cusum_hand_computed() -> None:
    # λ0 = 1/node-day, r = 2: each crash adds ln 2, each node-day subtracts 1
    run = poisson_cusum([0.1, 0.2, 0.3, 2.0], 1.0, 2.0, 2.0)
    ln2 = math.log(2)
    assert run.statistic == pytest.approx([ln2, 2 * ln2 - 0.1, 3 * ln2 - 0.2,
                                           max(0, 3 * ln2 - 0.2 - 1.7) + ln2])
    assert len(run.alarms) == 0
    run = poisson_cusum([0.1, 0.2, 0.3, 0.4], 1.0, 2.0, 2.0)
    assert run.alarms.tolist() == [3] and run.statistic[3] == pytest.approx(4 * ln2 - 0.3)
    assert run.run_starts.tolist() == [0]
    # S falls to 0 at the third crash (0.693 - 1.0 < 0): the alarming run starts there
    run = poisson_cusum([0.0, 1.0, 1.1, 1.2, 1.3], 1.0, 2.0, 2.0)
    assert run.alarms.tolist() == [4] and run.run_starts.tolist() == [1]


def test_cusum_marked_and_dispersion() -> None:
    # marked crash: ln 10; drift (2-1)·1 + (10-1)·0.1 = 1.9 per node-day; φ = 2 halves all
    run = poisson_cusum([0.0, 1.0], 1.0, 2.0, 100.0, marked=[True, False], marked_rate0=0.1,
                        marked_ratio=10.0, dispersion=2.0)
    assert run.statistic == pytest.approx([math.log(10) / 2,
                                           max(0.0, math.log(10) / 2 - 0.95) + math.log(2) / 2])
    with pytest.raises(ValueError, match="ratios 1.0, 1.0 must be >= 1 and one > 1"):
        poisson_cusum([0.0], 1.0, 1.0, 1.0)
    # ratio 1: unmarked crashes carry nothing (no gain, no drift)
    run = poisson_cusum([0.0, 0.5, 9.0], 1.0, 1.0, 100.0, marked=[True, False, False],
                        marked_rate0=0.1, marked_ratio=10.0)
    assert run.statistic == pytest.approx([math.log(10), math.log(10) - 0.45, 0.0])


def test_quasi_dispersion_hand_computed() -> None:
    assert quasi_dispersion([0, 4, 2], [2, 2, 2]) == pytest.approx(2.0)
    assert quasi_dispersion([1, 3], [2, 2]) == 1.0  # Pearson 1.0 / 1 df, floored at 1
    assert quasi_dispersion([5], [1]) == 1.0
    with warnings.catch_warnings():  # days with no node-time (μ = 0) are left out quietly
        warnings.simplefilter("error")
        assert quasi_dispersion([0, 0, 4, 2], [0, 0, 2, 2]) == pytest.approx(2.0)


def test_fleet_and_host_clocks() -> None:
    exp = _exp([("a", 0, 2), ("b", 1, 3), ("a", 5, 6)])
    clock = FleetClock.from_exposure(exp)
    t = days(T0)[0]
    assert clock.at(t + np.array([-1, 1, 2, 3, 4, 5.5, 10])).tolist() == \
        pytest.approx([0, 1, 3, 4, 4, 4.5, 5])
    assert clock.between(t + 1, t + 2) == pytest.approx(2)
    hosts = HostClocks.from_exposure(exp)
    got = hosts.at(["a", "a", "b", "b", "z"], t + np.array([1.5, 5.5, 0.5, 2.5, 1.0]))
    assert got.tolist() == pytest.approx([1.5, 2.5, 0, 1.5, 0])


def test_clip_drained_stops_exposure() -> None:
    exp = _exp([("a", 0, 2), ("a", 2, 4), ("b", 0, 4)])
    cut = clip_drained(exp, {"a": T0 + pd.Timedelta(days=1)})
    assert cut["host_id"].tolist() == ["a", "b"]
    assert cut["end"].iloc[0] == T0 + pd.Timedelta(days=1)


def test_an_ended_drain_cuts_its_span_and_exposure_resumes() -> None:
    # a drained from day 1 to day 3 (repaired, undrained): the interval across
    # the drain splits around it, b untouched, a's node-time 4 - 2 = 2 days
    exp = _exp([("a", 0, 2), ("a", 2, 4), ("b", 0, 4)])
    day = pd.Timedelta(days=1)
    cut = clip_drained(exp, {}, [("a", T0 + day, T0 + 3 * day)])
    assert list(zip(cut["host_id"], cut["start"], cut["end"], strict=True)) == [
        ("a", T0, T0 + day), ("a", T0 + 3 * day, T0 + 4 * day), ("b", T0, T0 + 4 * day)]
    assert HostClocks.from_exposure(cut).at(["a"], days(pd.Series([T0 + 4 * day]))).tolist() == [
        pytest.approx(2.0)]
    # drained again at day 3.5 and still: both cuts
    again = clip_drained(exp, {"a": T0 + 3.5 * day}, [("a", T0 + day, T0 + 3 * day)])
    assert again[again["host_id"] == "a"]["end"].tolist() == [T0 + day, T0 + 3.5 * day]


def _crashes(rows: list[tuple[str, float, str]], hw: set[int] = frozenset()) -> pd.DataFrame:
    return pd.DataFrame({
        "host_id": [r[0] for r in rows],
        "captured_at": [T0 + pd.Timedelta(days=r[1]) for r in rows],
        "signature": [r[2] for r in rows],
        "hardware_phenotypes": [["sigbus-mce"] if i in hw else [] for i in range(len(rows))]})


def test_new_group_needs_k_crashes_on_m_hosts() -> None:
    p = DetectorParams(window_days=7, new_min_crashes=3, new_min_hosts=2)
    crashes = _crashes([("a", 1, "old"), ("a", 30, "old"), ("a", 31, "x"), ("a", 32, "x"),
                        ("a", 33, "x"), ("b", 34, "x"), ("a", 34, "y"), ("b", 34.5, "y")])
    found = new_groups(crashes, T0 + pd.Timedelta(days=35), p)
    assert [(d.subject["signature"], d.at, d.evidence["crashes"]) for d in found] == [
        ("x", T0 + pd.Timedelta(days=34), 4)]
    assert found[0].key == "new-group|signature=x"
    assert new_groups(crashes, T0 + pd.Timedelta(days=35), p, known={"x"}) == []


def test_new_group_waits_for_a_whole_baseline() -> None:
    # a store two days old: every background group is "new" against an empty baseline (a
    # fresh user's first week paged 11 times); silent until 28 days precede the window
    p = DetectorParams(window_days=7, baseline_days=28, new_min_crashes=3, new_min_hosts=2)
    crashes = _crashes([("a", 31, "x"), ("a", 32, "x"), ("b", 33, "x")])
    hosts = [("a", 28.0, 35.0), ("b", 28.0, 35.0)]  # node-time from day 28 only
    now = T0 + pd.Timedelta(days=35)
    assert baseline_days_covered(crashes, _exp(hosts), now, p) == 0.0
    assert detect(crashes, _exp(hosts), now, p, kinds=["new-group"]) == []
    # the same crashes with the baseline covered (node-time from day 0), or a store older
    # than the frames (known signatures): new
    covered = _exp([("a", 0.0, 35.0), ("b", 0.0, 35.0)])
    assert baseline_days_covered(crashes, covered, now, p) == 28.0
    assert [d.key for d in detect(crashes, covered, now, p, kinds=["new-group"])] == [
        "new-group|signature=x"]
    assert [d.key for d in detect(crashes, _exp(hosts), now, p, kinds=["new-group"],
                                  known_signatures=["old"])] == ["new-group|signature=x"]


def test_detect_takes_the_covered_days_it_is_given() -> None:
    # an evaluation computes baseline_days_covered once (its warming-up note needs it) and
    # hands it to detect, which computed it a second time
    p = DetectorParams(window_days=7, baseline_days=28, new_min_crashes=3, new_min_hosts=2)
    crashes = _crashes([("a", 31, "x"), ("a", 32, "x"), ("b", 33, "x")])
    now = T0 + pd.Timedelta(days=35)
    young, old = _exp([("a", 28.0, 35.0), ("b", 28.0, 35.0)]), _exp([("a", 0.0, 35.0)])
    assert detect(crashes, old, now, p, kinds=["new-group"], covered=0.0) == []
    assert [d.key for d in detect(crashes, young, now, p, kinds=["new-group"],
                                  covered=28.0)] == ["new-group|signature=x"]


def test_rising_detects_tripling_after_its_start_not_before() -> None:
    f = TimelineFleet(hosts=200, days=42, groups=6, rate_range=(8, 8),
                      rises=(Rise(group=2, day=38.0),))
    tl = make_timeline(f, seed=3)
    now = pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=42)
    found = rising_groups(tl.crashes, tl.exposure, now, DetectorParams())
    assert [d.subject["signature"] for d in found] == ["sig_002"]
    delay = (found[0].at - pd.Timestamp(f.start, tz="UTC")).total_seconds() / 86400 - 38
    assert 0 < delay < 3
    assert found[0].evidence["ratio"] > 2


def test_rollout_names_the_kernel_and_the_day() -> None:
    f = TimelineFleet(hosts=300, days=42, groups=6, rate_range=(2, 2),
                      rollouts=(KernelRollout(group=4, day=30, ramp_days=4, factor=5),))
    tl = make_timeline(f, seed=5)
    now = pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=42)
    (ro,) = rollouts(tl.exposure, now, DetectorParams())
    assert (ro.attribute, ro.value) == ("kernel", "6.8.0-45")
    found = rollout_regressions(tl.crashes, tl.exposure, now, DetectorParams())
    assert [d.subject for d in found] == [
        {"signature": "sig_004", "attribute": "kernel", "value": "6.8.0-45"}]
    ev = found[0].evidence
    # planted ×5; hosts switch on days 30-33 (25% of node-time on 10-31, 50% on 11-01)
    assert 2 < ev["lower"] < 5 and ev["reached"] == "2026-11-01"


def test_bad_host_flagged_online_and_null_fleet_quiet() -> None:
    f = TimelineFleet(hosts=300, days=42, groups=10, bad_hosts=(BadHost(host=7, day=20),))
    tl = make_timeline(f, seed=11)
    now = pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=42)
    found = suspect_hosts(tl.crashes, tl.exposure, now, DetectorParams())
    assert [d.subject["host_id"] for d in found] == ["h00007"]
    # Wald's SPRT (A = ln(0.5 / 1e-6) = 13.1 nats): flagged at its third hardware-indicative
    # crash (days 20.9, 25.4, 38.0), the LLR there the first over A
    mine = tl.crashes[(tl.crashes["host_id"] == "h00007")
                      & (tl.crashes["hardware_phenotypes"].str.len() > 0)]
    assert found[0].at == mine["captured_at"].iloc[2]
    assert found[0].evidence["alarm_hardware_crashes"] == 3
    assert found[0].evidence["threshold"] == pytest.approx(np.log(0.5 / 1e-6))
    # with the Pólya urn (host_scatter) the host's own repeats (sig_008 ×2, sig_003 ×2
    # since day 32) count against it: the signature terms sum lower, the same crash tips it
    urn = suspect_hosts(tl.crashes, tl.exposure, now, DetectorParams(host_scatter=True))
    assert [d.at for d in urn] == [mine["captured_at"].iloc[2]]
    assert urn[0].evidence["signature_llr"] == pytest.approx(-3.57, abs=0.01)
    assert found[0].evidence["signature_llr"] == pytest.approx(-1.72, abs=0.01)
    assert found[0].evidence["statistic"] >= found[0].evidence["threshold"]
    null = make_timeline(TimelineFleet(hosts=300, days=42, groups=10), seed=11)
    assert detect(null.crashes, null.exposure, now) == []


def test_a_suspect_hosts_evidence_counts_to_now_not_to_the_tip() -> None:
    # the breaker's alert: tipped weeks ago at its 3rd crash, refreshed while the
    # host kept crashing; each evaluation must state the host's crashes up to it
    f = TimelineFleet(hosts=300, days=60, groups=10, bad_hosts=(BadHost(host=7, day=20),))
    tl = make_timeline(f, seed=11)
    start = pd.Timestamp(f.start, tz="UTC")
    p = DetectorParams()
    seen = []
    for day in (45, 55):
        now = start + pd.Timedelta(days=day)
        (d,) = suspect_hosts(tl.crashes, tl.exposure, now, p)
        since = now - pd.Timedelta(days=p.baseline_days + p.window_days)
        mine = tl.crashes[(tl.crashes["host_id"] == "h00007")
                          & (tl.crashes["captured_at"] >= since)
                          & (tl.crashes["captured_at"] <= now)]
        hw = int((mine["hardware_phenotypes"].str.len() > 0).sum())
        ev = d.evidence
        assert (ev["since"], ev["crashes"], ev["hardware_crashes"]) == (
            since.isoformat(), len(mine), hw)
        assert ev["signatures"] == mine["signature"].nunique()
        assert ev["alarm_crashes"] < ev["crashes"]  # it kept crashing after the tip
        assert ev["expected"] == pytest.approx(ev["rate0"] * ev["node_days"])
        seen.append((ev["crashes"], ev["hardware_crashes"]))
    assert seen[1][0] > seen[0][0] and seen[1][1] >= seen[0][1]


def test_a_suspect_hosts_since_starts_where_its_counts_do() -> None:
    # the demo store's alert: "45 crashes since 2024-04-26 in 30.0 node-days" on a store
    # whose node-time starts on 05-01 — "since" was now − 35 days, before any data
    f = TimelineFleet(hosts=300, days=42, groups=10,
                      bad_hosts=(BadHost(host=7, day=5, rate=0.8),))
    tl = make_timeline(f, seed=11)
    start, p = pd.Timestamp(f.start, tz="UTC"), DetectorParams()
    for day, since in ((30, start), (42, start + pd.Timedelta(days=7))):
        now = start + pd.Timedelta(days=day)
        (d,) = suspect_hosts(tl.crashes, tl.exposure, now, p)
        ev = d.evidence
        assert ev["since"] == since.isoformat(), day
        # the host ran all along: its node-days are the span's, from "since" to now
        assert ev["node_days"] == pytest.approx((now - since) / pd.Timedelta(days=1))
    # a crash before the host's first heartbeat starts the count there
    mine = tl.crashes[tl.crashes["host_id"] == "h00007"]["captured_at"]
    late = tl.exposure.copy()
    late.loc[late["host_id"] == "h00007", "start"] = (mine.min() + pd.Timedelta(days=2)).floor("s")
    (d,) = suspect_hosts(tl.crashes, late, start + pd.Timedelta(days=30), p)
    assert d.evidence["since"] == mine.min().isoformat()


def test_drained_host_clock_stops_at_the_drain() -> None:
    # the host's node-time stops at the drain (day 21): its span from day 7
    # (now - 35 d) holds 14 node-days, against more when it is not drained
    f = TimelineFleet(hosts=100, days=42, groups=4, bad_hosts=(BadHost(host=3, day=20),))
    tl = make_timeline(f, seed=2)
    now = pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=42)
    drained_at = pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=21)
    kinds = ["hardware-suspect-host"]
    (free,) = detect(tl.crashes, tl.exposure, now, kinds=kinds)
    (drained,) = detect(tl.crashes, tl.exposure, now, drained={"h00003": drained_at}, kinds=kinds)
    assert free.subject == drained.subject == {"host_id": "h00003"}
    assert drained.evidence["node_days"] == pytest.approx(14.0)
    assert free.evidence["node_days"] > 14.0


def test_drain_recheck_tells_stopped_from_continuing() -> None:
    # host a made most "x" crashes before the drain at day 10; after it, b keeps
    # its old pace (stopped with a) or triples (continues elsewhere)
    exp = _exp([("a", 0, 20), ("b", 0, 20)])
    before = [("a", d + 0.5, "x") for d in range(10)] + [("b", 2.5, "x"), ("b", 7.5, "x")]
    p = DetectorParams(baseline_days=10)
    drained, now = T0 + pd.Timedelta(days=10), T0 + pd.Timedelta(days=20)
    quiet = _crashes(before + [("b", 15.5, "x")])
    got = drain_recheck(quiet, exp, "a", drained, now, p)
    assert (got["verdict"], got["host_crashes_before"], got["others_crashes_before"],
            got["others_crashes_after"]) == ("stopped-with-host", 10, 2, 1)
    assert got["others_node_days_after"] == pytest.approx(10.0)
    busy = _crashes(before + [("b", 10.5 + d / 2, "x") for d in range(18)])
    assert drain_recheck(busy, exp, "a", drained, now, p)["verdict"] == "continues-elsewhere"


def test_wald_sprt_worked_example_and_bounds() -> None:
    # Wald (1945) eq. 3.2-3.3: A = ln((1-β)/α), B = ln(β/(1-α))
    assert wald_bounds(1e-5, 0.1) == pytest.approx((11.4076, -2.3026), abs=1e-4)
    run = marked_poisson_sprt([1, 2, 2.5], [False, True, True], 0.2, 3, 0.01, 0.5, 1e-3, 0.1)
    assert run.statistic == pytest.approx([0.0155, 4.6262, 9.4368], abs=1e-4)
    assert (run.alarm, run.restarts) == (2, 0)
    # a 29-day quiet gap ends the test at B = -2.3016 and four more after it (each
    # |B| / 0.4 = 5.75 days); the fifth restarted test has lost 0.0765 at the crash
    quiet = marked_poisson_sprt([1, 30], [False, False], 0.2, 3, 0.01, 0.5, 1e-3, 0.1)
    assert (quiet.alarm, quiet.restarts) == (-1, 5)
    assert quiet.statistic[1] == pytest.approx(-0.0765 + np.log(3 * 0.5 / 0.99), abs=1e-3)
    with pytest.raises(ValueError, match="alpha"):
        wald_bounds(0.5, 0.6)
    with pytest.raises(ValueError, match="ratio"):
        marked_poisson_sprt([1], [True], 0.2, 1.0, 0.01, 0.5, 1e-3, 0.1)


def test_host_stratum_sets_the_rate_it_is_judged_against() -> None:
    # two CPU models: the 2 "slow" hosts crash 10x as often as the 18 others; they
    # crash like their stratum (not flagged), though ~7x the rest of the fleet
    rows, crashes = [], []
    for i in range(20):
        model = "slow" if i < 2 else "fast"
        rows.append((f"{model[0]}{i}", 0, 35, model))
        rate = 2.0 if model == "slow" else 0.2
        crashes += [(f"{model[0]}{i}", d + 0.3 * (i % 3), f"sig{i % 4}") for d in
                    np.arange(0, 35, 1 / rate)]
    exp = pd.DataFrame({"host_id": [r[0] for r in rows],
                        "start": [T0 + pd.Timedelta(days=r[1]) for r in rows],
                        "end": [T0 + pd.Timedelta(days=r[2]) for r in rows],
                        "cpu_model": [r[3] for r in rows]})
    c = _crashes(crashes)
    now = T0 + pd.Timedelta(days=35)
    p = DetectorParams(host_alpha=1e-3, host_signatures=False)
    assert suspect_hosts(c, exp, now, p) == []
    flagged = suspect_hosts(c, exp.drop(columns="cpu_model"), now, p)
    assert sorted(d.subject["host_id"] for d in flagged) == ["s0", "s1"]
    assert {d.evidence["stratum"] for d in flagged} == {""}


def test_delay_bound_for_a_tripling_group() -> None:
    # ln(7000) / (2 (3 ln 3 - 2)): 3.41 days at 2/day, so the 1-day goal needs >= 6.8/day
    assert delay_bound_days(2.0, 3.0, 7000) == pytest.approx(3.416, abs=1e-3)
    assert delay_bound_days(6.83, 3.0, 7000) == pytest.approx(1.0, abs=1e-2)
    with pytest.raises(ValueError, match="delay bound"):
        delay_bound_days(2.0, 1.0, 7000)


def test_no_rollout_for_values_present_since_a_store_younger_than_the_window() -> None:
    # 20 days of store against a 35-day span: the span's first days have no node-time,
    # and a kernel held by half the fleet from the first exposed day is no rollout
    rows = [(f"h{i}", 0.0, 20.0) for i in range(4)]
    exposure = _exp(rows).assign(kernel=["6.1.0-13", "6.1.0-13", "6.8.0-45", "6.8.0-45"])
    now = T0 + pd.Timedelta(days=20)
    assert rollouts(exposure, now, DetectorParams()) == []
    # a value that appears later in that store still is one
    late = pd.concat([_exp([(f"h{i}", 0.0, 10.0) for i in range(4)]).assign(kernel="6.1.0-13"),
                      _exp([(f"h{i}", 10.0, 20.0) for i in range(4)]).assign(kernel="6.9.0-1")],
                     ignore_index=True)
    (ro,) = rollouts(late, now, DetectorParams())
    assert (ro.value, ro.reached) == ("6.9.0-1", float(days(T0)[0]) + 10)


def test_new_and_rising_by_phenotype_group() -> None:
    # three signatures, each rare, one new phenotype across them: only the phenotype
    # group reaches k = 3 crashes on m = 2 hosts
    p = DetectorParams(window_days=7, new_min_crashes=3, new_min_hosts=2)
    crashes = _crashes([("a", 1, "s0"), ("a", 30, "s0"), ("a", 31, "s1"), ("b", 32, "s2"),
                        ("c", 33, "s3"), ("a", 34, "s0")])
    crashes["phenotypes"] = [["null-deref"], ["null-deref"], ["stack-overflow"],
                             ["stack-overflow", "abort-with-message"], ["stack-overflow"], []]
    now = T0 + pd.Timedelta(days=35)
    assert new_groups(crashes, now, p) == []
    found = detect(crashes, _exp([("a", 0, 35), ("b", 0, 35), ("c", 0, 35)]), now, p,
                   kinds=["new-group"])
    assert [(d.key, d.at, d.evidence["crashes"], d.evidence["hosts"]) for d in found] == [
        ("new-group|phenotype=stack-overflow", T0 + pd.Timedelta(days=33), 3, 3)]
    off = DetectorParams(window_days=7, new_min_crashes=3, new_min_hosts=2,
                         phenotype_groups=False)
    assert detect(crashes, _exp([("a", 0, 35)]), now, off, kinds=["new-group"]) == []
    # rising: six signatures of one phenotype, each ×3 from day 38 — the phenotype
    # group (6 × the crashes) is found; with the signatures at 2/day each, it is found
    # earlier than any one of them
    f = TimelineFleet(hosts=200, days=42, groups=6, rate_range=(2, 2),
                      rises=tuple(Rise(group=g, day=38.0) for g in range(6)))
    tl = make_timeline(f, seed=3)
    tl.crashes["phenotypes"] = [["null-deref"]] * len(tl.crashes)
    now = pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=42)
    found = rising_groups(phenotype_crashes(tl.crashes), tl.exposure, now, DetectorParams(),
                          by="phenotype")
    assert [d.key for d in found] == ["rising|phenotype=null-deref"]
    sigs = rising_groups(tl.crashes, tl.exposure, now, DetectorParams())
    assert found[0].at < min([d.at for d in sigs], default=now)
    assert 2 < found[0].evidence["ratio"] < 5


def test_polya_concentration_and_signature_llr_hand_computed() -> None:
    host = pd.Series(["a", "a", "b", "b"])
    assert polya_concentration(host, pd.Series(["x", "x", "y", "y"])) == 0.0
    assert polya_concentration(host, pd.Series(["x", "y", "y", "x"])) == 1e6
    # 3 hosts: a "x x", b "x y", c "y y": R = (2 + 0 + 2) / 6 = 2/3, Q = ½ → a = (1/3)/(1/6) = 2
    host3 = pd.Series(["a", "a", "b", "b", "c", "c"])
    sig3 = pd.Series(["x", "x", "x", "y", "y", "y"])
    assert polya_concentration(host3, sig3) == pytest.approx(2.0)
    span = pd.DataFrame({"host_id": host3, "signature": sig3, "t": [1, 2, 1, 2, 1, 2]})
    strata = pd.Series("", index=["a", "b", "c"])
    llr = signature_llr(span, strata, 2.0)
    # host a's 2nd crash (x): the others have x 1, y 3 of 4; K = 2 → q_x = 1.5/5.5;
    # the urn after one x: (2·q_x + 1)/(2 + 1); H1: 1/3
    q_x = 1.5 / 5.5
    assert llr.iloc[1] == pytest.approx(math.log((1 / 3) / ((2 * q_x + 1) / 3)))
    # host b's 2nd crash (y) after an x: the others (a: x x, c: y y) have y 2 of 4 →
    # q_y = 2.5/5.5; the urn 2·q_y/3: ln(5.5/5), a new signature for it is evidence
    assert llr.iloc[3] == pytest.approx(math.log(5.5 / 5))
    # first crashes: the fleet's share alone (q_x for a: the others' x 1 of 4)
    assert llr.iloc[0] == pytest.approx(math.log((1 / 3) / q_x))


def _version_fleet(bad_crashes: int, spread_hosts: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """50 hosts for 40 days; 30 of them (h00..h29) move from app_version 1.0 to
    2.0 on day 20. Group "g": 3 background crashes on 1.0 hosts, ``bad_crashes``
    on h00 after its move, and one crash each on ``spread_hosts`` other 2.0 hosts."""
    exp = []
    for h in range(50):
        if h < 30:
            exp += [(f"h{h:02d}", 0, 20, "1.0"), (f"h{h:02d}", 20, 40, "2.0")]
        else:
            exp.append((f"h{h:02d}", 0, 40, "1.0"))
    exposure = pd.DataFrame({"host_id": [e[0] for e in exp],
                             "start": [T0 + pd.Timedelta(days=e[1]) for e in exp],
                             "end": [T0 + pd.Timedelta(days=e[2]) for e in exp],
                             "app_version": [e[3] for e in exp]})
    rows = [("h40", 5.0), ("h41", 12.0), ("h42", 30.0)]
    rows += [("h00", 21.0 + 0.8 * i) for i in range(bad_crashes)]
    rows += [(f"h{h:02d}", 22.0 + h * 0.5) for h in range(1, 1 + spread_hosts)]
    crashes = pd.DataFrame({"host_id": [r[0] for r in rows],
                            "captured_at": [T0 + pd.Timedelta(days=r[1]) for r in rows],
                            "signature": "g", "phenotypes": [[] for _ in rows]})
    return crashes, exposure


def test_rollout_does_not_blame_a_version_for_one_bad_host() -> None:
    # one host's 20 crashes after it moved to 2.0 are one host's evidence: a bad
    # CPU that happened to get the new version (a fresh user saw "rate ×5.9 on
    # app_version 2.0.0" for the demo's bad-CPU host)
    now = T0 + pd.Timedelta(days=40)
    crashes, exposure = _version_fleet(bad_crashes=20, spread_hosts=0)
    (ro,) = rollouts(exposure, now, DetectorParams())
    assert (ro.attribute, ro.value) == ("app_version", "2.0")
    assert rollout_regressions(crashes, exposure, now, DetectorParams()) == []
    # the same crashes spread over 12 hosts on 2.0 are a regression, counted in hosts
    crashes, exposure = _version_fleet(bad_crashes=0, spread_hosts=12)
    (d,) = rollout_regressions(crashes, exposure, now, DetectorParams())
    assert d.subject == {"signature": "g", "attribute": "app_version", "value": "2.0"}
    ev = d.evidence
    assert (ev["hosts_on_value"], ev["crashes_on_value"]) == (12, 12)
    assert (ev["hosts_elsewhere"], ev["crashes_elsewhere"]) == (3, 3)
