"""A store without a crash: the text report and the web UI's overview say
plainly that there is nothing to analyse (before: "0 crashes on 0 of 0 hosts
… n/a per 1,000 node-days (95% CI n/a–unbounded)")."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from coreepi.reporting import build_findings, text_report
from coreepi.serve import ServeConfig, create_app, create_token
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
    store = DuckDBStore(tmp_path / "data")
    _, token = create_token(store, ["read"])
    app = create_app(store, ServeConfig(findings_debounce_seconds=0.05))
    try:
        client = TestClient(app)
        headers = {"authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 60
        while not client.get("/index.json", headers=headers).json().get("ready"):
            assert time.monotonic() < deadline, "the findings were never computed"
            time.sleep(0.1)
        page = client.get("/", headers=headers)
        assert page.status_code == 200
        assert "nothing to analyse yet" in page.text
        # no rate, interval, note or empty chart for a store without a crash
        for absent in ("n/a", "95% CI", "note:", "Epidemic curve"):
            assert absent not in page.text, absent
    finally:
        app.state.findings.close()
        store.close()
