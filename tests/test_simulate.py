"""The simulator's arithmetic, without running any program: scenario
validation, host attributes, exposure and rollout node-hours, the Poisson
crash plan (exact values for a fixed seed) and its determinism."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from coreepi.errors import InputError
from coreepi.simulate import build_plan, bundled_scenario, load_scenario
from coreepi.simulate.exposure import (
    HOUR,
    Interval,
    host_spans,
    node_hours,
    split_at,
    with_changes,
)
from coreepi.simulate.hosts import Host, add_measures, make_hosts
from coreepi.simulate.rollout import upgrade_times, version_at
from coreepi.simulate.sampling import eligible_intervals, poisson_times, stream
from coreepi.simulate.scenario import ExposureSpec, scenario_from_dict

# -- a minimal valid scenario, as a dict, for the validation tests


def minimal(**changes: object) -> dict:
    data: dict = {
        "scenario": {"name": "t", "start": "2024-05-01T00:00:00Z", "days": 10, "hosts": 20},
        "attribute": [
            {"name": "cpu_model", "values": {"A": 1, "B": 1}},
            {
                "name": "kernel",
                "depends_on": "cpu_model",
                "values": {"5.15": 1, "6.1": 1},
                "given": {"A": {"6.1": 1}},
            },
            {"name": "workload", "values": {"kvstore": 1}},
        ],
        "workload": [
            {
                "name": "kvstore",
                "source": "kvstore.c",
                "bugs": ["null-deref-v2", "kernel-ring"],
                "versions": [
                    {"name": "1", "defines": ["APP_VERSION=1"]},
                    {"name": "2", "defines": ["APP_VERSION=2"]},
                ],
            }
        ],
        "rollout": [{"workload": "kvstore", "version": "2", "start_day": 2, "end_day": 6}],
        "disease": [
            {
                "name": "v2",
                "kind": "software",
                "workload": "kvstore",
                "bug": "null-deref-v2",
                "when": {"app_version": "2"},
                "expected_crashes": 10,
            },
            {
                "name": "bad",
                "kind": "hardware",
                "workload": "kvstore",
                "faults": ["rsp-8"],
                "hosts": 1,
                "rate_per_node_day": 1.0,
            },
        ],
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = data
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is None:
            del node[int(last) if last.isdigit() else last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return data


# -- scenario validation


def test_bundled_scenarios_load() -> None:
    for name in ("reference", "reference-small"):
        s = load_scenario(bundled_scenario(name))
        assert s.scenario.name == name
    s = load_scenario(bundled_scenario("reference"))
    assert s.scenario.hosts == 200 and s.scenario.days == 30
    kinds = Counter(d.kind.value for d in s.disease)
    assert kinds["hardware"] == 1 and kinds["software"] == 2 and kinds["environment"] == 1


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"disease__0__workload": "nginx"}, "disease[0].workload: unknown workload 'nginx'"),
        ({"disease__0__bug": "segfault"}, "disease[0].bug: 'segfault' is not a bug of kvstore"),
        ({"disease__0__when": {"colour": "red"}}, "disease[0].when.colour: not a host attribute"),
        (
            {"disease__0__rate_per_node_day": 1.0},
            "disease[0]: give exactly one of rate_per_node_day and expected_crashes",
        ),
        ({"disease__1__faults": []}, "disease[1]: a hardware disease needs 'faults'"),
        ({"disease__1__faults": ["rsp-16"]}, "disease[1].faults[0]: Input should be 'rsp-8'"),
        (
            {"attribute__1__depends_on": "workload"},
            "attribute[1].depends_on: 'workload' is not an earlier attribute",
        ),
        ({"attribute__1__given": {"C": {"6.1": 1}}}, "attribute[1].given.C: not a value of"),
        (
            {"attribute__2": {"name": "workload", "values": {"mysql": 1}}},
            "attribute.workload: value 'mysql' is not a [[workload]]",
        ),
        ({"rollout__0__version": "3"}, "rollout[0].version: not a version of 'kvstore'"),
        ({"rollout__0__end_day": 11}, "rollout[0].end_day: after the end of the window"),
        ({"rollout__0__when": {"colour": "red"}}, "rollout[0].when.colour: not a host attribute"),
        ({"workload__0__source": "nope.c"}, "workload[0].source: no workload source 'nope.c'"),
        ({"scenario__days": -1}, "scenario.days: Input should be greater than 0"),
        ({"scenario__hosts": None}, "scenario.hosts: Field required"),
        ({"scenario__colour": "red"}, "scenario.colour: Extra inputs are not permitted"),
        (
            {"attribute__0__values": {"A": 0}},
            "attribute[0].values.A: Input should be greater than 0",
        ),
    ],
)
def test_validation_errors_name_the_file_and_the_key(changes: dict, message: str) -> None:
    with pytest.raises(InputError) as info:
        scenario_from_dict(minimal(**changes), "fleet.toml")
    text = str(info.value)
    assert text.startswith("fleet.toml: "), text
    assert message in text, text


def test_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[scenario\nname = 1\n")
    with pytest.raises(InputError, match=r"bad\.toml: not TOML"):
        load_scenario(bad)
    with pytest.raises(InputError, match=r"missing\.toml: cannot read"):
        load_scenario(tmp_path / "missing.toml")


# -- hosts


def test_correlated_attribute_follows_its_parent() -> None:
    s = scenario_from_dict(minimal(scenario__hosts=400))
    hosts = make_hosts(s, stream(3, "hosts"))
    assert [h.host_id for h in hosts][:2] == ["h-000", "h-001"]
    for h in hosts:
        if h.attributes["cpu_model"] == "A":
            assert h.attributes["kernel"] == "6.1"  # given A: only 6.1
    b = [h for h in hosts if h.attributes["cpu_model"] == "B"]
    share = sum(h.attributes["kernel"] == "6.1" for h in b) / len(b)
    assert 0.4 < share < 0.6  # B uses the default weights, 1:1


def test_hidden_condition_shows_only_through_its_noisy_measures() -> None:
    data = minimal(scenario__hosts=400)
    data["attribute"].append({"name": "profile", "depends_on": "workload", "hidden": True,
                              "values": {"normal": 1}})
    data["measure"] = [{"name": "exceptions_per_s", "depends_on": "profile", "median": 30.0,
                        "sigma": 0.6, "given": {"normal": {"median": 30.0, "sigma": 0.6}}},
                       {"name": "load", "median": 4.0, "sigma": 0.0}]
    s = scenario_from_dict(data)
    assert "profile" not in s.columns and s.columns[-2:] == ["exceptions_per_s", "load"]
    assert s.measures_of("profile") == ["exceptions_per_s"]
    hosts = make_hosts(s, stream(3, "hosts"))
    measured = add_measures(s, hosts, stream(3, "measures"))
    # the measures come from their own stream: every attribute stays as drawn
    assert all(m.attributes.items() >= h.attributes.items() for h, m in zip(hosts, measured))
    exc = np.array([float(m.attributes["exceptions_per_s"]) for m in measured])
    assert 25 < float(np.median(exc)) < 36 and len(set(exc)) > 100  # noisy, median 30
    assert {m.attributes["load"] for m in measured} == {"4"}  # sigma 0: the median itself


def test_measure_must_depend_on_an_attribute() -> None:
    data = minimal()
    data["measure"] = [{"name": "load", "depends_on": "nope", "median": 1.0}]
    with pytest.raises(InputError, match=r"measure\[0\]\.depends_on"):
        scenario_from_dict(data)


# -- exposure arithmetic


def test_node_hours_are_exact() -> None:
    ivs = [Interval("a", 0, 3 * HOUR), Interval("b", 10, 10 + 90 * 60), Interval("c", 0, 1)]
    assert node_hours(ivs) == (3 * 3600 + 5400 + 1) / 3600
    assert node_hours([]) == 0


def test_split_and_changes_keep_node_hours() -> None:
    iv = Interval("a", 0, 10 * HOUR)
    pieces = split_at(iv, [-5, 0, 2 * HOUR, 2 * HOUR, 7 * HOUR, 10 * HOUR, 11 * HOUR])
    assert [(p.start, p.end) for p in pieces] == [(0, 7200), (7200, 25200), (25200, 36000)]
    changed = with_changes(
        [iv, Interval("b", 0, HOUR)],
        {"a": [(0, "app_version", "1"), (4 * HOUR, "app_version", "2")]},
    )
    assert [(c.host_id, c.start, c.end, dict(c.overrides)) for c in changed] == [
        ("a", 0, 4 * HOUR, {"app_version": "1"}),
        ("a", 4 * HOUR, 10 * HOUR, {"app_version": "2"}),
        ("b", 0, HOUR, {}),
    ]
    assert node_hours(changed) == 11.0


def test_host_spans_full_window_and_reboots() -> None:
    hosts = [Host(f"h-{i}", {"workload": "w"}) for i in range(50)]
    day = 86_400
    full = host_spans(hosts, 0, 30 * day, ExposureSpec(), stream(1, "x"))
    assert len(full) == 50 and node_hours(full) == 50 * 30 * 24
    spec = ExposureSpec(
        reboots_per_day=0.1, reboot_hours=0.5, late_join_fraction=0.2, early_leave_fraction=0.2
    )
    spans = host_spans(hosts, 0, 30 * day, spec, stream(1, "x"))
    assert node_hours(spans) < 50 * 30 * 24
    by_host: dict[str, list[Interval]] = {}
    for iv in spans:
        assert 0 <= iv.start < iv.end <= 30 * day
        by_host.setdefault(iv.host_id, []).append(iv)
    for ivs in by_host.values():  # sorted, disjoint, gaps of at least one reboot
        for a, b in pairwise(ivs):
            assert b.start - a.end >= 1800
    # the same seed, the same spans
    assert spans == host_spans(hosts, 0, 30 * day, spec, stream(1, "x"))


# -- rollout


def test_rollout_times_and_versions() -> None:
    s = scenario_from_dict(minimal(scenario__hosts=100))
    hosts = make_hosts(s, stream(1, "hosts"))
    start = int(s.scenario.start.timestamp())
    changes = upgrade_times(s, hosts, start, stream(1, "rollout"))
    assert len(changes) == 100  # fraction 1: every kvstore host
    for host_changes in changes.values():
        ((t, name, value),) = host_changes
        assert name == "app_version" and value == "2"
        assert start + 2 * 86_400 <= t <= start + 6 * 86_400
        assert version_at("1", host_changes, t - 1) == "1"
        assert version_at("1", host_changes, t) == "2"


def test_rollout_when_limits_it_to_matching_hosts() -> None:
    """A rollout with ``when`` moves only hosts whose attributes match (one hardware
    generation first); without ``when`` the draws are the same as before."""
    s = scenario_from_dict(minimal(scenario__hosts=100, rollout__0__when={"cpu_model": "A"}))
    hosts = make_hosts(s, stream(1, "hosts"))
    start = int(s.scenario.start.timestamp())
    changes = upgrade_times(s, hosts, start, stream(1, "rollout"))
    on_a = {h.host_id for h in hosts if h.attributes["cpu_model"] == "A"}
    assert 0 < len(on_a) < 100
    assert set(changes) == on_a
    plain = scenario_from_dict(minimal(scenario__hosts=100))
    assert upgrade_times(plain, hosts, start, stream(1, "rollout")) == upgrade_times(
        s.model_copy(update={"rollout": [r.model_copy(update={"when": {}}) for r in s.rollout]}),
        hosts, start, stream(1, "rollout"))


def test_plan_exposure_splits_at_upgrades_and_keeps_node_hours() -> None:
    s = scenario_from_dict(minimal())
    fp = build_plan(s, 5)
    assert node_hours(fp.intervals) == 20 * 10 * 24  # no joins, leaves or reboots
    v2 = [iv for iv in fp.intervals if iv.overrides["app_version"] == "2"]
    v1 = [iv for iv in fp.intervals if iv.overrides["app_version"] == "1"]
    assert len(v1) == len(v2) == 20
    # the v2 share of exposure: upgrades uniform over days 2..6 of 10 -> 6/10 expected
    share = node_hours(v2) / node_hours(fp.intervals)
    assert 0.5 < share < 0.7


# -- sampling


def test_poisson_counts_exact_for_a_fixed_seed() -> None:
    ivs = [Interval(f"h-{i}", 0, 100 * HOUR) for i in range(10)]
    events = poisson_times(ivs, 0.05, stream(42, "test"))  # expectation 50
    assert len(events) == 63
    assert events[0][1] == 42422 and events[0][0].host_id == "h-0"
    for iv, t in events:
        assert iv.start <= t < iv.end
    # over seeds: mean and variance of a Poisson(50)
    counts = [len(poisson_times(ivs, 0.05, stream(s, "test"))) for s in range(400)]
    assert abs(np.mean(counts) - 50) < 1.5
    assert 35 < np.var(counts) < 65


def test_plan_rates_and_eligibility() -> None:
    s = scenario_from_dict(minimal())
    fp = build_plan(s, 7)
    v2, bad = fp.plan.diseases
    # expected_crashes = 10 over the v2 exposure
    assert v2.expected_crashes == pytest.approx(10.0)
    assert all(c.version == "2" and c.argv == ("null-deref-v2", "30") for c in v2.crashes)
    by_id = {h.host_id: h for h in fp.hosts}
    assert v2.eligible_node_hours == node_hours(
        eligible_intervals(fp.intervals, by_id, "kvstore", {"app_version": "2"})
    )
    # hardware: one host, all its exposure, 1 per node-day
    assert len(bad.host_ids) == 1 and bad.eligible_node_hours == 240.0
    assert bad.expected_crashes == pytest.approx(10.0)
    assert {c.host_id for c in bad.crashes} <= set(bad.host_ids)
    assert all(c.faults and c.argv == ("none", "4") for c in bad.crashes)
    # crash names follow time order
    times = [c.time for c in fp.plan.crashes]
    assert times == sorted(times)
    assert [c.name for c in fp.plan.crashes][:2] == ["crash-00001", "crash-00002"]


def test_plan_is_deterministic_and_streams_are_independent() -> None:
    s = scenario_from_dict(minimal())
    a, b = build_plan(s, 11), build_plan(s, 11)
    assert a.plan.crashes == b.plan.crashes and a.intervals == b.intervals
    assert build_plan(s, 12).plan.crashes != a.plan.crashes
    # removing one disease does not move the other's crashes
    only_bad = scenario_from_dict(minimal(disease__0=None))
    c = build_plan(only_bad, 11)
    key = [(x.host_id, x.time, x.faults) for x in a.plan.diseases[1].crashes]
    assert [(x.host_id, x.time, x.faults) for x in c.plan.diseases[0].crashes] == key


def test_reference_plan_size() -> None:
    s = load_scenario(bundled_scenario("reference"))
    fp = build_plan(s, 1)
    expected = sum(dp.expected_crashes for dp in fp.plan.diseases)
    assert expected == pytest.approx(295)
    assert 250 <= len(fp.plan.crashes) <= 340
    (bad,) = [dp for dp in fp.plan.diseases if dp.disease.kind.value == "hardware"]
    assert len(bad.host_ids) == 1
    mce = [e for e in fp.plan.telemetry if e["planted_by"] == "bad-cpu-rsp"]
    assert mce and {e["host_id"] for e in mce} == set(bad.host_ids)
