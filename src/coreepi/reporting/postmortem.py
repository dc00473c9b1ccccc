"""The crash section of an incident review, from the store: ``coreepi postmortem``.

::

    pm = build_postmortem(store, since, until, hosts=["h-7"], attributes={"zone": "a"})
    text = render_postmortem(pm, "markdown", base_url="https://coreepi.example")

What it holds (:class:`Postmortem`): a timeline of crashes and telemetry
events in ``[since, until)``; the signature groups involved with their
verdict and evidence (from the same findings as ``coreepi report`` over the
window, and beside them the whole store's: a short window rarely holds enough
crashes to judge); the hosts with their crashes, hardware events, SIR and
verdict (the window's and the whole store's);
what changed in the window (:func:`rollouts`: attribute values whose share
of node-time moved); recommended actions. Renderings are in
:mod:`coreepi.reporting.postmortem_render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from coreepi.epi.models import FleetFindings, GroupFinding, HostFinding
from coreepi.reporting.build import build_findings
from coreepi.reporting.phrases import already_drained, evidence_text, how_many
from coreepi.store import Store
from coreepi.store.alert_records import DrainRecord

__all__ = ["Change", "Event", "Postmortem", "build_postmortem", "rollouts"]

MIN_SHARE_CHANGE = 0.2  # 20 points of node-time share
BINS = 4  # the window is cut in quarters to see a rollout progress
NOT_ATTRIBUTES = {"host_id", "start", "end", "seconds"}


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the timeline: a crash or a telemetry event."""

    ts: datetime
    host_id: str
    kind: str  # "crash" or the telemetry kind (mce, edac_ce, xid …)
    text: str
    hardware: bool = False
    crash_id: str | None = None
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """An attribute value whose share of node-time moved in the window
    (``share_before`` in the first quarter, ``share_after`` in the last;
    ``first_seen``: start of its first interval, for a value absent at first)."""

    attribute: str
    value: str
    share_before: float
    share_after: float
    first_seen: datetime | None


@dataclass(slots=True)
class Postmortem:
    since: datetime
    until: datetime
    scope: str
    timeline: list[Event]
    groups: list[GroupFinding]
    group_crashes: dict[str, int]  # signature: crashes in scope and window
    hosts: list[dict[str, Any]]
    changes: list[Change]
    actions: list[str] = field(default_factory=list)
    findings: FleetFindings | None = None
    """The window's findings (the fleet's crashes in [since, until))."""
    fleet: FleetFindings | None = None
    """The whole store's findings: the baseline a short window lacks (a bad
    host's 45 crashes, not the window's 2), shown beside the window's."""
    drains: dict[str, DrainRecord] = field(default_factory=dict)
    """The store's drained hosts by host_id: a drained suspect host's action
    is its diagnostics, not a drain."""

    def fleet_group(self, key: str) -> GroupFinding | None:
        """The whole store's finding of signature group ``key``."""
        return next((g for g in (self.fleet.groups if self.fleet else [])
                     if g.kind == "signature" and g.key == key), None)


def _selected_hosts(store: Store, exposure: pd.DataFrame, hosts: list[str] | None,
                    attributes: dict[str, str]) -> set[str] | None:
    """Hosts in scope: ``hosts`` if given, narrowed to those with every
    ``attribute=value`` (statically, or in an exposure interval of the
    window); None when the whole fleet is in scope."""
    if not hosts and not attributes:
        return None
    chosen = set(hosts) if hosts else None
    if attributes:
        static = store.hosts_frame()
        match: set[str] = set()
        for frame in (static, exposure):
            if frame.empty:
                continue
            mask = pd.Series(True, index=frame.index)
            for k, v in attributes.items():
                mask &= frame[k].astype(str) == v if k in frame else False
            match |= set(frame.loc[mask, "host_id"].astype(str))
        chosen = match if chosen is None else chosen & match
    return chosen


