"""One evaluation: read the store, run the detectors, update alerts, deliver.

``coreepi watch`` and ``coreepi serve`` call :func:`evaluate` on a
schedule; ``coreepi alerts test`` calls :func:`send_test`. The frames read
are the baseline + monitoring span up to ``now``
(:func:`coreepi.epi.surveillance.windows`); drained hosts' exposure is cut
at their drain time, and the span of every ended drain (a host undrained)
stays cut.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pandas as pd

from coreepi.epi.surveillance import (
    WARMUP_SLACK_DAYS,
    Detection,
    baseline_days_covered,
    detect,
    drain_recheck,
)
from coreepi.store.alert_records import AlertRecord, DeliveryRecord
from coreepi.store.base import Store
from coreepi.surveil.alerts import Transition, reconcile
from coreepi.surveil.delivery import deliver
from coreepi.surveil.rules import Rules

__all__ = ["Evaluation", "evaluate", "sample_alert", "send_test"]


@dataclass
class Evaluation:
    """What one evaluation did: detections, transitions (fired / resolved),
    deliveries that succeeded and failed (receiver, alert key; with the
    re-sends of still-firing alerts to Alertmanager receivers and to receivers
    whose earlier deliveries failed), and the
    re-check of every drained host (:func:`coreepi.epi.surveillance.drain_recheck`
    evidence, by host)."""

    now: datetime
    detections: list[Detection] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    delivered: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    rechecks: dict[str, dict[str, float | int | str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What the evaluation could not do yet (a detector warming up), one sentence each."""


# an Alertmanager alert stays firing this many evaluation intervals after it was
# last sent (Prometheus uses 4 × its resend delay / evaluation interval)
FIRING_INTERVALS = 4


def _taken(store: Store, alert: AlertRecord) -> set[str]:
    """The receivers that took ``alert``'s current state: its delivery log holds a
    successful delivery of that state to them. The others are owed it (their
    delivery failed, or the evaluation that fired it stopped before delivering).
    Only the log since the key last resolved counts: a key firing again is a new alert."""
    log = store.deliveries(alert.key)
    since = max((i for i, d in enumerate(log) if d.state == "resolved"), default=-1) + 1
    return {d.receiver for d in log[since:] if d.ok and d.state == alert.state}


def _deliver_all(store: Store, rules: Rules, transitions: list[Transition],
                 still_firing: list[Transition], ev: Evaluation,
                 client: httpx.Client | None, sleep: Callable[[float], None]) -> None:
    """Transitions to every receiver; alerts still firing again to the
    Alertmanager receivers (their ``endsAt`` would lapse otherwise) and to any
    receiver that has not taken them yet (its deliveries failed: retried at
    every evaluation until one succeeds)."""
    until = ev.now + timedelta(seconds=FIRING_INTERVALS * rules.interval_seconds)
    for t, again in [(t, False) for t in transitions] + [(t, True) for t in still_firing]:
        if t.silenced:
            continue
        taken = _taken(store, t.alert) if again else set()
        for r in rules.receivers:
            if r.kinds and t.alert.kind not in r.kinds:
                continue
            if again and r.format != "alertmanager" and r.name in taken:
                continue
            ok = deliver(t.alert, r, rules.delivery, store.add_delivery, client=client,
                         sleep=sleep, firing_until=until)
            (ev.delivered if ok else ev.failed).append((r.name, t.alert.key))


def evaluate(
    store: Store,
    rules: Rules,
    now: datetime | None = None,
    *,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    dry_run: bool = False,
) -> Evaluation:
    """Evaluate every detector of ``rules.kinds`` at ``now`` (default: the
    current time, UTC), store the alert changes, deliver them (``dry_run``:
    neither; the transitions are still computed against the stored alerts).
    A silence mutes an alert when it is active at ``now`` or at the real time
    of delivery (a replay of the past honours today's silences). One
    evaluation at a time per store (:meth:`~coreepi.store.interfaces.AlertStore.evaluation_lock`):
    when another evaluator (a second ``coreepi serve`` replica) holds it, this
    one does nothing and says so in ``notes`` — that one delivers. Raises
    :class:`~coreepi.errors.StoreError` when the store cannot be read."""
    if dry_run:
        return _evaluate(store, rules, now, client, sleep, dry_run=True)
    with store.evaluation_lock() as mine:
        if mine:
            return _evaluate(store, rules, now, client, sleep, dry_run=False)
    ev = Evaluation(now or datetime.now(UTC))
    ev.notes.append("another evaluator holds this store's evaluation (a second replica): "
                    "it stores and delivers this round, this one skipped it")
    return ev


