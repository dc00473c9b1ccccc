"""An unbounded ratio (k/0) and an undefined one (0/0) are different things: the
findings say which (``irr_status``, ``sir_status``, an evidence item's
``ratio_status``) and the reports word them differently ("unbounded" / ``∞``
vs "undefined (0/0)"). Before, NaN and ±inf both became ``None`` and read
"unbounded"."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from coreepi.epi import analyze_fleet
from coreepi.epi.models import FleetFindings, HostFinding, ratio_status, sir_status
from coreepi.reporting.phrases import evidence_text, fmt_ratio

T0 = pd.Timestamp("2024-01-01", tz="UTC")


def d(days: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(days=days)


def _exposure() -> pd.DataFrame:
    """Hosts a and b, 10 days each, on two kernels."""
    return pd.DataFrame({
        "host_id": ["a", "b"], "start": [d(0), d(0)], "end": [d(10), d(10)],
        "kernel": ["5.15", "6.1"],
    })  # fmt: skip


def _crashes(rows: list[tuple[str, float]]) -> pd.DataFrame:
    return pd.DataFrame({
        "crash_id": [f"c{i}" for i in range(len(rows))],
        "host_id": [h for h, _ in rows],
        "captured_at": [d(t) for _, t in rows],
        "signature": ["s"] * len(rows),
        "phenotypes": [[] for _ in rows],
        "hardware_phenotypes": [[] for _ in rows],
    })  # fmt: skip


def _host(f: FleetFindings, host_id: str) -> HostFinding:
    return next(h for h in f.hosts if h.host_id == host_id)


def _sir_text(h: HostFinding) -> str:
    return evidence_text(next(e for e in h.attribution.evidence if e.kind == "sir"))


def test_status_of_a_ratio() -> None:
    assert [ratio_status(x) for x in (2.5, math.inf, -math.inf, math.nan, None)] == [
        "finite", "unbounded", "unbounded", "undefined", "undefined"]
    assert [sir_status(o, e, 10.0) for o, e in ((3, 1.5), (3, 0.0), (0, 0.0), (3, math.nan))] == [
        "finite", "unbounded", "undefined", "undefined"]
    assert sir_status(3, 0.0, 0.0) == "undefined"  # no fleet exposure: no fleet rate


def test_host_with_crashes_and_no_exposure_gets_no_sir_and_no_suspicion() -> None:
    # host "ghost" crashes 6 times but has no exposure: no SIR from ~0 exposure (issue 11),
    # undetermined for insufficient exposure, never a suspect
    f = analyze_fleet(_crashes([("a", 1), ("a", 2), ("b", 3)] + [("ghost", 4)] * 6), _exposure())
    ghost = _host(f, "ghost")
    assert (ghost.sir, ghost.p_value, ghost.sir_status) == (None, None, "undefined")
    assert not ghost.exposure_sufficient and ghost.crashes_outside_exposure == 6
    assert (ghost.attribution.verdict, ghost.attribution.rule) == (
        "undetermined", "insufficient-exposure")
    assert evidence_text(ghost.attribution.evidence[0]) == (
        "host ghost: insufficient exposure — 0 node-days observed, at least 1 needed for any "
        "test; its 6 crashes are counted, not judged")
    assert all(e.kind != "sir" for e in ghost.attribution.evidence)
    assert _host(f, "a").sir_status == "finite"
    assert fmt_ratio(None, None, None, "unbounded").startswith("∞")


def test_fleet_without_exposure_in_the_window_has_undefined_sirs() -> None:
    # every crash falls after the exposure ends: no fleet rate, so expected = 0/0 for each host
    f = analyze_fleet(_crashes([("a", 21), ("a", 22), ("a", 23), ("b", 24)]), _exposure(),
                      since=d(20), until=d(30))
    assert f.window.node_days == 0.0
    a = _host(f, "a")
    assert (a.sir, a.sir_status) == (None, "undefined")
    assert {h["sir_status"] for h in json.loads(f.model_dump_json())["hosts"]} == {"undefined"}
    assert a.attribution.rule == "insufficient-exposure"  # no exposure: no test at all
    from coreepi.epi.models import Evidence

    text = evidence_text(Evidence(kind="sir", supports=None, strength=0.0, host_ids=["a"],
                                  observed=3, expected=0.0, ratio_status="undefined", p=0.5))
    assert text == ("host a: 3 crashes where n/a expected (SIR undefined (0/0), 95% CI n/a–n/a, "
                    "p n/a)")
    assert "unbounded" not in text
    assert fmt_ratio(a.sir, a.sir_lower, a.sir_upper, a.sir_status) == "undefined (0/0)"


def test_unbounded_rate_ratio_is_marked_and_worded() -> None:
    # 8 crashes, all on kernel 6.1 (hosts b, d): the rate ratio 6.1 vs the rest is 8/0;
    # two hosts on each kernel, as a tested value needs (min_value_hosts)
    crashes = _crashes([("b" if i % 2 else "d", 1 + i) for i in range(8)])
    exposure = pd.concat([_exposure(), _exposure().assign(host_id=["c", "d"])],
                         ignore_index=True)
    f = analyze_fleet(crashes, exposure)
    a = next(a for a in f.groups[0].associations if a.value == "6.1")
    assert (a.irr, a.irr_status, a.rest_crashes) == (None, "unbounded", 0)
    assert a.irr_lower is not None and a.irr_lower > 1 and a.irr_upper is None
    rest = next(a for a in f.groups[0].associations if a.value == "5.15")
    assert (rest.irr, rest.irr_status) == (pytest.approx(0.0), "finite")
    cell = fmt_ratio(a.irr, a.irr_lower, a.irr_upper, a.irr_status)
    assert cell.startswith("∞ (") and cell.endswith("–unbounded)")
    assert (a.value_hosts, a.rest_value_hosts, a.untested) == (2, 2, None)


def test_a_value_on_one_host_is_not_tested() -> None:
    # the same 8 crashes with kernel 6.1 on host b alone: 6.1 cannot be told from host b
    f = analyze_fleet(_crashes([("b", 1 + i) for i in range(8)]), _exposure())
    a = next(a for a in f.groups[0].associations if a.value == "6.1")
    assert (a.crashes, a.value_hosts, a.rest_value_hosts, a.untested) == (8, 1, 1, "few-hosts")
    assert (a.p_value, a.q_value, a.irr_lower, a.irr_upper) == (None, None, None, None)
    assert f.window.tests == 0
