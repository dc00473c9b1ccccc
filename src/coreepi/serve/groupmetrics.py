"""Per-group and alert gauges for ``/metrics``, read from the findings cache.

Cardinality is bounded: the ``top_n`` signature groups with the highest
rate get their own series (labels ``group`` = the signature, cut at 200
characters, and ``id`` = its page's group id), all the others are summed
into one ``group="other"`` series. Nothing here scans the store per
scrape: the numbers come from the latest findings snapshot
(:class:`~coreepi.serve.findings.Snapshot`) and are recomputed only when a
new snapshot is published; the firing alerts are one read of the small
alerts table.

``coreepi_group_rate_per_1000_node_days{group,id}``: crashes inside exposure
per 1,000 node-days of the whole fleet in the findings' window (the group's
``rate``: a crash outside exposure has no node-time in the denominator).
``coreepi_group_crashes{group,id}``: crashes in the window.
``coreepi_group_hosts_affected{group,id}``: distinct hosts with a crash of
the group (for ``other``: with a crash of any group outside the top N).
``coreepi_alerts_firing{kind}``: alerts firing, by kind (every kind, 0 too).
``coreepi_findings_age_seconds``: age of the snapshot these come from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coreepi.epi.models import GroupFinding
from coreepi.epi.surveillance import KINDS
from coreepi.serve.findings import FindingsCache, Snapshot, group_id
from coreepi.store.alert_records import AlertRecord

__all__ = ["GroupRow", "GroupsCollector", "group_rows"]

OTHER = "other"
LABEL_CHARS = 200


@dataclass(frozen=True)
class GroupRow:
    """One series: ``group`` label, ``id`` label ("" for other), crashes,
    rate per 1,000 node-days, hosts affected."""

    group: str
    id: str
    crashes: int
    rate_per_1000: float
    hosts: int


def group_rows(snap: Snapshot, top_n: int) -> list[GroupRow]:
    """The top ``top_n`` signature groups by rate, then ``other`` (always
    present once findings exist, zero when no group is left over). []
    before the first findings."""
    f = snap.findings
    if f is None:
        return []
    node_days = float(f.window.node_days)
    sigs = [g for g in f.groups if g.kind == "signature"]
    # the rate is crashes inside exposure / one fleet node-time: order by that count
    sigs.sort(key=lambda g: (-_inside(g), -g.crashes, g.key))
    top, rest = sigs[:top_n], sigs[top_n:]
    scale = 1000.0 / node_days if node_days > 0 else 0.0
    rows = [GroupRow(g.key[:LABEL_CHARS], group_id(g.kind, g.key), g.crashes,
                     _inside(g) * scale, g.hosts) for g in top]
    pairs = snap.signature_hosts
    hosts = 0
    if rest and pairs is not None and len(pairs):
        keep = pairs["signature"].isin({g.key for g in rest})
        hosts = int(pairs.loc[keep, "host_id"].nunique())
    crashes = sum(g.crashes for g in rest)
    rows.append(GroupRow(OTHER, "", crashes, sum(_inside(g) for g in rest) * scale, hosts))
    return rows


def _inside(g: GroupFinding) -> int:
    """The numerator of the group's rate (all its crashes from findings before 2.4.0)."""
    return g.crashes if g.crashes_in_exposure is None else g.crashes_in_exposure


class GroupsCollector(Collector):
    """A prometheus_client collector over ``cache`` (its latest snapshot,
    never waiting for one) and ``firing`` (a callable giving the firing
    alerts; called per scrape, off the event loop)."""

    def __init__(self, cache: FindingsCache, top_n: int,
                 firing: Callable[[], list[AlertRecord]]) -> None:
        self.cache = cache
        self.top_n = top_n
        self.firing = firing
        self._rows: tuple[datetime | None, list[GroupRow]] = (None, [])

    def _current(self) -> tuple[Snapshot, list[GroupRow]]:
        snap = self.cache.current()
        if self._rows[0] != snap.computed_at or snap.computed_at is None:
            self._rows = (snap.computed_at, group_rows(snap, self.top_n))
        return snap, self._rows[1]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap, rows = self._current()
        rate = GaugeMetricFamily("coreepi_group_rate_per_1000_node_days",
                                 "Crashes per 1,000 node-days of the fleet in the findings' window, "
                                 "top groups by rate plus 'other'.", labels=["group", "id"])
        crashes = GaugeMetricFamily("coreepi_group_crashes",
                                    "Crashes in the findings' window, top groups plus 'other'.",
                                    labels=["group", "id"])
        hosts = GaugeMetricFamily("coreepi_group_hosts_affected",
                                  "Distinct hosts with a crash of the group in the findings' "
                                  "window, top groups plus 'other'.", labels=["group", "id"])
        for r in rows:
            rate.add_metric([r.group, r.id], r.rate_per_1000)
            crashes.add_metric([r.group, r.id], r.crashes)
            hosts.add_metric([r.group, r.id], r.hosts)
        yield from (rate, crashes, hosts)
        alerts = GaugeMetricFamily("coreepi_alerts_firing", "Alerts firing, by kind.",
                                   labels=["kind"])
        counts = dict.fromkeys(KINDS, 0)
        for a in self.firing():
            counts[a.kind] = counts.get(a.kind, 0) + 1
        for kind, n in counts.items():
            alerts.add_metric([kind], n)
        yield alerts
        if snap.computed_at is not None:
            age = (datetime.now(UTC) - snap.computed_at).total_seconds()
            yield GaugeMetricFamily("coreepi_findings_age_seconds",
                                    "Age of the findings snapshot the group gauges come from.",
                                    value=age)
