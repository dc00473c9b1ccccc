"""No verdict without a denominator: in a window whose rates are undetermined (no
exposure, or too little of it: ``rates_undetermined_reason``), every group is
``undetermined`` by rule ``exposure-too-thin`` with the window's exposure as its deciding
evidence (kind ``window-exposure``), and no host is judged on a rate the window cannot
give. Before, a fleet with no exposure at all called "7 crashes on 7 hosts" ``software``
by ``fleet-spread``.
"""

from __future__ import annotations

import pandas as pd
import pytest

from coreepi.epi import EpiConfig, analyze_fleet
from coreepi.epi.attribution import attribute_group, attribute_host
from coreepi.epi.facts import AssociationFacts, GroupFacts, HostFacts, HostSigns, WindowExposure
from coreepi.epi.models import Evidence, FleetFindings
from coreepi.reporting.phrases import evidence_text

T0 = pd.Timestamp("2024-01-01", tz="UTC")
HOSTS = [f"h{i}" for i in range(7)]


def d(days: float) -> pd.Timestamp:
    # microseconds, the resolution of T0: crashes and intervals of mixed resolutions stop
    # the engine's interval join (pandas MergeError; reported, outside this test's subject)
    return (T0 + pd.Timedelta(days=days)).as_unit("us")


def _exposure(hosts: list[str], days: float) -> pd.DataFrame:
    return pd.DataFrame({
        "host_id": hosts, "start": [d(0)] * len(hosts), "end": [d(days)] * len(hosts),
        "kernel": ["5.15"] * len(hosts),
    })  # fmt: skip


def _crashes(rows: list[tuple[str, float]]) -> pd.DataFrame:
    return pd.DataFrame({
        "crash_id": [f"c{i}" for i in range(len(rows))],
        "host_id": [h for h, _ in rows],
        "captured_at": [d(t) for _, t in rows],
        "kernel": ["5.15"] * len(rows),
        "signature": ["sig_0"] * len(rows),
        "phenotypes": [["null-deref"] for _ in rows],
        "hardware_phenotypes": [[] for _ in rows],
    })  # fmt: skip


def _window_evidence(f: FleetFindings) -> list[Evidence]:
    """The deciding evidence of every group, each checked to be undetermined by the rule."""
    assert f.groups
    out = []
    for g in f.groups:
        a = g.attribution
        assert (a.verdict, a.rule) == ("undetermined", "exposure-too-thin"), (g.key, a.rule)
        assert a.evidence[0].kind == "window-exposure"
        # nothing divided by the window's node-time is cited as evidence
        assert not {e.kind for e in a.evidence} & {"rate-ratio", "host-concentration", "sir",
                                                   "fleet-spread"}
        out.append(a.evidence[0])
    return out


def test_fleet_without_exposure_has_no_group_verdict() -> None:
    # seven crashes of one signature on seven hosts, and no node-time at all: before,
    # "software" by fleet-spread
    crashes = _crashes([(h, 1.0 + i) for i, h in enumerate(HOSTS)])
    f = analyze_fleet(crashes, _exposure(HOSTS, 0.0).iloc[0:0], since=d(0), until=d(10))
    assert f.window.rates_undetermined_reason == "no-exposure"
    [sig] = [g for g in f.groups if g.kind == "signature"]
    assert (sig.key, sig.crashes, sig.hosts) == ("sig_0", 7, 7)
    for e in _window_evidence(f):
        assert (e.note, e.node_days, e.hosts, e.hosts_with_crashes, e.threshold) == (
            "no-exposure", 0.0, 0, 7, 1.0)
        assert evidence_text(e) == ("no exposure data in this window: a verdict needs "
                                    "node-time (exposure.csv or agent heartbeats)")
    # a host with no node-time of its own was undetermined already, by its own rule
    assert f.hosts
    assert {(h.attribution.verdict, h.attribution.rule) for h in f.hosts} == {
        ("undetermined", "insufficient-exposure")}