def _evaluate(store: Store, rules: Rules, now: datetime | None, client: httpx.Client | None,
              sleep: Callable[[float], None], *, dry_run: bool) -> Evaluation:
    """:func:`evaluate`'s work, under the evaluation lock unless ``dry_run``."""
    real_now = datetime.now(UTC)
    now = now or real_now
    p = rules.detectors
    since = now - timedelta(days=p.baseline_days + p.window_days)
    crashes = store.crash_frame(since=since, until=now + timedelta(microseconds=1))
    exposure = store.exposure_frame(since=since, until=now)
    drained = {d.host_id: pd.Timestamp(d.drained_at) for d in store.drained_hosts()}
    ended = [(d.host_id, pd.Timestamp(d.drained_at), pd.Timestamp(d.undrained_at))
             for d in store.drain_history() if d.undrained_at and d.undrained_at > since]
    ev = Evaluation(now)
    known = store.signatures_before(since)
    # once per evaluation: detect() gates new-group on it, the note below says it
    covered = baseline_days_covered(crashes, exposure, pd.Timestamp(now), p,
                                    older_data=bool(known))
    ev.detections = detect(crashes, exposure, pd.Timestamp(now), p, known_signatures=known,
                           drained=drained, ended_drains=ended, kinds=rules.kinds,
                           covered=covered)
    if "new-group" in rules.kinds and covered < p.baseline_days - WARMUP_SLACK_DAYS:
        ev.notes.append(f"new-group: warming up — the store covers {covered:.1f} of the "
                        f"{p.baseline_days:g} baseline days before the window; a group is new "
                        "only against a whole baseline")
    silences = store.silences(active_at=now)
    if real_now > now:  # a replay: today's silences too
        seen = {s.silence_id for s in silences}
        silences += [s for s in store.silences(active_at=real_now) if s.silence_id not in seen]
    ev.transitions, refreshed = reconcile(store.alerts("firing"), ev.detections, now, silences,
                                          also_at=real_now)
    if not dry_run:
        for a in [t.alert for t in ev.transitions] + refreshed:
            store.put_alert(a)
        still = [Transition(a, any(s.matches(a.labels, now) or s.matches(a.labels, real_now)
                                   for s in silences)) for a in refreshed]
        _deliver_all(store, rules, ev.transitions, still, ev, client, sleep)
    ts_now = pd.Timestamp(now)
    ev.rechecks = {host: drain_recheck(crashes, exposure, host, at, ts_now, p)
                   for host, at in drained.items() if at < ts_now}
    return ev


def sample_alert(now: datetime | None = None) -> AlertRecord:
    """A made-up firing alert (kind ``new-group``, signature ``coreepi-test``)."""
    now = now or datetime.now(UTC)
    return AlertRecord("new-group|signature=coreepi-test", "new-group",
                       {"kind": "new-group", "signature": "coreepi-test"},
                       "test alert from coreepi alerts test: new crash group coreepi-test",
                       {"crashes": 3, "hosts": 2}, "firing", now, now)


def send_test(store: Store, rules: Rules, *, client: httpx.Client | None = None,
              sleep: Callable[[float], None] = time.sleep) -> list[DeliveryRecord]:
    """Send :func:`sample_alert` to every receiver (every attempt logged like
    any delivery); the last attempt of each receiver, in the rules' order
    (``ok``; else ``error``: the reason, and ``attempt``: how many were made)."""
    alert = sample_alert()
    last: list[DeliveryRecord] = []

    def log(record: DeliveryRecord) -> None:
        store.add_delivery(record)
        last.append(record)

    out = []
    for r in rules.receivers:
        deliver(alert, r, rules.delivery, log, client=client, sleep=sleep)
        out.append(last[-1])
    return out
