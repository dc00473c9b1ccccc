"""A store without a crash: the text report and the web UI's overview say
plainly that there is nothing to analyse (before: "0 crashes on 0 of 0 hosts
… n/a per 1,000 node-days (95% CI n/a–unbounded)")."""

from __future__ import annotations

from pathlib import Path

from servekit import pages_when_ready

from coreepi.reporting import build_findings, text_report
from coreepi.store import DuckDBStore


def test_text_report_of_an_empty_store_says_nothing_to_analyse(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        findings = build_findings(store)
    text = text_report(findings, 80)
    lines = text.splitlines()
    assert lines[0] == "coreepi report"
    assert lines[1].endswith(" UTC: no crash: nothing to analyse"), text
    assert len(lines) == 2 and "n/a" not in text


def test_ui_overview_of_an_empty_store_says_nothing_to_analyse(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        [(status, page)] = pages_when_ready(store, ["/"])
    assert status == 200
    assert "nothing to analyse yet" in page
    # no rate, interval, note or empty chart for a store without a crash
    for absent in ("n/a", "95% CI", "note:", "Epidemic curve"):
        assert absent not in page, absent
