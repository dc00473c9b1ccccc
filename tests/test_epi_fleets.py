"""Synthetic fleets with known answers: analyze_fleet must find each disease and its cause.

The fleet (200 hosts, 60 days, fixed seed) carries five diseases at once:

* a fleet-wide software bug (return-to-null in the unwinder) at 0.01/node-day → software;
* a bug only kernel 6.1 wakes (0.02/node-day on 6.1 hosts, none elsewhere) → environment-triggered;
* a bug only high load wakes (load1 ≥ 14) → software, with the load stratum as evidence;
* host h-017 with a bad CPU: 14 crashes in 14 unrelated places (11 stack-misaligned) plus
  6 in memmove, machine checks before them → hardware-suspect host and groups;
* host h-042 running a job that hits the fleet-wide bug 40 times as often: excess
  crashes, but one signature and no hardware sign → software, not hardware-suspect;
* a tiny group, 2 crashes on 2 hosts → undetermined.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from coreepi.epi import EpiConfig, FleetFindings, GroupFinding, analyze_fleet
from coreepi.reporting.phrases import evidence_text

T0 = pd.Timestamp("2024-01-01", tz="UTC")
DAYS = 60


def make_fleet(
    seed: int = 20240101, n_hosts: int = 200
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    hosts = pd.DataFrame(
        {
            "host_id": [f"h-{i:03d}" for i in range(n_hosts)],
            "cpu_model": rng.choice(["EPYC-7763", "Xeon-8380"], n_hosts),
            "kernel": rng.choice(["5.15.0", "6.1.0"], n_hosts, p=[0.7, 0.3]),
            "zone": rng.choice(["z1", "z2", "z3", "z4"], n_hosts),
        }
    )
    # 4 intervals of 15 days per host, each with its own load average
    rows = []
    for q in range(4):
        iv = hosts.copy()
        iv["start"] = T0 + pd.Timedelta(days=15 * q)
        iv["end"] = T0 + pd.Timedelta(days=15 * (q + 1))
        iv["load1"] = rng.gamma(4.0, 2.0, n_hosts).round(2)
        rows.append(iv)
    exposure = pd.concat(rows, ignore_index=True)
    crashes = []

    def emit(mask, rate_per_day, sig_fn, phen_fn=lambda i: [], hw_fn=lambda i: []):
        sub = exposure.loc[mask]
        days = (sub["end"] - sub["start"]).dt.total_seconds() / 86400
        k = rng.poisson(rate_per_day * days.to_numpy())
        idx = np.repeat(np.arange(len(sub)), k)
        for j, i in enumerate(idx):
            r = sub.iloc[i]
            t = r["start"] + (r["end"] - r["start"]) * rng.uniform()
            crashes.append(
                {
                    "host_id": r["host_id"],
                    "captured_at": t,
                    "signature": sig_fn(j),
                    "phenotypes": phen_fn(j),
                    "hardware_phenotypes": hw_fn(j),
                }
            )

    everyone = np.ones(len(exposure), bool)
    # fleet-wide software bug: return-to-null in the unwinder
    emit(
        everyone,
        0.01,
        lambda j: "_Unwind_RaiseException | __cxa_throw",
        lambda j: ["return-to-null"],
    )
    # kernel-triggered bug: only on 6.1
    emit(
        (exposure["kernel"] == "6.1.0").to_numpy(),
        0.02,
        lambda j: "io_uring_submit | Ring::flush",
        lambda j: ["null-deref"],
    )
    # load-triggered bug: only under high load
    emit(
        (exposure["load1"] >= 14).to_numpy(),
        0.03,
        lambda j: "Pool::grow | Arena::alloc",
        lambda j: ["abort-with-message"],
    )
    # busy host h-042: a job that hits the fleet-wide bug 40 times as often (software)
    emit(
        (exposure["host_id"] == "h-042").to_numpy(),
        0.4,
        lambda j: "_Unwind_RaiseException | __cxa_throw",
        lambda j: ["return-to-null"],
    )
    # tiny group
    crashes.append(
        {
            "host_id": "h-005",
            "captured_at": T0 + pd.Timedelta(days=3),
            "signature": "Rare::thing",
            "phenotypes": ["null-deref"],
            "hardware_phenotypes": [],
        }
    )
    crashes.append(
        {
            "host_id": "h-090",
            "captured_at": T0 + pd.Timedelta(days=33),
            "signature": "Rare::thing",
            "phenotypes": ["null-deref"],
            "hardware_phenotypes": [],
        }
    )
    # bad host h-017: CPU computes wrongly; 14 crashes in unrelated places + 6 in memcpy
    bad = "h-017"
    for j in range(14):
        crashes.append(
            {
                "host_id": bad,
                "captured_at": T0 + pd.Timedelta(days=20 + 2 * j, hours=3),
                "signature": f"Random{j}::method{j}",
                "phenotypes": ["stack-misaligned", "return-to-bogus"]
                if j < 11
                else ["wild-pointer"],
                "hardware_phenotypes": ["stack-misaligned"] if j < 11 else [],
            }
        )
    for j in range(6):
        crashes.append(
            {
                "host_id": bad,
                "captured_at": T0 + pd.Timedelta(days=21 + 3 * j),
                "signature": "__memmove_avx_unaligned_erms",
                "phenotypes": ["stack-misaligned"],
                "hardware_phenotypes": ["stack-misaligned"],
            }
        )
    cr = pd.DataFrame(crashes)
    cr.insert(0, "crash_id", [f"c{i:05d}" for i in range(len(cr))])
    cr["app_version"] = "2.3.1"
    tel = pd.DataFrame(
        [
            {
                "host_id": bad,
                "ts": T0 + pd.Timedelta(days=19),
                "kind": "mce",
                "hardware_indicative": True,
                "summary": "mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 5: be00000000800400",
            },
            {
                "host_id": bad,
                "ts": T0 + pd.Timedelta(days=30),
                "kind": "mce",
                "hardware_indicative": True,
                "summary": "mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 5: be00000000800400",
            },
            {
                "host_id": "h-100",
                "ts": T0 + pd.Timedelta(days=2),
                "kind": "edac_ce",
                "hardware_indicative": True,
                "summary": "EDAC MC0: 1 CE memory read error on DIMM_A1",
            },
            {
                "host_id": "h-101",
                "ts": T0 + pd.Timedelta(days=2),
                "kind": "other",
                "hardware_indicative": False,
                "summary": "something",
            },
        ]
    )
    return cr, exposure, tel


@pytest.fixture(scope="module")
def fleet() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return make_fleet()


@pytest.fixture(scope="module")
def findings(fleet: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> FleetFindings:
    crashes, exposure, telemetry = fleet
    return analyze_fleet(crashes, exposure, telemetry)


def group(f: FleetFindings, kind: str, key: str) -> GroupFinding:
    return next(g for g in f.groups if g.kind == kind and g.key == key)


def test_window_and_denominators(findings: FleetFindings, fleet) -> None:  # type: ignore[no-untyped-def]
    crashes, _exposure, _ = fleet
    w = findings.window
    assert w.node_days == pytest.approx(200 * 60)
    assert w.crashes == len(crashes) and w.crashes_outside_exposure == 0
    assert w.rate == pytest.approx(len(crashes) / 12000 * 1000)
    assert w.since == T0.to_pydatetime() and w.until == (T0 + pd.Timedelta(days=60)).to_pydatetime()
    assert (
        "attribute(s) only on crashes, without exposure, not tested: app_version" in findings.notes
    )


def test_fleet_wide_bug_is_software(findings: FleetFindings, fleet) -> None:  # type: ignore[no-untyped-def]
    crashes, _, _ = fleet
    g = group(findings, "signature", "_Unwind_RaiseException | __cxa_throw")
    n = int((crashes["signature"] == g.key).sum())
    assert g.crashes == n and g.hosts > 50
    assert g.rate == pytest.approx(n / 12000 * 1000)
    assert g.rate_lower < 10.0 < g.rate_upper  # type: ignore[operator]  # true rate: 0.01/node-day
    assert g.attribution.verdict == "software" and g.attribution.rule == "fleet-spread"
    assert g.concentration.top_host == "h-042" and g.concentration.top_host_share < 0.3  # type: ignore[operator]
    assert not any(
        a.q_value is not None and a.q_value <= 0.05 and a.irr is not None and a.irr >= 2
        for a in g.associations
    )


def test_kernel_triggered_bug_is_environment_triggered(findings: FleetFindings, fleet) -> None:  # type: ignore[no-untyped-def]
    _crashes, exposure, _ = fleet
    g = group(findings, "signature", "io_uring_submit | Ring::flush")
    assert g.attribution.verdict == "environment-triggered"
    assert g.attribution.rule == "environment-association"
    k61 = next(a for a in g.associations if (a.attribute, a.value) == ("kernel", "6.1.0"))
    nd61 = float(
        ((exposure["end"] - exposure["start"]).dt.total_seconds() / 86400)[
            exposure["kernel"] == "6.1.0"
        ].sum()
    )
    assert k61.crashes == g.crashes and k61.rest_crashes == 0 and k61.share_of_group == 1.0
    assert k61.node_days == pytest.approx(nd61)
    assert k61.irr is None and k61.irr_upper is None  # unbounded: no crash on other kernels
    assert k61.irr_lower is not None and k61.irr_lower > 10
    assert k61.q_value is not None and k61.q_value < 1e-20
    # no other attribute is associated with the group: nothing to adjust for, no GLM
    assert k61.adjusted_irr is None and k61.adjusted_for == []
    lead = g.attribution.evidence[0]
    assert lead.supports == "environment-triggered"
    assert evidence_text(lead).startswith(
        "100% of its crashes with a known kernel have kernel=6.1.0")


def test_load_triggered_bug_names_the_high_load_stratum(findings: FleetFindings) -> None:
    g = group(findings, "signature", "Pool::grow | Arena::alloc")
    assert g.attribution.verdict == "software"
    load = next(a for a in findings.attributes if a.name == "load1")
    assert load.kind == "strata" and len(load.edges) == 3
    top_stratum = load.levels[-1]
    assert top_stratum.startswith("≥") and float(top_stratum[1:]) <= 14  # the bug starts at 14
    a = next(a for a in g.associations if a.attribute == "load1" and a.value == top_stratum)
    assert a.crashes == g.crashes and a.q_value is not None and a.q_value < 1e-10
    assert any(evidence_text(e).startswith(f"load1={top_stratum}:") for e in g.attribution.evidence)


def test_bad_host_is_hardware_suspect(findings: FleetFindings) -> None:
    h = findings.hosts[0]
    assert h.host_id == "h-017"
    assert h.attribution.verdict == "hardware-suspect"
    assert h.attribution.rule == "excess-with-hardware-signs"
    # its own 20 crashes plus whatever the fleet-wide bugs gave it
    assert h.crashes >= 20 and h.sir is not None and h.sir > 10
    assert h.p_value is not None and h.p_value < 1e-10
    assert h.private_signatures >= 15  # 14 random ones and memmove
    assert h.distinct_signatures > 2 * h.expected_distinct_signatures
    assert {p.name: p.crashes for p in h.hardware_phenotypes} == {"stack-misaligned": 17}
    assert h.telemetry is not None and h.telemetry.by_kind == {"mce": 2}
    assert h.telemetry.crashes_after_hardware_event > 0
    kinds = [e.kind for e in h.attribution.evidence]
    assert kinds[0] == "sir"
    assert {"private-signatures", "hardware-phenotypes", "telemetry", "diversity"} <= set(kinds)
    text = evidence_text(h.attribution.evidence[0])
    assert re.match(r"host h-017: \d+ crashes where [\d.]+ expected \(SIR [\d.]+, 95% CI", text)
    # no other host is hardware-suspect
    assert [x.host_id for x in findings.hosts if x.attribution.verdict == "hardware-suspect"] == [
        "h-017"
    ]


def test_bad_host_groups_are_hardware_suspect(findings: FleetFindings) -> None:
    g = group(findings, "signature", "__memmove_avx_unaligned_erms")
    assert g.attribution.verdict == "hardware-suspect"
    assert g.attribution.rule == "one-host-with-hardware-signs"
    assert g.concentration.top_host == "h-017" and g.concentration.top_host_share == 1.0
    assert evidence_text(g.attribution.evidence[0]).startswith(
        "6 of 6 crashes on host h-017, expected 0.0")
    sm = group(findings, "phenotype", "stack-misaligned")
    assert sm.attribution.verdict == "hardware-suspect" and sm.crashes == 17
    assert evidence_text(sm.attribution.evidence[0]).startswith("17 of 17 crashes on host h-017")
    assert "p < 1e-20" in evidence_text(sm.attribution.evidence[0])


def test_busy_host_with_one_software_bug_is_not_hardware(findings: FleetFindings) -> None:
    h = next(x for x in findings.hosts if x.host_id == "h-042")
    assert h.sir is not None and h.sir > 5 and h.p_value is not None and h.p_value < 1e-6
    assert h.attribution.verdict == "software"
    assert h.attribution.rule == "majority-of-groups"
    assert h.private_signatures == 0
    assert h.distinct_signatures < 1.5 * h.expected_distinct_signatures


def test_tiny_group_is_undetermined(findings: FleetFindings) -> None:
    g = group(findings, "signature", "Rare::thing")
    assert g.crashes == 2 and g.attribution.verdict == "undetermined"
    assert g.attribution.rule == "too-few-crashes"
    assert evidence_text(g.attribution.evidence[0]) == (
        "only 2 crashes on 2 hosts; at least 5 are needed")


def test_q_values_cover_every_test_of_the_window(findings: FleetFindings) -> None:
    # 4 attributes: cpu_model (2 values: 1 test), kernel (1 test), zone (4), load1 (4) = 10
    # tests per group with a crash of known value.
    n_groups = len(findings.groups)
    assert findings.window.tests == 10 * n_groups


def test_thresholds_are_configuration(fleet) -> None:  # type: ignore[no-untyped-def]
    crashes, exposure, telemetry = fleet
    strict = analyze_fleet(crashes, exposure, telemetry, config=EpiConfig(min_group_crashes=1000))
    assert {g.attribution.verdict for g in strict.groups} == {"undetermined"}
    assert strict.config["min_group_crashes"] == 1000


def test_window_restricts_crashes_and_exposure(fleet) -> None:  # type: ignore[no-untyped-def]
    crashes, exposure, telemetry = fleet
    f = analyze_fleet(crashes, exposure, telemetry, since="2024-01-01", until="2024-01-16")
    assert f.window.node_days == pytest.approx(200 * 15)
    in_window = crashes["captured_at"] < T0 + pd.Timedelta(days=15)
    assert f.window.crashes == int(in_window.sum())
    assert all(g.key != "__memmove_avx_unaligned_erms" for g in f.groups)  # starts on day 21


def test_json_is_stable_and_documented(findings: FleetFindings) -> None:
    data = json.loads(findings.model_dump_json())
    assert set(data) == {
        "schema_version",
        "window",
        "attributes",
        "groups",
        "hosts",
        "config",
        "notes",
    }
    # unbounded ratios are null, never Infinity
    assert "Infinity" not in findings.model_dump_json() and "NaN" not in findings.model_dump_json()
    assert FleetFindings.model_validate_json(findings.model_dump_json()) == findings
    doc = (Path(__file__).resolve().parents[1] / "docs" / "epidemiology.md").read_text()
    from coreepi.epi import models

    for name in models.__all__:
        cls = getattr(models, name)
        fields = getattr(cls, "model_fields", None)
        if not fields:
            continue
        for key in fields:
            assert f"`{key}`" in doc, f"{name}.{key} is not documented in docs/epidemiology.md"
    from dataclasses import fields as dc_fields

    for f in dc_fields(EpiConfig):
        assert f"`{f.name}`" in doc, f"EpiConfig.{f.name} is not documented"


def test_missing_column_is_a_clear_error(fleet) -> None:  # type: ignore[no-untyped-def]
    crashes, exposure, _ = fleet
    with pytest.raises(ValueError, match="crashes: missing column 'signature'"):
        analyze_fleet(crashes.drop(columns=["signature"]), exposure)
    with pytest.raises(ValueError, match="telemetry: missing column 'kind'"):
        analyze_fleet(crashes, exposure, pd.DataFrame({"host_id": [], "ts": []}))


def test_crash_outside_exposure_is_counted(fleet) -> None:  # type: ignore[no-untyped-def]
    crashes, exposure, _ = fleet
    extra = crashes.iloc[:1].assign(crash_id="ghost", host_id="h-999")
    f = analyze_fleet(pd.concat([crashes, extra], ignore_index=True), exposure)
    assert f.window.crashes == len(crashes) + 1 and f.window.crashes_outside_exposure == 1
    assert any("fall in no exposure interval" in n for n in f.notes)