def test_thin_exposure_has_no_group_verdict() -> None:
    # 0.01 node-days over the seven crashing hosts, every crash inside it
    days = 0.01 / len(HOSTS)
    crashes = _crashes([(h, days / 2) for h in HOSTS])
    f = analyze_fleet(crashes, _exposure(HOSTS, days))
    assert f.window.node_days == pytest.approx(0.01)
    assert f.window.rates_undetermined_reason == "thin-exposure"
    for e in _window_evidence(f):
        assert e.note == "thin-exposure"
        assert (e.hosts, e.hosts_with_crashes, e.threshold) == (7, 7, 1.0)
        assert evidence_text(e) == ("exposure too thin for a verdict: 0.01 node-days from 7 "
                                    "hosts (at least 1 node-day is needed)")
    assert {h.attribution.rule for h in f.hosts} == {"insufficient-exposure"}


def test_more_crashing_hosts_than_observed_is_thin_for_groups_and_observed_hosts() -> None:
    # h0 and h1 observed 20 days each (40 node-days, over the minimum); h0 crashes 8
    # times, five unobserved hosts once each: the fleet's rate, hence h0's expectation,
    # rests on 2 of the 7 crashing hosts
    rows = [("h0", 1.0 + i) for i in range(8)] + [(h, 2.0) for h in HOSTS[2:]]
    f = analyze_fleet(_crashes(rows), _exposure(HOSTS[:2], 20.0), since=d(0), until=d(20))
    assert f.window.rates_undetermined_reason == "thin-exposure"
    for e in _window_evidence(f):
        assert (e.node_days, e.hosts, e.hosts_with_crashes) == (pytest.approx(40.0), 2, 6)
        assert evidence_text(e) == ("exposure too thin for a verdict: 40.0 node-days from 2 "
                                    "hosts (6 hosts have crashes: each needs node-time)")
    by_host = {h.host_id: h.attribution for h in f.hosts}
    # h0 has node-time of its own: the window's rule decides, and no SIR is cited
    assert (by_host["h0"].verdict, by_host["h0"].rule) == ("undetermined", "exposure-too-thin")
    assert by_host["h0"].evidence[0].kind == "window-exposure"
    assert "sir" not in {e.kind for e in by_host["h0"].evidence}
    assert by_host["h2"].rule == "insufficient-exposure"


def test_observed_fleet_keeps_its_verdict() -> None:
    # the same seven crashes with 10 node-days per host: rates mean something, the
    # group is the software bug it was
    crashes = _crashes([(h, 1.0 + i) for i, h in enumerate(HOSTS)])
    f = analyze_fleet(crashes, _exposure(HOSTS, 10.0), since=d(0), until=d(10))
    assert f.window.rates_undetermined_reason is None
    [sig] = [g for g in f.groups if g.kind == "signature"]
    assert (sig.attribution.verdict, sig.attribution.rule) == ("software", "fleet-spread")
    assert "window-exposure" not in {e.kind for g in f.groups for e in g.attribution.evidence}


def test_too_few_crashes_is_judged_before_the_window() -> None:
    # a group too small to judge says so whatever the exposure (the rule before)
    f = analyze_fleet(_crashes([("h0", 1.0), ("h1", 2.0)]), _exposure(HOSTS, 0.0).iloc[0:0],
                      since=d(0), until=d(10))
    assert {g.attribution.rule for g in f.groups} == {"too-few-crashes"}


@pytest.mark.parametrize(("minimum", "rule"), [(1.0, "exposure-too-thin"),
                                               (0.005, "fleet-spread")])
def test_the_window_minimum_is_min_rate_node_days(minimum: float, rule: str) -> None:
    days = 0.01 / len(HOSTS)
    crashes = _crashes([(h, days / 2) for h in HOSTS])
    f = analyze_fleet(crashes, _exposure(HOSTS, days),
                      config=EpiConfig(min_rate_node_days=minimum))
    [sig] = [g for g in f.groups if g.kind == "signature"]
    assert sig.attribution.rule == rule


