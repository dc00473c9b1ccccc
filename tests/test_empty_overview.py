"""A store without a crash: the text, Markdown and HTML reports and the web
UI's overview say plainly, once, that there is nothing to analyse (before:
"0 crashes on 0 of 0 hosts … n/a per 1,000 node-days (95% CI n/a–unbounded)")."""

from __future__ import annotations

import re
from pathlib import Path

from servekit import pages_when_ready

from coreepi.reporting import build_findings, html_report, markdown_report, text_report
from coreepi.store import DuckDBStore


def test_text_report_of_an_empty_store_says_nothing_to_analyse(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        findings = build_findings(store)
    text = text_report(findings, 80)
    lines = text.splitlines()
    assert lines[0] == "coreepi report"
    assert lines[1].endswith(" UTC: no crash: nothing to analyse"), text
    assert len(lines) == 2 and "n/a" not in text


def test_markdown_and_html_reports_of_an_empty_store_say_it_once(tmp_path: Path) -> None:
    # they added "No crash in this window." (and empty sections, notes) after the headline
    with DuckDBStore(tmp_path / "data") as store:
        findings = build_findings(store)
    md = markdown_report(findings)
    lines = md.splitlines()
    assert lines[:2] == ["# coreepi report", ""] and len(lines) == 3, md
    assert lines[2].endswith(" UTC: no crash: nothing to analyse"), md
    html = html_report(findings)
    body = re.sub(r"<style>.*?</style>", "", html, flags=re.S)
    texts = re.findall(r"<(h1|h2|p)[^>]*>(.*?)</\1>", body)
    assert [t[0] for t in texts] == ["h1", "p", "p"], texts
    assert texts[1][1].endswith(" UTC: no crash: nothing to analyse"), texts
    assert texts[2][1].startswith("FleetFindings schema ") and body.endswith("</html>\n")
    for report in (md, body):
        assert report.lower().count("no crash") == 1, report


def test_ui_overview_of_an_empty_store_says_nothing_to_analyse(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        [(status, page)] = pages_when_ready(store, ["/"])
    assert status == 200
    assert "nothing to analyse yet" in page
    # no rate, interval, note or empty chart for a store without a crash
    for absent in ("n/a", "95% CI", "note:", "Epidemic curve"):
        assert absent not in page, absent
