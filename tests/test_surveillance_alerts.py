"""Alerts: rules, dedup/firing/resolved, silences, delivery to a webhook on 127.0.0.1."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest
import yaml

from coreepi.epi.surveillance import Detection
from coreepi.epi.surveillance.models import ratio_evidence
from coreepi.errors import InputError
from coreepi.reporting.surveillance import alert_summary
from coreepi.simulate.timeline import BadHost, TimelineFleet, make_timeline, write_timeline
from coreepi.store import DuckDBStore
from coreepi.store.alert_records import DrainRecord, SilenceRecord
from webhook import WebhookReceiver

from coreepi.surveil import (
    Delivery, Receiver, deliver, evaluate, load_rules, payload, reconcile, rules_from,
    sample_alert,
)  # fmt: skip

NOW = datetime(2026, 11, 12, tzinfo=UTC)
SCHEMA = Path(__file__).parent / "data" / "alertmanager" / "postable-alerts.yaml"


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    r = WebhookReceiver()
    yield r
    r.close()


def _det(sig: str = "s", at: datetime = NOW) -> Detection:
    return Detection("new-group", {"signature": sig}, pd.Timestamp(at),
                     {"crashes": 4, "hosts": 2, "first_seen": at.isoformat()})


def test_rules_errors_name_file_and_key(tmp_path: Path) -> None:
    f = tmp_path / "rules.toml"
    f.write_text('[detectors]\nrising_ratio = "x"\n')
    with pytest.raises(InputError, match=r"rules.toml: detectors.rising_ratio: expected float"):
        load_rules(f)
    with pytest.raises(InputError, match=r"receiver\[0\].format: 'teams' is not one of"):
        rules_from({"receiver": [{"name": "a", "format": "teams", "url": "http://x"}]})
    with pytest.raises(InputError, match=r"detectors.nope: unknown key"):
        rules_from({"detectors": {"nope": 1}})
    with pytest.raises(InputError, match=r"rules: receivers: unknown table"):
        rules_from({"receivers": []})
    with pytest.raises(InputError, match="not valid TOML"):
        f.write_text("[[receiver]\n")
        load_rules(f)
    ok = rules_from({"detectors": {"rising_threshold": 6}, "evaluation": {"kinds": ["rising"]},
                     "receiver": [{"name": "a", "format": "slack", "url": "http://h/x"}]})
    assert ok.detectors.rising_threshold == 6.0 and ok.kinds == ("rising",)
    assert ok.receivers[0] == Receiver("a", "slack", "http://h/x")


def test_reconcile_dedups_resolves_and_silences() -> None:
    trans, refreshed = reconcile([], [_det("a"), _det("a"), _det("b")], NOW)
    assert [(t.alert.key, t.alert.state, t.silenced) for t in trans] == [
        ("new-group|signature=a", "firing", False), ("new-group|signature=b", "firing", False)]
    firing = [t.alert for t in trans]
    later = NOW + timedelta(hours=1)
    trans2, refreshed = reconcile(firing, [_det("a")], later)
    assert [(t.alert.key, t.alert.state, t.alert.ends_at) for t in trans2] == [
        ("new-group|signature=b", "resolved", later)]
    assert [a.key for a in refreshed] == ["new-group|signature=a"]
    mute = SilenceRecord("s", {"signature": "c"}, NOW, NOW + timedelta(days=1))
    (t3,), _ = reconcile([], [_det("c")], later, [mute])
    assert t3.silenced and t3.alert.state == "firing"


def test_delivery_retries_with_backoff_and_logs_every_attempt() -> None:
    hook = WebhookReceiver([503, 429])
    log: list[Any] = []
    waits: list[float] = []
    try:
        ok = deliver(sample_alert(NOW), Receiver("r", "json", hook.url + "/hook"),
                     Delivery(retries=3, backoff_seconds=0.5), log.append, sleep=waits.append)
        assert ok and waits == [0.5, 1.0]
        assert [(d.attempt, d.status, d.ok) for d in log] == [(1, 503, False), (2, 429, False),
                                                             (3, 200, True)]
        assert len(hook.bodies) == 3 and hook.bodies[0]["alert"]["kind"] == "new-group"
        # a 400 is final: no retry
        hook.script = [400]
        log.clear()
        assert not deliver(sample_alert(NOW), Receiver("r", "json", hook.url), Delivery(retries=3),
                           log.append, sleep=waits.append)
        assert [(d.status, d.error) for d in log] == [(400, "HTTP 400")]
    finally:
        hook.close()
    # nobody listening: connection errors, every retry logged, False
    log.clear()
    assert not deliver(sample_alert(NOW), Receiver("r", "json", hook.url), Delivery(retries=1),
                       log.append, sleep=lambda s: None)
    assert [d.status for d in log] == [0, 0] and "ConnectError" in log[0].error


def test_alertmanager_payload_is_valid_v2(hook: WebhookReceiver) -> None:
    defs = yaml.safe_load(SCHEMA.read_text())
    schema = {"$ref": "#/definitions/postableAlerts", **defs}
    alert = sample_alert(NOW)
    r = Receiver("am", "alertmanager", hook.url + "/api/v2/alerts")
    body = payload(alert, r, generator_url="http://coreepi/alerts")
    jsonschema.validate(body, schema, format_checker=jsonschema.FormatChecker())
    assert body[0]["labels"] == {"alertname": "new-group", "source": "coreepi",
                                 "kind": "new-group", "signature": "coreepi-test"}
    assert body[0]["startsAt"] == "2026-11-12T00:00:00Z" and "endsAt" not in body[0]
    assert deliver(alert, r, Delivery(), lambda d: None, generator_url="http://coreepi/alerts")
    assert hook.paths == ["/api/v2/alerts"] and hook.bodies == [body]
    bad = [{"labels": {"n": 3}}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def _am_schema() -> dict[str, Any]:
    return {"$ref": "#/definitions/postableAlerts", **yaml.safe_load(SCHEMA.read_text())}


def test_alertmanager_ends_at_firing_and_resolved() -> None:
    r = Receiver("am", "alertmanager", "http://127.0.0.1:9/api/v2/alerts")
    check = jsonschema.FormatChecker()
    firing = sample_alert(NOW)
    body = payload(firing, r, firing_until=NOW + timedelta(minutes=20))
    jsonschema.validate(body, _am_schema(), format_checker=check)
    assert (body[0]["startsAt"], body[0]["endsAt"]) == ("2026-11-12T00:00:00Z",
                                                        "2026-11-12T00:20:00Z")
    (resolved,) = [t.alert for t in reconcile([firing], [], NOW + timedelta(hours=3))[0]]
    body = payload(resolved, r, firing_until=NOW + timedelta(days=9))  # not for a resolved one
    jsonschema.validate(body, _am_schema(), format_checker=check)
    assert (body[0]["startsAt"], body[0]["endsAt"]) == ("2026-11-12T00:00:00Z",
                                                        "2026-11-12T03:00:00Z")
    broken = [{**body[0], "endsAt": "2026-11-12 03:00"}]  # not RFC 3339: the schema says no
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _am_schema(), format_checker=check)


def test_alertmanager_gets_firing_alerts_again_each_evaluation(
        tmp_path: Path, hook: WebhookReceiver) -> None:
    # Alertmanager resolves an alert whose endsAt passed: firing ones are re-sent to it
    # (and only to it) at every evaluation, valid 4 intervals; the resolution ends it
    f = TimelineFleet(hosts=60, days=40, groups=3, rate_range=(1, 1),
                      bad_hosts=(BadHost(host=5, day=25, rate=0.8),))
    rules = rules_from({"evaluation": {"kinds": ["hardware-suspect-host"], "interval_seconds": 600},
                        "receiver": [{"name": "am", "format": "alertmanager",
                                      "url": hook.url + "/api/v2/alerts"},
                                     {"name": "j", "format": "json", "url": hook.url + "/j"}]})
    now = datetime(2026, 11, 10, tzinfo=UTC)
    with DuckDBStore(tmp_path / "d") as store:
        write_timeline(store, make_timeline(f, seed=4))
        evaluate(store, rules, now, sleep=lambda s: None)
        evaluate(store, rules, now + timedelta(hours=1), sleep=lambda s: None)
        assert hook.paths == ["/api/v2/alerts", "/j", "/api/v2/alerts"]
        ends = [b[0]["endsAt"] for p, b in zip(hook.paths, hook.bodies, strict=True)
                if p.endswith("alerts")]
        assert ends == ["2026-11-10T00:40:00Z", "2026-11-10T01:40:00Z"]
        # 40 days later the host's crashes have left the span read: resolved
        evaluate(store, rules, now + timedelta(days=40), sleep=lambda s: None)
        last = hook.bodies[-2]
        assert hook.paths[-2:] == ["/api/v2/alerts", "/j"]
        assert last[0]["endsAt"] == "2026-12-20T00:00:00Z"
        jsonschema.validate(last, _am_schema(), format_checker=jsonschema.FormatChecker())


def test_slack_payload(hook: WebhookReceiver) -> None:
    body = payload(sample_alert(NOW), Receiver("s", "slack", hook.url))
    assert body["text"].startswith(":red_circle: [new-group] test alert")
    assert body["blocks"][0]["text"]["text"] == body["text"]


def test_evaluate_on_store_fires_once_delivers_and_rechecks_drain(
        tmp_path: Path, hook: WebhookReceiver) -> None:
    f = TimelineFleet(hosts=60, days=40, groups=3, rate_range=(1, 1),
                      bad_hosts=(BadHost(host=5, day=25, rate=0.8),))
    tl = make_timeline(f, seed=4)
    rules = rules_from({"evaluation": {"kinds": ["hardware-suspect-host"]},
                        "receiver": [{"name": "hook", "format": "json", "url": hook.url}]})
    now = datetime(2026, 11, 10, tzinfo=UTC)
    with DuckDBStore(tmp_path / "d") as store:
        write_timeline(store, tl)
        ev = evaluate(store, rules, now, sleep=lambda s: None)
        assert [t.alert.key for t in ev.transitions] == ["hardware-suspect-host|host_id=h00005"]
        assert "recommend: drain" in ev.transitions[0].alert.summary
        assert [b["alert"]["labels"]["host_id"] for b in hook.bodies] == ["h00005"]
        again = evaluate(store, rules, now + timedelta(hours=1), sleep=lambda s: None)
        assert again.transitions == [] and len(hook.bodies) == 1  # dedup: fired once
        assert [a.state for a in store.alerts()] == ["firing"]
        assert [d.ok for d in store.deliveries()] == [True]
        # drained: re-checked — its random signatures keep their pace on the others
        store.drain_host(DrainRecord("h00005", datetime(2026, 11, 1, tzinfo=UTC), "test"))
        ev = evaluate(store, rules, now + timedelta(hours=2), sleep=lambda s: None)
        check = ev.rechecks["h00005"]
        assert check["signatures"] == 3 and check["others_crashes_after"] > 0
        assert check["others_node_days_after"] == pytest.approx(59 * 9)  # exposure ends 11-10
        assert check["verdict"] == "undetermined"  # neither moved nor the host's own
        # its node-time over the span read (from 10-06) stops at the drain: 26 days;
        # repaired and undrained on 11-05, it counts again: 35 less the 4 drained
        (d,) = evaluate(store, rules, now, dry_run=True).detections
        assert d.evidence["node_days"] == pytest.approx(26.0)
        store.undrain_host("h00005", datetime(2026, 11, 5, tzinfo=UTC), "test")
        back = evaluate(store, rules, now, dry_run=True)
        assert back.detections[0].evidence["node_days"] == pytest.approx(31.0)
        assert back.rechecks == {}  # no longer drained: nothing to re-check


def test_evaluate_computes_the_covered_baseline_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # detect() and evaluate() each computed baseline_days_covered over the same frames
    import coreepi.epi.surveillance as detectors

    evaluation = importlib.import_module("coreepi.surveil.evaluate")  # the package's
    # ``evaluate`` attribute is the function

    calls: list[float] = []
    real = detectors.baseline_days_covered

    def counted(*args: Any, **kw: Any) -> float:
        calls.append(real(*args, **kw))
        return calls[-1]

    monkeypatch.setattr(detectors, "baseline_days_covered", counted)
    monkeypatch.setattr(evaluation, "baseline_days_covered", counted)
    # node-time from 10-25: 9 of the 28 baseline days before the window (11-03 to 11-10)
    tl = make_timeline(TimelineFleet(hosts=20, days=16, groups=3, rate_range=(1, 1),
                                     start="2026-10-25"), seed=4)
    rules = rules_from({"evaluation": {"kinds": ["new-group"]}})
    with DuckDBStore(tmp_path / "d") as store:
        write_timeline(store, tl)
        ev = evaluate(store, rules, datetime(2026, 11, 10, tzinfo=UTC), dry_run=True)
    assert calls == [pytest.approx(9.0)]
    assert ev.detections == []  # warming up: no group is new against 9 of 28 days
    assert ev.notes == [f"new-group: warming up — the store covers {calls[0]:.1f} of the 28 "
                        "baseline days before the window; a group is new only against a "
                        "whole baseline"]


def test_unbounded_ratio_reaches_the_webhook_as_json(hook: WebhookReceiver) -> None:
    # a rate ratio k/0 (no crash elsewhere): JSON has no infinity, the evidence says so
    ev = {**ratio_evidence(float("inf"), 24.4, float("inf")), "p_value": 1e-9,
          "share": 0.33, "reached": "2024-05-01"}
    d = Detection("rollout-regression",
                  {"signature": "s", "attribute": "kernel", "value": "6.1.0-13"},
                  pd.Timestamp(NOW), ev)
    (t,), _ = reconcile([], [d], NOW)
    assert t.alert.summary == ("s: rate unbounded (95% CI 24.4–unbounded) on kernel 6.1.0-13 "
                               "since it reached 33% of node-time on 2024-05-01")
    assert deliver(t.alert, Receiver("j", "json", hook.url), Delivery(retries=0), lambda r: None)
    got = hook.bodies[0]["alert"]["evidence"]
    assert (got["ratio"], got["lower"], got["upper"], got["ratio_status"]) == (
        None, 24.4, None, "unbounded")
    # Alertmanager annotations are strings: the missing bounds are left out, never "None"
    am = payload(t.alert, Receiver("am", "alertmanager", hook.url))[0]["annotations"]
    assert "None" not in am.values() and "ratio" not in am and "upper" not in am
    assert (am["lower"], am["ratio_status"]) == ("24.4", "unbounded")
    jsonschema.validate([{"labels": {"a": "b"}, "annotations": am}], _am_schema())


def test_failed_delivery_is_retried_at_the_next_evaluation(tmp_path: Path) -> None:
    # the json receiver answers 500 to the first post (no retry within the evaluation):
    # the next evaluation sends the still-firing alert again, then never more
    f = TimelineFleet(hosts=60, days=40, groups=3, rate_range=(1, 1),
                      bad_hosts=(BadHost(host=5, day=25, rate=0.8),))
    hook = WebhookReceiver(script=[500])
    try:
        rules = rules_from({"evaluation": {"kinds": ["hardware-suspect-host"]},
                            "delivery": {"retries": 0},
                            "receiver": [{"name": "j", "format": "json", "url": hook.url}]})
        now = datetime(2026, 11, 10, tzinfo=UTC)
        with DuckDBStore(tmp_path / "d") as store:
            write_timeline(store, make_timeline(f, seed=4))
            assert evaluate(store, rules, now, sleep=lambda s: None).failed == [
                ("j", "hardware-suspect-host|host_id=h00005")]
            again = evaluate(store, rules, now + timedelta(hours=1), sleep=lambda s: None)
            assert again.delivered == [("j", "hardware-suspect-host|host_id=h00005")]
            evaluate(store, rules, now + timedelta(hours=2), sleep=lambda s: None)
            assert len(hook.bodies) == 2
            assert [d.ok for d in store.deliveries()] == [False, True]
    finally:
        hook.close()


@pytest.mark.parametrize(("table", "key", "value", "accepted"), [
    ("evaluation", "interval_seconds", "0", "0 < x"),
    ("evaluation", "interval_seconds", "-5", "0 < x"),
    ("detectors", "host_alpha", "2.0", "0 < x < 1"),
    ("detectors", "rising_ratio", "0.5", "1 < x"),
    ("detectors", "window_days", "-1", "0 < x"),
    ("detectors", "rollout_share", "nan", "0 < x <= 1"),
    ("delivery", "retries", "-3", "0 <= x"),
    ("delivery", "timeout_seconds", "0", "0 < x"),
])
def test_rules_out_of_range_name_file_key_value_and_range(
        tmp_path: Path, table: str, key: str, value: str, accepted: str) -> None:
    f = tmp_path / "rules.toml"
    f.write_text(f"[{table}]\n{key} = {value}\n")
    with pytest.raises(InputError) as e:
        load_rules(f)
    shown = str(float(value)) if table != "delivery" or key != "retries" else value
    assert str(e.value) == (f"{f}: {table}.{key}: {shown} is out of range "
                            f"(accepted: {accepted})")


def test_rules_not_utf8_is_one_error_naming_the_file(tmp_path: Path) -> None:
    f = tmp_path / "rules.toml"
    f.write_bytes(b"[evaluation]\n# caf\xe9\ninterval_seconds = 60\n")
    with pytest.raises(InputError, match=r"rules.toml: not UTF-8 text \(byte 18\)"):
        load_rules(f)


def test_summaries_put_nouns_in_number() -> None:
    host = Detection("hardware-suspect-host", {"host_id": "h1"}, pd.Timestamp(NOW),
                     {"crashes": 1, "hardware_crashes": 1, "signatures": 1,
                      "node_days": 2.0, "expected": 0.01})
    assert alert_summary(host).startswith(
        "host h1 looks hardware-suspect: 1 crash (1 hardware-indicative, 1 signature) in 2.0")
    now = Detection("hardware-suspect-host", {"host_id": "h1"}, pd.Timestamp(NOW),
                    {"since": "2026-10-08T00:00:00+00:00", "crashes": 27, "hardware_crashes": 20,
                     "signatures": 2, "node_days": 30.0, "expected": 1.2, "alarm_crashes": 3})
    assert alert_summary(now) == (
        "host h1 looks hardware-suspect: 27 crashes (20 hardware-indicative, 2 signatures) since "
        "2026-10-08 00:00 UTC in 30.0 node-days where 1.20 were expected; the host test tipped "
        "on 2026-11-12 00:00 UTC after 3 crashes — recommend: drain")
    group = Detection("new-group", {"signature": "s"}, pd.Timestamp(NOW),
                      {"crashes": 1204, "hosts": 1, "first_seen": NOW.isoformat()})
    assert alert_summary(group) == (
        "new crash group s: 1,204 crashes on 1 host since 2026-11-12 00:00 UTC")


def test_phenotype_group_summaries_name_the_phenotype() -> None:
    new = Detection("new-group", {"phenotype": "stack-overflow"}, pd.Timestamp(NOW),
                    {"crashes": 3, "hosts": 2, "first_seen": NOW.isoformat()})
    assert alert_summary(new) == (
        "new crash group phenotype stack-overflow: 3 crashes on 2 hosts since 2026-11-12 00:00 UTC")
    rising = Detection("rising", {"phenotype": "null-deref"}, pd.Timestamp(NOW),
                       {"baseline_crashes": 56, "baseline_node_days": 28000.0, "run_crashes": 30,
                        "run_node_days": 5000.0, "run_start": NOW.isoformat(), "ratio": 3.0,
                        "ratio_status": "finite", "dispersion": 1.0, "statistic": 12.5})
    assert alert_summary(rising) == (
        "phenotype null-deref is rising: 6 crashes per 1,000 node-days since 2026-11-12 00:00 "
        "UTC against 2 in its baseline (×3.0, CUSUM 12.5)")
    assert rising.key == "rising|phenotype=null-deref"