def rollouts(exposure: pd.DataFrame, since: datetime, until: datetime) -> list[Change]:
    """Attribute values whose share of node-time differs by at least
    :data:`MIN_SHARE_CHANGE` between the first and the last quarter of the
    window (a version, kernel or microcode rolled out, or rolled back).
    ``exposure``: intervals clipped to the window (``Store.exposure_frame``)."""
    if exposure.empty:
        return []
    edges = pd.date_range(since, until, periods=BINS + 1)
    out: list[Change] = []
    for attr in [c for c in exposure.columns if c not in NOT_ATTRIBUTES]:
        values = exposure[attr].astype(object).where(exposure[attr].notna(), None)
        shares = []
        for lo, hi in ((edges[0], edges[1]), (edges[-2], edges[-1])):
            start = exposure["start"].clip(lower=lo)
            end = exposure["end"].clip(upper=hi)
            secs = (end - start).dt.total_seconds().clip(lower=0)
            total = float(secs[values.notna()].sum())
            by_value = secs.groupby(values.astype(str)).sum() if total else pd.Series(dtype=float)
            shares.append({str(k): float(v) / total for k, v in by_value.items()
                           if k != "None"} if total else {})
        before, after = shares
        for value in sorted(set(before) | set(after)):
            a, b = before.get(value, 0.0), after.get(value, 0.0)
            if abs(b - a) >= MIN_SHARE_CHANGE:
                # first seen only for a value that arrived in the window
                starts = exposure.loc[values.astype(str) == value, "start"]
                out.append(Change(attr, value, a, b, starts.min().to_pydatetime()
                                  if len(starts) and not a else None))
    return sorted(out, key=lambda c: (-(c.share_after - c.share_before), c.attribute, c.value))


def _timeline(crashes: pd.DataFrame, telemetry: pd.DataFrame) -> list[Event]:
    events = [Event(r.captured_at.to_pydatetime(), str(r.host_id), "crash",
                    f"{r.signal_name} {r.signature}" if r.signal_name else str(r.signature),
                    crash_id=str(r.crash_id), signature=r.signature)
              for r in crashes.assign(signal_name=crashes.get("signal", pd.Series(
                  dtype=object)).astype(object).where(lambda s: s.notna(), None)
              ).itertuples()]
    events += [Event(r.ts.to_pydatetime(), str(r.host_id), str(r.kind), str(r.summary),
                     hardware=bool(r.hardware_indicative)) for r in telemetry.itertuples()]
    return sorted(events, key=lambda e: (e.ts, e.host_id, e.kind))


def _host_rows(crashes: pd.DataFrame, telemetry: pd.DataFrame, found: dict[str, HostFinding],
               fleet: dict[str, HostFinding]) -> list[dict[str, Any]]:
    """One row per host in scope: its crashes and events in the window, and
    the window's and the whole store's SIR and verdict (``fleet_*``)."""
    ids = sorted(set(crashes["host_id"].astype(str)) | set(telemetry["host_id"].astype(str)))
    rows = []
    for hid in ids:
        f = found.get(hid)
        tel = telemetry[telemetry["host_id"].astype(str) == hid]
        rows.append({
            "host_id": hid,
            "crashes": int((crashes["host_id"].astype(str) == hid).sum()),
            "hardware_events": int(tel["hardware_indicative"].fillna(False).astype(bool).sum()),
            "events": len(tel),
            "sir": f.sir if f else None,
            "verdict": f.attribution.verdict if f else None,
            "evidence": evidence_text(f.attribution.evidence[0]) if f and f.attribution.evidence
            else None,
            **_fleet_host(fleet.get(hid)),
        })
    return sorted(rows, key=lambda r: ("hardware-suspect" not in (r["verdict"],
                                                                  r["fleet_verdict"]),
                                       -r["crashes"], r["host_id"]))


def _fleet_host(f: HostFinding | None) -> dict[str, Any]:
    return {"fleet_crashes": f.crashes if f else None,
            "fleet_verdict": f.attribution.verdict if f else None,
            "fleet_evidence": evidence_text(f.attribution.evidence[0])
            if f and f.attribution.evidence else None}


def _trigger(g: GroupFinding) -> str | None:
    """``attribute=value`` that the environment-triggered verdict of ``g``
    rests on: its evidence's first statement for that verdict naming an
    attribute value (the group's other associations, e.g. load, are not the
    verdict's reason), else None."""
    for e in g.attribution.evidence:
        if e.supports == "environment-triggered" and e.attribute and e.level is not None:
            return f"{e.attribute}={e.level}"
    return None