# --- the rules on their own facts ----------------------------------------------------------


@pytest.mark.parametrize(("node_days", "hosts", "with_crashes", "reason"), [
    (0.0, 0, 3, "no-exposure"), (0.99, 5, 5, "thin-exposure"), (1.0, 5, 5, None),
    (10.0, 2, 3, "thin-exposure"), (10.0, 3, 3, None)])
def test_window_exposure_reason(node_days: float, hosts: int, with_crashes: int,
                                reason: str | None) -> None:
    w = WindowExposure(node_days=node_days, hosts=hosts, hosts_with_crashes=with_crashes)
    assert w.rates_undetermined(EpiConfig()) == reason


def _stepping_group(exposure: WindowExposure | None) -> GroupFacts:
    """A bad CPU stepping's group: hardware-suspect by its phenotypes and its CPU model."""
    a = AssociationFacts(attribute="cpu_model", attribute_class="hardware", value="Xeon 6338",
                         crashes=20, share_of_group=1.0, irr=None, irr_status="unbounded",
                         irr_lower=8.0, irr_upper=None, p_value=3e-9, q_value=3e-8)
    return GroupFacts(
        kind="signature", key="stack-misaligned | kvstore", crashes=20, hosts=8,
        hardware_phenotype_crashes=20, hardware_phenotypes=(("stack-misaligned", 20),),
        top_host="h-100", top_host_crashes=5, top_host_expected=0.1, top_host_p=8e-8,
        top_host_signs=None, associations=(a,), exposure=exposure,
    )


def test_thin_window_outranks_a_hardware_association() -> None:
    assert attribute_group(_stepping_group(None), EpiConfig()).verdict == "hardware-suspect"
    thin = WindowExposure(node_days=0.5, hosts=8, hosts_with_crashes=8)
    att = attribute_group(_stepping_group(thin), EpiConfig())
    assert (att.verdict, att.rule) == ("undetermined", "exposure-too-thin")
    # the phenotype counts stand (no denominator); the rate ratio does not
    assert [e.kind for e in att.evidence] == ["window-exposure", "hardware-phenotypes"]


def _bad_host() -> HostSigns:
    """A host with a 50-fold excess and its crashes all hardware-indicative."""
    return HostSigns(
        host_id="h-7", crashes=10, expected=0.2, sir=50.0, sir_status="finite",
        sir_lower=24.0, sir_upper=92.0, p_value=1e-14, distinct_signatures=1,
        expected_distinct=1.0, private_signatures=0, hardware_phenotype_crashes=10,
        hardware_phenotypes=(("sigbus-mce", 10),), hardware_events=0,
        crashes_after_hardware_event=0, telemetry_kinds=(), telemetry_example=None,
        telemetry_days=7.0, node_days=20.0,
    )


def test_thin_window_keeps_an_observed_host_from_a_verdict() -> None:
    sound = WindowExposure(node_days=200.0, hosts=10, hosts_with_crashes=10)
    att = attribute_host(HostFacts(_bad_host(), (), exposure=sound), EpiConfig())
    assert (att.verdict, att.rule) == ("hardware-suspect", "excess-with-hardware-signs")
    # its 20 node-days are most of the window's: the other crashing hosts are unobserved
    thin = WindowExposure(node_days=20.0, hosts=1, hosts_with_crashes=6)
    att = attribute_host(HostFacts(_bad_host(), (), exposure=thin), EpiConfig())
    assert (att.verdict, att.rule) == ("undetermined", "exposure-too-thin")
    assert att.evidence[0].kind == "window-exposure"
    assert "sir" not in {e.kind for e in att.evidence}
    assert "hardware-phenotypes" in {e.kind for e in att.evidence}
