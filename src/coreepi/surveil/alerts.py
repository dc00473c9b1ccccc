"""Detections → alert transitions: dedup by key, firing/resolved, silences.

``reconcile`` is pure: given the alerts stored as firing and this
evaluation's detections, it returns what changed. An alert fires once per
key (a detection whose key is already firing only refreshes its evidence);
a firing alert whose detection is gone resolves; a resolved key detected
again fires again. Silences do not change the state, only whether a
transition is delivered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from coreepi.epi.surveillance import Detection
from coreepi.reporting.surveillance import alert_summary
from coreepi.store.alert_records import AlertRecord, SilenceRecord

__all__ = ["Transition", "labels_of", "reconcile"]


@dataclass(frozen=True)
class Transition:
    """An alert that changed: ``alert`` its new record, ``silenced`` by an active silence."""

    alert: AlertRecord
    silenced: bool


def labels_of(d: Detection) -> dict[str, str]:
    """The alert's labels: ``kind`` plus the detection's subject."""
    return {"kind": d.kind, **d.subject}


def reconcile(
    firing: list[AlertRecord],
    detections: list[Detection],
    now: datetime,
    silences: Sequence[SilenceRecord] = (),
    *,
    also_at: datetime | None = None,
) -> tuple[list[Transition], list[AlertRecord]]:
    """``(transitions, refreshed)``: transitions are new firings and
    resolutions (to store and deliver); refreshed are still-firing alerts
    with this evaluation's evidence (to store, not deliver). A transition is
    silenced by a silence active at ``now`` or at ``also_at`` (a replay's
    real time)."""

    def muted(labels: dict[str, str]) -> bool:
        return any(s.matches(labels, now) or (also_at is not None and s.matches(labels, also_at))
                   for s in silences)

    by_key = {a.key: a for a in firing}
    seen: set[str] = set()
    transitions: list[Transition] = []
    refreshed: list[AlertRecord] = []
    for d in detections:
        if d.key in seen:
            continue
        seen.add(d.key)
        labels = labels_of(d)
        evidence = dict(d.evidence)
        if d.key in by_key:
            refreshed.append(replace(by_key[d.key], evidence=evidence, summary=alert_summary(d),
                                     updated_at=now))
            continue
        alert = AlertRecord(d.key, d.kind, labels, alert_summary(d), evidence, "firing",
                            d.at.floor("us").to_pydatetime(), now)
        transitions.append(Transition(alert, muted(labels)))
    for key, a in by_key.items():
        if key not in seen:
            done = replace(a, state="resolved", ends_at=now, updated_at=now)
            transitions.append(Transition(done, muted(a.labels)))
    return transitions, refreshed