def _actions(pm: Postmortem) -> list[str]:
    """What to do, from the verdicts and the changes (hardware first)."""
    out = []
    for h in pm.hosts:
        if h["verdict"] == "hardware-suspect":
            why = (f"{how_many(h['hardware_events'], 'hardware event')} in the window" if
                   h["hardware_events"] else "its crash rate and signatures")
        elif h["fleet_verdict"] == "hardware-suspect":
            why = f"hardware-suspect over the whole store: {h['fleet_evidence']}"
        else:
            continue
        drain = pm.drains.get(h["host_id"])
        if drain is not None:
            state = already_drained(drain.drained_at, drain.drained_by)
            out.append(f"Host {h['host_id']} is {state}: run the vendor's diagnostics ({why}); "
                       f"replace the part they name, then `coreepi host undrain {h['host_id']}`.")
            continue
        out.append(f"Drain host {h['host_id']} and run the vendor's diagnostics "
                   f"({why}); replace the part they name.")
    for g in pm.groups:
        verdict, over = g.attribution.verdict, ""
        whole = pm.fleet_group(g.key)
        if verdict == "undetermined" and whole is not None:
            # too few crashes in the window to judge: the whole store's verdict
            g, verdict, over = whole, whole.attribution.verdict, ", over the whole store"
        if verdict == "environment-triggered":
            trigger = _trigger(g)
            cond = f" (rate raised with {trigger}{over})" if trigger else ""
            out.append(f"Check the trigger of `{g.key}`{cond}: compare it with the fleet.")
        elif verdict == "software":
            out.append(f"File or link a bug for `{g.key}` ({how_many(g.crashes, 'crash')} on "
                       f"{how_many(g.hosts, 'host')}); it is a software defect, not the "
                       "machines.")
    for c in pm.changes:
        if c.share_after > c.share_before:
            tied = [g.key for g in pm.groups for a in g.associations
                    if a.attribute == c.attribute and a.value == c.value and a.irr and a.irr > 1
                    and a.q_value is not None and a.q_value <= 0.05]
            if tied:
                out.append(f"Pause the rollout of {c.attribute}={c.value} "
                           f"({c.share_before:.0%} → {c.share_after:.0%} of node-time): "
                           f"associated with {', '.join(f'`{k}`' for k in tied)}.")
    return out or ["No action: no hardware-suspect host, no group needing one."]


def build_postmortem(store: Store, since: datetime, until: datetime, *,
                     hosts: list[str] | None = None,
                     attributes: dict[str, str] | None = None) -> Postmortem:
    """The postmortem of ``[since, until)`` for the hosts in scope (all when
    neither ``hosts`` nor ``attributes`` is given)."""
    attributes = attributes or {}
    exposure = store.exposure_frame(since, until)
    scope_hosts = _selected_hosts(store, exposure, hosts, attributes)
    crashes = store.crash_frame(since, until)
    telemetry = store.telemetry_frame(since, until)
    if scope_hosts is not None:
        crashes = crashes[crashes["host_id"].astype(str).isin(scope_hosts)]
        telemetry = telemetry[telemetry["host_id"].astype(str).isin(scope_hosts)]
        exposure = exposure[exposure["host_id"].astype(str).isin(scope_hosts)]
    findings = build_findings(store, since, until) if len(crashes) else None
    fleet = build_findings(store) if len(crashes) else None
    counts = crashes["signature"].dropna().astype(str).value_counts().to_dict()
    groups = [g for g in (findings.groups if findings else [])
              if g.kind == "signature" and g.key in counts]
    groups.sort(key=lambda g: (-counts[g.key], g.key))
    found = {h.host_id: h for h in (findings.hosts if findings else [])}
    scope = ", ".join([*(f"host {h}" for h in hosts or []),
                       *(f"{k}={v}" for k, v in attributes.items())]) or "the whole fleet"
    pm = Postmortem(since=since, until=until, scope=scope,
                    timeline=_timeline(crashes, telemetry), groups=groups,
                    group_crashes={k: int(v) for k, v in counts.items()},
                    hosts=_host_rows(crashes, telemetry, found,
                                     {h.host_id: h for h in (fleet.hosts if fleet else [])}),
                    changes=rollouts(exposure, since, until), findings=findings, fleet=fleet,
                    drains={d.host_id: d for d in store.drained_hosts()})
    pm.actions = _actions(pm)
    return pm
