"""Alerts and the drain loop on the pages, in-process: the overview's firing
alerts, a group's and a host's alerts with their evidence, and the host
page's drain form with its CSRF checks (Origin, admin session, form token)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from coreepi.epi.surveillance import Detection
from coreepi.epi.surveillance.models import ratio_evidence
from coreepi.serve import ServeConfig, create_app
from coreepi.serve.auth import COOKIE, create_token
from coreepi.serve.findings import group_id
from coreepi.simulate.timeline import BadHost, TimelineFleet, make_timeline, write_timeline
from coreepi.store import DuckDBStore
from coreepi.store.alert_records import AlertRecord
from coreepi.surveil import evaluate, reconcile, rules_from

BAD = "h00009"
ORIGIN = "http://testserver"


@dataclass
class Served:
    client: TestClient
    store: DuckDBStore
    read: str
    admin: str
    end: datetime


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    start = (datetime.now(UTC) - timedelta(days=40)).date().isoformat()
    f = TimelineFleet(hosts=40, days=40, groups=3, rate_range=(1, 1), start=start,
                      bad_hosts=(BadHost(host=9, day=25, rate=0.8),))
    end = datetime.fromisoformat(start).replace(tzinfo=UTC) + timedelta(days=40)
    store = DuckDBStore(tmp_path / "data")
    write_timeline(store, make_timeline(f, seed=4))
    evaluate(store, rules_from({"evaluation": {"kinds": ["hardware-suspect-host"]}}), end)
    t = end - timedelta(days=2)
    store.put_alert(AlertRecord("new-group|signature=sig_001", "new-group",
                                {"kind": "new-group", "signature": "sig_001"},
                                "new crash group sig_001: 3 crashes on 2 hosts",
                                {"crashes": 3, "hosts": 2}, "resolved", t, end, end))
    read = create_token(store, ["read"], "r")[1]
    admin = create_token(store, ["admin"], "ops")[1]
    app = create_app(store, ServeConfig(analysis_jobs=0))
    with TestClient(app) as client:
        yield Served(client, store, read, admin, end)
    store.close()


def _page(s: Served, path: str, token: str) -> str:
    s.client.cookies.set(COOKIE, token)
    r = s.client.get(path)
    assert r.status_code == 200, r.text[:300]
    return r.text


def test_overview_lists_firing_alerts_with_evidence(served: Served) -> None:
    (alert,) = served.store.alerts("firing")
    assert alert.labels == {"kind": "hardware-suspect-host", "host_id": BAD}
    html = _page(served, "/", served.read)
    section = html[html.index('id="alerts"'):html.index("</section>", html.index('id="alerts"'))]
    assert "firing" in section and f'href="/hosts/{BAD}"' in section
    assert f"<dt>hardware_crashes</dt><dd>{alert.evidence['hardware_crashes']}</dd>" in section
    assert "sig_001" not in section  # resolved: not on the overview
    # the alert's start (the tip) and the start of its counts are two times: the column
    # said "since" beside the evidence's own "since"; the evidence time reads as the summary's
    assert "<th scope=\"col\">started (UTC)</th>" in section and "since (UTC)" not in section
    since = datetime.fromisoformat(alert.evidence["since"]).astimezone(UTC)
    assert f"<dt>since</dt><dd>{since:%Y-%m-%d %H:%M} UTC</dd>" in section
    assert f"since {since:%Y-%m-%d %H:%M} UTC in " in alert.summary
    data = served.client.get("/index.json", headers={"authorization": f"Bearer {served.read}"})
    assert [a["key"] for a in data.json()["alerts"]] == [alert.key]


def test_group_page_shows_its_resolved_alert(served: Served) -> None:
    html = _page(served, f"/groups/{group_id('signature', 'sig_001')}", served.read)
    assert "Alerts about this group" in html and "resolved" in html
    assert "new crash group sig_001: 3 crashes on 2 hosts" in html
    other = _page(served, f"/groups/{group_id('signature', 'sig_002')}", served.read)
    assert "Alerts about this group" not in other


def test_phenotype_group_page_shows_its_alert(served: Served) -> None:
    # the timeline gives group 0's crashes the phenotype null-deref
    t = served.end - timedelta(days=1)
    served.store.put_alert(AlertRecord(
        "rising|phenotype=null-deref", "rising", {"kind": "rising", "phenotype": "null-deref"},
        "phenotype null-deref is rising: 90 crashes per 1,000 node-days", {"run_crashes": 9},
        "firing", t, t))
    page = f"/groups/{group_id('phenotype', 'null-deref')}"
    html = _page(served, page, served.read)
    assert "Alerts about this group" in html and "phenotype null-deref is rising" in html
    listed = _page(served, "/", served.read)
    assert f'href="{page}"' in listed
    other = _page(served, f"/groups/{group_id('phenotype', 'return-to-null')}", served.read)
    assert "Alerts about this group" not in other


def test_host_page_drain_form_needs_an_admin_session(served: Served) -> None:
    html = _page(served, f"/hosts/{BAD}", served.read)
    assert "Alerts about this host" in html and "Log in with an <code>admin</code> token" in html
    assert "form_token" not in html
    html = _page(served, f"/hosts/{BAD}", served.admin)
    assert 'id="drain-button"' in html
    # a healthy host has no drain section
    assert 'id="drain"' not in _page(served, "/hosts/h00001", served.admin)


def _form_token(s: Served) -> str:
    html = _page(s, f"/hosts/{BAD}", s.admin)
    found = re.search(r'name="form_token" value="([0-9a-f]{64})"', html)
    assert found
    return found.group(1)


def test_drain_form_refuses_cross_site_posts(served: Served) -> None:
    token = _form_token(served)
    post = served.client.post
    url = f"/hosts/{BAD}/drain"
    body = {"form_token": token, "reason": "mce"}
    served.client.cookies.set(COOKIE, served.admin)
    r = post(url, data=body, headers={"origin": "http://evil.example"}, follow_redirects=False)
    assert r.status_code == 403 and "Origin is not this server" in r.text
    r = post(url, data=body, follow_redirects=False)  # no Origin, no Referer
    assert r.status_code == 403
    r = post(url, data={**body, "form_token": "0" * 64}, headers={"origin": ORIGIN},
             follow_redirects=False)
    assert r.status_code == 403 and "form token does not match" in r.text
    served.client.cookies.set(COOKIE, served.read)
    r = post(url, data=body, headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 403 and "admin token" in r.text
    assert served.store.drained_hosts() == []


def test_drain_from_the_page_then_recheck(served: Served) -> None:
    token = _form_token(served)
    r = served.client.post(f"/hosts/{BAD}/drain", data={"form_token": token, "reason": "mce"},
                           headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/hosts/{BAD}"
    (d,) = served.store.drained_hosts()
    assert (d.host_id, d.drained_by, d.reason) == (BAD, "ui:ops", "mce")
    html = _page(served, f"/hosts/{BAD}", served.admin)
    assert "<strong>Drained</strong>" in html and 'id="drain-button"' not in html
    data = served.client.get(f"/hosts/{BAD}.json",
                             headers={"authorization": f"Bearer {served.read}"}).json()
    check = data["drain"]["recheck"]
    assert data["drain"]["drained"]["by"] == "ui:ops" and "form_token" not in data["drain"]
    # drained just now: no node-time has passed since, so nothing can be said yet
    assert check["verdict"] == "undetermined" and check["host_id"] == BAD
    assert f"Re-check: <strong>{check['verdict']}</strong>" in html
    assert check["host_crashes_before"] > 0
    assert (f"its {check['signatures']} signatures had {check['host_crashes_before']} crashes "
            "on this host and") in html and "(s)" not in html
    assert check["others_node_days_after"] == pytest.approx(0.0, abs=0.05)
    assert pd.Timestamp(d.drained_at) > pd.Timestamp(served.end) - pd.Timedelta(days=1)


def test_json_views_carry_an_unbounded_ratio(served: Served) -> None:
    # a rising group whose run had no node-time: ratio k/0, JSON-safe in the store and views
    d = Detection("rising", {"signature": "sig_002"}, pd.Timestamp(served.end),
                  {"baseline_crashes": 9, "baseline_node_days": 800.0, "run_crashes": 3,
                   "run_node_days": 0.0, "run_start": served.end.isoformat(),
                   **ratio_evidence(float("inf")), "dispersion": 1.0, "statistic": 6.2})
    (t,), _ = reconcile([], [d], served.end)
    served.store.put_alert(t.alert)
    auth = {"authorization": f"Bearer {served.read}"}
    index = served.client.get("/index.json", headers=auth)
    assert index.status_code == 200, index.text[:300]
    group = served.client.get(f"/groups/{group_id('signature', 'sig_002')}.json", headers=auth)
    assert group.status_code == 200, group.text[:300]
    (mine,) = [a for a in group.json()["alerts"] if a["kind"] == "rising"]
    ratio = {e["name"]: e for e in mine["evidence"]}["ratio"]
    assert (ratio["value"], ratio["text"]) == (None, "unbounded")
    assert "(unbounded, CUSUM 6.2)" in mine["summary"]


def test_undrain_from_the_page(served: Served) -> None:
    token = _form_token(served)
    served.client.post(f"/hosts/{BAD}/drain", data={"form_token": token, "reason": "mce"},
                       headers={"origin": ORIGIN}, follow_redirects=False)
    html = _page(served, f"/hosts/{BAD}", served.admin)
    assert 'id="undrain-button"' in html and f'action="/hosts/{BAD}/undrain"' in html
    assert 'id="undrain-button"' not in _page(served, f"/hosts/{BAD}", served.read)
    r = served.client.post(f"/hosts/{BAD}/undrain", data={"form_token": "0" * 64},
                           headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 403 and len(served.store.drained_hosts()) == 1
    served.client.cookies.set(COOKIE, served.admin)
    r = served.client.post(f"/hosts/{BAD}/undrain", data={"form_token": token},
                           headers={"origin": ORIGIN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/hosts/{BAD}"
    assert served.store.drained_hosts() == []
    (ended,) = served.store.drain_history()
    assert (ended.host_id, ended.drained_by, ended.undrained_by) == (BAD, "ui:ops", "ui:ops")
    html = _page(served, f"/hosts/{BAD}", served.admin)
    assert "<strong>Drained</strong>" not in html and 'id="drain-button"' in html


def test_api_drain_takes_the_drain_time(served: Served) -> None:
    auth = {"authorization": f"Bearer {served.admin}"}
    url = f"/api/v1/hosts/{BAD}/drain"
    ahead = datetime.now(UTC) + timedelta(hours=1)
    r = served.client.post(url, json={"reason": "mce", "at": ahead.isoformat()}, headers=auth)
    assert r.status_code == 422 and served.store.drained_hosts() == []
    assert f"at {ahead.isoformat()}: in the future" in r.text
    at = served.end - timedelta(days=3)
    r = served.client.post(url, json={"reason": "mce", "at": at.isoformat()}, headers=auth)
    assert r.status_code == 200 and r.json() == {"host_id": BAD, "drained": True, "already": False}
    (d,) = served.store.drained_hosts()
    assert (d.drained_at, d.reason, d.drained_by) == (at, "mce", "token:ops")
    # the re-check compares the 28 days before that time, not before the request
    check = served.client.get(f"/hosts/{BAD}.json",
                              headers={"authorization": f"Bearer {served.read}"}).json()
    assert check["drain"]["drained"]["at"] == at.isoformat()
    assert check["drain"]["recheck"]["others_node_days_after"] > 0
