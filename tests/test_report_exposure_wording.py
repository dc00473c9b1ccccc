"""What the reports say when the exposure is missing or thin (breaker4 #5 and #20), read
from a real store (DuckDB, the store's summed node-time path) by every renderer and the
web UI's overview.

Before: "31 crashes on 16 of 0 hosts over 0.0 node-days; n/a per 1,000 node-days (95% CI
n/a–unbounded)" with every group repeating "n/a …", and "5 crashes on 3 of 2 hosts over
0.0 node-days; 611,122 per 1,000 node-days". Now the first line says there is no exposure
data (or that it is too thin) once, in place of the rate, and counts the hosts without
"N of M" when the crashing hosts are not all observed.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from servekit import pages_when_ready

from coreepi.model.fleet import ExposureInterval
from coreepi.model.report import AnalysisInfo, CrashReport, Phenotype, Signature, Source
from coreepi.reporting import build_findings, render, text_report
from coreepi.store import CrashRecord, DuckDBStore

T0 = pd.Timestamp("2024-05-01T10:00:00", tz="UTC")
NO_EXPOSURE = ("no exposure data in this window (exposure.csv / agent heartbeats): crashes "
               "are grouped, but rates, ratios and the host tests need node-time")


def _crash(i: int, host: str, minutes: float, signature: str) -> CrashRecord:
    report = CrashReport(
        crash_id=f"c{i:03d}", host_id=host, source=Source.ELF_CORE,
        captured_at=(T0 + timedelta(minutes=minutes)).to_pydatetime(),
        phenotypes=[Phenotype(name="null-deref", hardware_indicative=False)],
        signature=Signature(signature=signature), analysis=AnalysisInfo(analyzer_version="t"))
    return CrashRecord(report, {})


def _no_exposure_store(data: Path) -> DuckDBStore:
    """31 crashes of 5 signatures on 16 hosts, no hosts.csv, no exposure (breaker4 #5)."""
    store = DuckDBStore(data)
    store.add_crashes(_crash(i, f"k-{i % 16:02d}", 60.0 * i, f"sig_{i % 5}") for i in range(31))
    return store


def _thin_store(data: Path) -> DuckDBStore:
    """Two agents with ~5.8 minutes of heartbeats each (0.008 node-days), five crashes on
    three hosts, one of which never sent a heartbeat (breaker4 #20)."""
    store = DuckDBStore(data)
    span = timedelta(days=0.004)
    store.add_exposure(ExposureInterval(h, T0.to_pydatetime(), (T0 + span).to_pydatetime(), {})
                       for h in ("n-1", "n-2"))
    rows = [("n-1", 1), ("n-1", 2), ("n-2", 3), ("n-3", 4), ("n-3", 5)]
    store.add_crashes(_crash(i, h, m, "abort | main") for i, (h, m) in enumerate(rows))
    return store


def _outside_store(data: Path) -> DuckDBStore:
    """Hosts a–d observed 10 days each (40 node-days); 3 crashes inside, 8 outside."""
    store = DuckDBStore(data)
    store.add_exposure(ExposureInterval(h, T0.to_pydatetime(),
                                        (T0 + timedelta(days=10)).to_pydatetime(), {})
                       for h in "abcd")
    rows = [("a", 1), ("a", 2), ("b", 3)] + [("ghost", 4)] * 6 + [("a", 12), ("a", 13)]
    store.add_crashes(_crash(i, h, d * 1440.0, "s") for i, (h, d) in enumerate(rows))
    return store


def test_no_exposure_says_so_first_and_prints_no_rate(tmp_path: Path) -> None:
    with _no_exposure_store(tmp_path / "data") as store:
        f = build_findings(store)
    assert f.window.rates_undetermined_reason == "no-exposure"
    text = text_report(f, 400)  # wide: the headline on one line
    lines = text.splitlines()
    assert lines[1] == ("2024-05-01 10:00 – 2024-05-02 16:00 UTC: 31 crashes on 16 hosts; "
                        f"{NO_EXPOSURE}; 5 signatures, 1 phenotype"), text
    assert "Crash groups by crashes (no rates: see above)" in text
    md = render(f, "markdown")
    html = render(f, "html")
    for out in (text, md, html):
        assert NO_EXPOSURE in out and out.count(NO_EXPOSURE) == 1
        for absent in ("of 0 hosts", "n/a", "unbounded", "per 1,000 node-days", "rate (95% CI)"):
            assert absent not in out, absent


def test_thin_exposure_prints_no_rate_and_the_json_keeps_it(tmp_path: Path) -> None:
    with _thin_store(tmp_path / "data") as store:
        f = build_findings(store)
    w = f.window
    assert (w.hosts, w.hosts_with_crashes, w.rates_undetermined_reason) == (2, 3,
                                                                            "thin-exposure")
    want = ("5 crashes on 3 hosts with crashes, 2 with exposure; exposure too thin for rates "
            "(0.008 node-days from 2 hosts so far); 1 signature, 1 phenotype")
    text = text_report(f, 400)
    assert text.splitlines()[1].endswith(want), text
    rate = f"{w.rate:,.0f}"
    assert rate == "375,000"  # 3 crashes inside exposure over 0.008 node-days: kept in JSON
    data = json.loads(render(f, "json"))
    assert data["window"]["rates_undetermined_reason"] == "thin-exposure"
    assert data["window"]["rate"] == pytest.approx(375000.0)
    for out in (text, render(f, "markdown"), render(f, "html")):
        assert want in out
        for absent in (rate, "3 of 2 hosts", "per 1,000 node-days", "rate (95% CI)"):
            assert absent not in out, absent


def test_crashes_outside_exposure_are_named_and_left_out_of_the_rate(tmp_path: Path) -> None:
    with _outside_store(tmp_path / "data") as store:
        f = build_findings(store, since=T0.to_pydatetime(),
                           until=(T0 + timedelta(days=15)).to_pydatetime())
    assert (f.window.crashes, f.window.crashes_in_exposure) == (11, 3)
    assert f.window.rate == pytest.approx(75.0)  # 3 / 40 node-days, the interval path's value
    assert [(g.crashes, g.crashes_in_exposure, round(g.rate or 0, 9)) for g in f.groups] == [
        (11, 3, 75.0), (11, 3, 75.0)]
    line = text_report(f, 400).splitlines()[1]
    assert line.endswith("UTC: 11 crashes (8 outside exposure, not in the rate) on 3 hosts with "
                         "crashes, 4 with exposure over 40.0 node-days; 75 per 1,000 node-days "
                         "(95% CI 15.5–219); 1 signature, 1 phenotype"), line


def _overview(store: DuckDBStore) -> tuple[str, str]:
    """The web UI's overview page and groups page for ``store``."""
    [(_, page), (_, groups)] = pages_when_ready(store, ["/", "/groups"])
    return page, groups


def _plain(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def test_ui_overview_without_exposure_says_so_once(tmp_path: Path) -> None:
    with _no_exposure_store(tmp_path / "data") as store:
        page, groups = _overview(store)
    text = _plain(page)
    assert "31 crashes on 16 hosts, 2024-05-01 – 2024-05-02: " + NO_EXPOSURE in text, text
    assert "Top software groups by crashes" in text or "No software group" in text
    for absent in ("of 0 hosts", "n/a", "unbounded", "per 1,000 node-days"):
        assert absent not in text, absent
    assert "n/a" not in _plain(groups) and "unbounded" not in _plain(groups)


def test_ui_overview_with_thin_exposure_prints_no_rate(tmp_path: Path) -> None:
    with _thin_store(tmp_path / "data") as store:
        page, groups = _overview(store)
    text = _plain(page)
    assert ("5 crashes on 3 hosts with crashes, 2 with exposure, 2024-05-01 – 2024-05-01: "
            "exposure too thin for rates (0.008 node-days from 2 hosts so far)") in text, text
    for absent in ("375,000", "3 of 2 hosts", "per 1,000 node-days"):
        assert absent not in text and absent not in _plain(groups), absent
