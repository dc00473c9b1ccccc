"""``/metrics``: per-group gauges (top N + other) and alerts firing from the
findings cache, parsed with ``prometheus_client.parser``; the Grafana
dashboard in ``deploy/`` names only metrics the server exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from coreepi.serve import ServeConfig, create_app
from coreepi.serve.findings import group_id
from coreepi.simulate.timeline import TimelineFleet, make_timeline, write_timeline
from coreepi.store import DuckDBStore
from coreepi.store.alert_records import AlertRecord

ROOT = Path(__file__).resolve().parent.parent
TOP = 3


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, DuckDBStore, object]]:
    start = (datetime.now(UTC) - timedelta(days=20)).date().isoformat()
    tl = make_timeline(TimelineFleet(hosts=30, days=14, groups=7, rate_range=(0.5, 8),
                                     start=start), seed=3)
    store = DuckDBStore(tmp_path_factory.mktemp("metrics") / "data")
    write_timeline(store, tl)
    now = datetime.now(UTC)
    store.put_alert(AlertRecord("hardware-suspect-host|host_id=h00003", "hardware-suspect-host",
                                {"kind": "hardware-suspect-host", "host_id": "h00003"}, "s",
                                {}, "firing", now, now))
    store.put_alert(AlertRecord("rising|signature=sig_001", "rising",
                                {"kind": "rising", "signature": "sig_001"}, "s", {},
                                "resolved", now, now, now))
    app = create_app(store, ServeConfig(analysis_jobs=0, metrics_top_groups=TOP))
    with TestClient(app) as client:
        app.state.findings.refresh_now()
        yield client, store, tl
    store.close()


def _families(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_group_gauges_match_the_findings(scraped: tuple[TestClient, DuckDBStore, object]) -> None:
    client, store, tl = scraped
    snap = client.app.state.findings.snapshot  # type: ignore[attr-defined]
    f = snap.findings
    got = _families(client.get("/metrics").text)
    rates = got["coreepi_group_rate_per_1000_node_days"]
    sigs = sorted((g for g in f.groups if g.kind == "signature"),
                  key=lambda g: (-g.crashes_in_exposure, -g.crashes, g.key))
    assert len(sigs) == 7 and len(rates) == TOP + 1  # bounded: top 3 + other
    per = 1000 / f.config.get("rate_per", 1000)
    for g in sigs[:TOP]:
        labels = (("group", g.key), ("id", group_id("signature", g.key)))
        assert rates[labels] == pytest.approx(g.rate * per, rel=1e-9)
        assert got["coreepi_group_hosts_affected"][labels] == g.hosts
        assert got["coreepi_group_crashes"][labels] == g.crashes
    other = (("group", "other"), ("id", ""))
    rest = sigs[TOP:]
    assert got["coreepi_group_crashes"][other] == sum(g.crashes for g in rest)
    assert rates[other] == pytest.approx(sum(g.crashes_in_exposure for g in rest) * 1000
                                         / f.window.node_days, rel=1e-9)
    # hosts with a crash of any group outside the top 3, counted from the fleet itself
    c = tl.crashes  # type: ignore[attr-defined]
    window = (c["captured_at"] >= f.window.since) & (c["captured_at"] < f.window.until)
    outside = c[window & c["signature"].isin({g.key for g in rest})]
    assert got["coreepi_group_hosts_affected"][other] == outside["host_id"].nunique()
    assert outside["host_id"].nunique() < sum(g.hosts for g in rest)  # a union, not a sum
    firing = got["coreepi_alerts_firing"]
    assert firing[(("kind", "hardware-suspect-host"),)] == 1
    assert firing[(("kind", "rising"),)] == 0  # resolved: not firing


def test_a_scrape_reads_no_crashes(scraped: tuple[TestClient, DuckDBStore, object],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    client, store, _ = scraped
    calls: list[str] = []
    for name in ("crash_frame", "exposure_frame", "list_crashes"):
        real = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *a, _r=real, _n=name, **k: (calls.append(_n), _r(*a, **k))[1])
    for _ in range(3):
        assert "coreepi_group_hosts_affected" in client.get("/metrics").text
    assert calls == []


def test_grafana_dashboard_names_exported_metrics(scraped: tuple[TestClient, DuckDBStore, object]) -> None:
    client, _, _ = scraped
    dash = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exported: set[str] = set()
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        exported |= {fam.name + suffix for suffix in ("", "_total", "_created", "_bucket",
                                                      "_sum", "_count")}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 8
    named = {m for e in exprs for m in re.findall(r"\bcoreepi_[a-z0-9_]+", e)}
    assert named and named <= exported, named - exported
    for want in ("coreepi_group_rate_per_1000_node_days", "coreepi_group_hosts_affected",
                 "coreepi_alerts_firing", "coreepi_crashes_ingested_total"):
        assert want in named
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
