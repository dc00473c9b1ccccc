"""Posting alert transitions to webhooks: three payload formats, retries with backoff.

Formats (``Receiver.format``):

* ``json`` — coreepi's own: ``{"version": "1", "receiver", "status",
  "alert": {key, kind, labels, summary, evidence, startsAt, endsAt}}``;
* ``slack`` — a Slack incoming-webhook message (``text`` plus one mrkdwn
  ``section`` block), which Mattermost and Rocket.Chat also accept;
* ``alertmanager`` — Prometheus Alertmanager's API v2 ``POST /api/v2/alerts``
  body: a list of ``postableAlert`` (labels and annotations as string maps,
  ``startsAt``/``endsAt`` RFC 3339, ``generatorURL``); the tests validate it against the schema's
  vendored part (``tests/data/alertmanager/postable-alerts.yaml``).
  The receiver URL is the full endpoint (``http://am:9093/api/v2/alerts``).
  ``startsAt`` is when the evidence first sufficed. A resolved alert's
  ``endsAt`` is when it resolved. A firing alert's ``endsAt`` is
  ``firing_until``: Alertmanager resolves an alert by itself once its
  ``endsAt`` passes (or ``resolve_timeout``, 5 min, after it was last sent
  without one), so, as Prometheus does, the evaluation re-sends every firing
  alert to Alertmanager receivers each time, valid for a few intervals.

A delivery is retried on a connection error, a timeout, 429 and 5xx, up to
``Delivery.retries`` times, waiting ``backoff_seconds · 2^n`` before retry n+1;
any other 4xx is final (the payload will not get better). Every attempt is
logged as a :class:`~coreepi.store.alert_records.DeliveryRecord`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from coreepi.store.alert_records import AlertRecord, DeliveryRecord
from coreepi.surveil.rules import Delivery, Receiver

__all__ = ["deliver", "payload"]


def _rfc3339(ts: datetime | None) -> str | None:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z") if ts is not None else None


def _strings(d: dict[str, Any]) -> dict[str, str]:
    """Annotation values are strings; a missing value (an unbounded ratio's None) is left
    out rather than sent as the word "None" (its status key says why)."""
    return {k: v if isinstance(v, str) else f"{v:.6g}" if isinstance(v, float) else str(v)
            for k, v in d.items() if v is not None}


def payload(alert: AlertRecord, receiver: Receiver, generator_url: str = "",
            firing_until: datetime | None = None) -> Any:
    """The JSON body for ``receiver``'s format. ``firing_until``: the
    ``endsAt`` of a firing alert for Alertmanager (None: left out)."""
    if receiver.format == "alertmanager":
        body: dict[str, Any] = {
            "labels": {"alertname": alert.kind, "source": "coreepi", **alert.labels},
            "annotations": {"summary": alert.summary, **_strings(alert.evidence)},
            "startsAt": _rfc3339(alert.starts_at),
        }
        if alert.state == "resolved":
            body["endsAt"] = _rfc3339(alert.ends_at or alert.updated_at)
        elif firing_until is not None:
            body["endsAt"] = _rfc3339(firing_until)
        if generator_url:
            body["generatorURL"] = generator_url
        return [body]
    if receiver.format == "slack":
        mark = ":large_green_circle: RESOLVED" if alert.state == "resolved" else ":red_circle:"
        text = f"{mark} [{alert.kind}] {alert.summary}"
        return {"text": text, "blocks": [{"type": "section",
                                          "text": {"type": "mrkdwn", "text": text}}]}
    return {"version": "1", "receiver": receiver.name, "status": alert.state,
            "alert": {"key": alert.key, "kind": alert.kind, "labels": alert.labels,
                      "summary": alert.summary, "evidence": alert.evidence,
                      "startsAt": _rfc3339(alert.starts_at), "endsAt": _rfc3339(alert.ends_at)}}


def _retryable(status: int) -> bool:
    return status == 0 or status == 429 or status >= 500


def deliver(
    alert: AlertRecord,
    receiver: Receiver,
    settings: Delivery,
    log: Callable[[DeliveryRecord], None],
    *,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    generator_url: str = "",
    firing_until: datetime | None = None,
) -> bool:
    """Post ``alert`` to ``receiver`` with retries; True once a 2xx came back.
    Each attempt is passed to ``log``; never raises for a failed delivery.
    ``firing_until``: see :func:`payload`."""
    body = payload(alert, receiver, generator_url, firing_until)
    own = client is None
    http = client or httpx.Client(timeout=settings.timeout_seconds)
    try:
        for attempt in range(settings.retries + 1):
            if attempt:
                sleep(settings.backoff_seconds * 2 ** (attempt - 1))
            try:
                status, error = http.post(receiver.url, json=body).status_code, ""
            except httpx.HTTPError as e:
                status, error = 0, f"{type(e).__name__}: {e}"
            ok = 200 <= status < 300
            if not ok and not error:
                error = f"HTTP {status}"
            log(DeliveryRecord(alert.key, receiver.name, alert.state, attempt + 1,
                               datetime.now(UTC), status, ok, error))
            if ok:
                return True
            if not _retryable(status):
                return False
        return False
    finally:
        if own:
            http.close()
