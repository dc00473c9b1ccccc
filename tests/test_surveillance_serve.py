"""``coreepi serve`` with alert rules: evaluation at start-up, the alerts API, host drains."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from webhook import WebhookReceiver

from coreepi.serve import ServeConfig, create_app
from coreepi.serve.auth import create_token
from coreepi.simulate.timeline import BadHost, TimelineFleet, make_timeline, write_timeline
from coreepi.store import DuckDBStore
from coreepi.surveil import rules_from


def test_serve_evaluates_lists_and_drains(tmp_path: Path) -> None:
    # a fleet whose data ends now: the live evaluation (now = wall clock) sees it
    start = (time.time() // 86400 - 40) * 86400
    f = TimelineFleet(hosts=40, days=40, groups=3, rate_range=(1, 1),
                      start=time.strftime("%Y-%m-%d", time.gmtime(start)),
                      bad_hosts=(BadHost(host=9, day=25, rate=0.8),))
    hook = WebhookReceiver()
    rules = rules_from({"evaluation": {"kinds": ["hardware-suspect-host"], "interval_seconds": 3600},
                        "receiver": [{"name": "am", "format": "alertmanager", "url": hook.url}]})
    store = DuckDBStore(tmp_path / "data")
    try:
        write_timeline(store, make_timeline(f, seed=4))
        read = create_token(store, ["read"], "r")[1]
        admin = create_token(store, ["admin"], "a")[1]
        app = create_app(store, ServeConfig(analysis_jobs=0, alert_rules=rules))
        with TestClient(app) as client:
            deadline = time.monotonic() + 60
            while app.state.alerting.last is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert app.state.alerting.last_error == ""
            r = client.get("/api/v1/alerts", headers={"authorization": f"Bearer {read}"})
            assert [(a["kind"], a["labels"]["host_id"]) for a in r.json()["alerts"]] == [
                ("hardware-suspect-host", "h00009")]
            assert hook.bodies[0][0]["labels"]["host_id"] == "h00009"
            r = client.post("/api/v1/hosts/h00009/drain", json={"reason": "mce"},
                            headers={"authorization": f"Bearer {admin}"})
            assert r.json() == {"host_id": "h00009", "drained": True, "already": False}
            r = client.post("/api/v1/hosts/h00009/drain", json={},
                            headers={"authorization": f"Bearer {read}"})
            assert r.status_code == 403
            r = client.post("/api/v1/hosts/nope/drain", json={},
                            headers={"authorization": f"Bearer {admin}"})
            assert r.status_code == 404 and "'nope'" in r.json()["detail"]
            assert [d.drained_by for d in store.drained_hosts()] == ["token:a"]
            r = client.delete("/api/v1/hosts/h00009/drain",
                              headers={"authorization": f"Bearer {read}"})
            assert r.status_code == 403
            r = client.delete("/api/v1/hosts/h00009/drain",
                              headers={"authorization": f"Bearer {admin}"})
            got = r.json()
            assert (got["host_id"], got["drained"], got["was_drained"]) == ("h00009", False, True)
            assert got["undrained_at"] >= got["drained_at"]
            r = client.delete("/api/v1/hosts/h00009/drain",
                              headers={"authorization": f"Bearer {admin}"})
            assert r.json()["was_drained"] is False
            r = client.delete("/api/v1/hosts/nope/drain",
                              headers={"authorization": f"Bearer {admin}"})
            assert r.status_code == 404
        assert store.drained_hosts() == []
        assert [(d.drained_by, d.undrained_by) for d in store.drain_history()] == [
            ("token:a", "token:a")]
    finally:
        hook.close()
        store.close()
