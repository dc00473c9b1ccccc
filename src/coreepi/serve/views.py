"""The fleet pages' data: overview, groups, one group, hosts — from the findings snapshot.

Each ``*_view`` returns a JSON-ready dict: what ``/PAGE.json`` answers and
what the page's template renders (charts are drawn from the same dict). The
views read the :class:`~coreepi.serve.findings.Snapshot` only; the group
page's crash list is one indexed store read, passed in by the route.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any
from urllib.parse import quote

from coreepi.epi import Association, Attribution, GroupFinding, HostFinding
from coreepi.reporting.phrases import (
    already_drained,
    evidence_text,
    how_many,
    hosts_phrase,
    rates_note,
)
from coreepi.serve.findings import SignatureCount, Snapshot, group_id
from coreepi.store.alert_records import DrainRecord

__all__ = [
    "GroupFilter",
    "crash_href",
    "evidence_rows",
    "group_row",
    "group_href",
    "group_view",
    "groups_view",
    "host_href",
    "hosts_view",
    "overview_view",
    "recommendation",
    "signature_view",
    "status",
    "trigger",
]

TOP_SOFTWARE = 10
PAGE_ROWS = 100
SORTS = ("rate", "crashes", "hosts", "first_seen", "last_seen", "signature")


def group_href(gid: str) -> str:
    return f"/groups/{gid}"


def host_href(host_id: str) -> str:
    return f"/hosts/{quote(host_id, safe='')}"


def crash_href(crash_id: str) -> str:
    return f"/crashes/{quote(crash_id, safe='')}"


def status(snap: Snapshot, wanted: int) -> dict[str, Any]:
    """How fresh the findings are: ``computed_at``, ``seconds`` (cost of the
    refresh), ``stale`` (data arrived since), ``error`` (last refresh failed)."""
    return {"computed_at": snap.computed_at.isoformat() if snap.computed_at else None,
            "seconds": round(snap.seconds, 3), "stale": snap.covers < wanted,
            "error": snap.error, "ready": snap.findings is not None}


def evidence_rows(att: Attribution, n: int | None = None) -> list[dict[str, Any]]:
    """An attribution's evidence: its data (JSON) and the sentence
    :func:`coreepi.reporting.phrases.evidence_text` words it as (``text``)."""
    return [{**e.model_dump(mode="json"), "text": evidence_text(e)} for e in att.evidence[:n]]


def recommendation(host: HostFinding, drain: DrainRecord | None = None) -> str | None:
    """What to do with a host, from its verdict. A hardware-suspect host is
    drained at once ("already drained …" once ``drain`` says it is); "replace"
    only when the machine itself confirms it (hardware-indicative telemetry
    before its crashes: MCE, EDAC, Xid, AER), else the part is tested first.
    An environment-triggered host: check its configuration. Others: none."""
    verdict = host.attribution.verdict
    if verdict == "hardware-suspect" and drain is not None:
        return (f"{already_drained(drain.drained_at, drain.drained_by)}: run the vendor's "
                "diagnostics; undrain it once repaired")
    if verdict == "hardware-suspect":
        tel = host.telemetry
        if tel is not None and tel.hardware_events:
            return (f"replace: drain now; {how_many(tel.hardware_events, 'hardware event')} "
                    "(MCE/EDAC/Xid/AER) preceded its crashes")
        return "drain: take it out of service and run the vendor's diagnostics"
    if verdict == "environment-triggered":
        return "check its configuration (kernel, firmware, version) against the fleet"
    return None


def trigger(group: GroupFinding, fdr_q: float) -> Association | None:
    """The attribute value that most raises a group's rate: significant
    (q ≤ ``fdr_q``), elevated, environment attributes first, then smallest p."""
    cands = [a for a in group.associations
             if a.q_value is not None and a.q_value <= fdr_q
             and (a.irr_status == "unbounded" or (a.irr is not None and a.irr > 1.0))]
    cands.sort(key=lambda a: (a.attribute_class != "environment",
                              a.p_value if a.p_value is not None else 2.0))
    return cands[0] if cands else None


def _assoc(a: Association) -> dict[str, Any]:
    return {**a.model_dump(mode="json"), "label": f"{a.attribute}={a.value}"}


def group_row(snap: Snapshot, g: GroupFinding) -> dict[str, Any]:
    """A group's row of the pages; ``rate_note``: why its rate is not shown (the
    window's :func:`~coreepi.reporting.phrases.rates_note`), else None."""
    gid = group_id(g.kind, g.key)
    ev = g.attribution.evidence
    assert snap.findings is not None
    return {
        "id": gid, "href": group_href(gid), "kind": g.kind, "key": g.key,
        "crashes": g.crashes, "crashes_in_exposure": g.crashes_in_exposure, "hosts": g.hosts,
        "rate": g.rate, "rate_lower": g.rate_lower, "rate_upper": g.rate_upper,
        "rate_note": rates_note(snap.findings), "verdict": g.attribution.verdict,
        "evidence": evidence_text(ev[0]) if ev else None,
        "first_seen": g.first_seen.isoformat() if g.first_seen else None,
        "last_seen": g.last_seen.isoformat() if g.last_seen else None,
        "phenotypes": snap.phenotypes_by_signature.get(g.key, {}) if g.kind == "signature" else {},
        "curve": [p.model_dump(mode="json") for p in g.epidemic_curve],
        "top_host": g.concentration.top_host,
        "top_host_href": host_href(g.concentration.top_host) if g.concentration.top_host else None,
        "top_host_share": g.concentration.top_host_share,
    }


def _rate_count(g: GroupFinding) -> int:
    """The numerator of a group's rate (all its crashes from a producer before 2.4.0)."""
    return g.crashes if g.crashes_in_exposure is None else g.crashes_in_exposure


def _host_row(h: HostFinding, drained: dict[str, DrainRecord]) -> dict[str, Any]:
    return {"host_id": h.host_id, "href": host_href(h.host_id), "crashes": h.crashes,
            "expected": h.expected, "sir": h.sir, "sir_lower": h.sir_lower,
            "sir_upper": h.sir_upper, "sir_status": h.sir_status, "p_value": h.p_value, "verdict": h.attribution.verdict,
            "recommendation": recommendation(h, drained.get(h.host_id)),
            "evidence": evidence_rows(h.attribution, 4),
            "hardware_phenotypes": [p.model_dump() for p in h.hardware_phenotypes],
            "distinct_signatures": h.distinct_signatures}


def _axis(snap: Snapshot) -> dict[str, str]:
    f = snap.findings
    assert f is not None
    first = f.window.since.date()
    last = max(first, (f.window.until - timedelta(microseconds=1)).date())
    return {"first": first.isoformat(), "last": last.isoformat()}


def overview_view(snap: Snapshot, drained: dict[str, DrainRecord]) -> dict[str, Any]:
    """The answer first: hardware-suspect hosts (with a recommendation;
    ``drained``: the drained hosts by id, not told to drain again),
    environment-triggered groups (with their trigger), top software groups
    by rate, fleet incidence with its CI and epidemic curve. ``rates_note``: why
    the window shows no rate (no or thin exposure, said once in place of the
    incidence; the group tables then have no rate column), else None."""
    f = snap.findings
    if f is None:
        return {"ready": False}
    fdr_q = float(f.config.get("fdr_q", 0.05))
    sig = [g for g in f.groups if g.kind == "signature"]
    env = []
    for g in sig:
        if g.attribution.verdict == "environment-triggered":
            t = trigger(g, fdr_q)
            env.append({**group_row(snap, g), "trigger": _assoc(t) if t else None})
    shown = rates_note(f) is None
    software = sorted((g for g in sig if g.attribution.verdict == "software"),
                      key=lambda g: (-_rate_count(g) if shown else 0, -g.crashes, g.key)
                      )[:TOP_SOFTWARE]
    hw_groups = [g for g in sig if g.attribution.verdict == "hardware-suspect"]
    return {
        "ready": True,
        "window": f.window.model_dump(mode="json"),
        "rate_per": f.config.get("rate_per", 1000),
        "rates_note": rates_note(f), "hosts_phrase": hosts_phrase(f),
        "axis": _axis(snap),
        "fleet_curve": snap.fleet_curve,
        "hardware_hosts": [_host_row(h, drained) for h in f.hosts
                           if h.attribution.verdict == "hardware-suspect"],
        "environment_groups": env,
        "hardware_groups": [group_row(snap, g) for g in hw_groups],
        "software_groups": [group_row(snap, g) for g in software],
        "signatures": f.window.signature_groups, "analysed": len(sig),
        "notes": f.notes,
    }


@dataclass(frozen=True)
class GroupFilter:
    """The groups page's state, all in the URL: ``verdict``, ``phenotype``,
    ``attr`` (``name=value``: groups with crashes at that value), ``since`` /
    ``until`` (UTC days, both included: groups with a crash then; a group's
    numbers stay the window's, its crashes in the range are counted beside),
    ``q`` (signature substring, case-insensitive), ``host`` (host id
    substring, case-insensitive: groups with a crash on a matching host, those
    crashes counted beside), ``sort`` / ``desc``, ``page`` (1-based,
    :data:`PAGE_ROWS` rows a page)."""

    verdict: str | None = None
    phenotype: str | None = None
    attr: str | None = None
    since: date | None = None
    until: date | None = None
    q: str | None = None
    host: str | None = None
    sort: str = "rate"
    desc: bool = True
    page: int = 1

    def params(self, **change: Any) -> dict[str, str]:
        """The URL query of this state with ``change`` applied (None drops a key).
        A change other than ``page`` goes back to the first page."""
        out = {k: getattr(self, k) for k in ("verdict", "phenotype", "attr", "since", "until",
                                             "q", "host", "sort")}
        out["desc"] = "1" if self.desc else "0"
        out["page"] = self.page if self.page > 1 and (not change or "page" in change) else None
        out.update(change)
        return {k: str(v) for k, v in out.items() if v not in (None, "")}


def _on_hosts(snap: Snapshot, flt: GroupFilter) -> dict[str, int] | None:
    """{signature: its window's crashes on the hosts whose id contains
    ``flt.host``} (signatures with none left out); None: no host filter."""
    if not flt.host:
        return None
    pairs = snap.signature_hosts
    if pairs is None or pairs.empty:
        return {}
    keep = pairs["host_id"].str.contains(flt.host, case=False, regex=False)
    counts = pairs.loc[keep].groupby("signature", observed=True)["crashes"].sum()
    return {str(k): int(v) for k, v in counts.items() if v}


def _matches(snap: Snapshot, g: GroupFinding, flt: GroupFilter, on: dict[str, int] | None,
             skip: str = "") -> bool:
    if on is not None and g.key not in on:
        return False
    if flt.verdict and skip != "verdict" and g.attribution.verdict != flt.verdict:
        return False
    if flt.phenotype and skip != "phenotype" and not snap.phenotypes_by_signature.get(
            g.key, {}).get(flt.phenotype):
        return False
    if flt.q and flt.q.lower() not in g.key.lower():
        return False
    if flt.attr and skip != "attr":
        name, _, value = flt.attr.partition("=")
        if not any(a.attribute == name and a.value == value and a.crashes
                   for a in g.associations):
            return False
    if flt.since or flt.until:
        lo, hi = flt.since or date.min, flt.until or date.max
        if not any(lo <= p.day <= hi for p in g.epidemic_curve):
            return False
    return True


def _in_range(g: GroupFinding, flt: GroupFilter) -> int | None:
    """The group's crashes on the filter's days (None: no date filter)."""
    if not (flt.since or flt.until):
        return None
    lo, hi = flt.since or date.min, flt.until or date.max
    return sum(p.crashes for p in g.epidemic_curve if lo <= p.day <= hi)


def _signature_row(gid: str, s: SignatureCount) -> dict[str, Any]:
    return {"id": gid, "href": group_href(gid), "key": s.signature, "crashes": s.crashes,
            "hosts": s.hosts, "analysed": False,
            "first_seen": s.first_seen.isoformat() if s.first_seen else None,
            "last_seen": s.last_seen.isoformat() if s.last_seen else None}


def _unanalysed(snap: Snapshot, flt: GroupFilter,
                on: dict[str, int] | None) -> list[dict[str, Any]]:
    """The window's signatures that are not analysed groups and match the
    text filters (``q``, ``phenotype``; dates by first / last seen; ``on``:
    :func:`_on_hosts`), most
    crashes first; none when a filter needs findings (verdict, attr)."""
    if not (flt.q or flt.phenotype) or flt.verdict or flt.attr:
        return []
    lo, hi = flt.since or date.min, flt.until or date.max
    out = []
    for gid, s in snap.signatures.items():
        if gid in snap.groups or (on is not None and s.signature not in on):
            continue
        if flt.q and flt.q.lower() not in s.signature.lower():
            continue
        if flt.phenotype and not snap.phenotypes_by_signature.get(s.signature, {}).get(
                flt.phenotype):
            continue
        if (flt.since or flt.until) and (s.first_seen is None or s.last_seen is None or
                                         s.last_seen.date() < lo or s.first_seen.date() > hi):
            continue
        out.append(_signature_row(gid, s))
    out.sort(key=lambda r: (-r["crashes"], r["key"]))
    return out


def _sort_key(flt: GroupFilter) -> Any:
    """Sort groups by ``flt.sort``; undefined values last whatever the order."""
    def key(g: GroupFinding) -> Any:
        v = g.key if flt.sort == "signature" else getattr(g, flt.sort)
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        return (v is None) != flt.desc, v if v is not None else 0
    return key


def groups_view(snap: Snapshot, flt: GroupFilter, limit: int = PAGE_ROWS) -> dict[str, Any]:
    """Signature groups matching ``flt``, sorted, page ``flt.page`` of ``limit``
    rows (``pages``: how many; ``prev`` / ``next``: their URL queries, None at
    an end); facets (verdict, phenotype, significant attribute value) count
    the groups each choice would leave with the other filters kept.
    ``signatures`` / ``analysed``: the window's distinct signatures and how many
    of them the findings analyse as groups (the ``max_groups`` largest);
    each row's ``in_range``: its crashes on the ``since`` / ``until`` days,
    ``on_hosts``: its crashes on the ``host`` matches (None without that filter);
    ``unanalysed``: the others that match ``q`` / ``phenotype`` (first ``limit``,
    ``unanalysed_total`` in all), each linked to its plain page."""
    f = snap.findings
    if f is None:
        return {"ready": False}
    fdr_q = f.config.get("fdr_q", 0.05)
    on = _on_hosts(snap, flt)
    matched: list[GroupFinding] = []
    verdicts: Counter[str] = Counter()
    phen: Counter[str] = Counter()
    attrs: Counter[str] = Counter()
    for g in f.groups:
        if g.kind != "signature":
            continue
        if _matches(snap, g, flt, on):
            matched.append(g)
        if _matches(snap, g, flt, on, "verdict"):
            verdicts[g.attribution.verdict] += 1
        if _matches(snap, g, flt, on, "phenotype"):
            phen.update(snap.phenotypes_by_signature.get(g.key, {}).keys())
        if _matches(snap, g, flt, on, "attr"):
            attrs.update(f"{a.attribute}={a.value}" for a in g.associations
                         if a.crashes and a.q_value is not None and a.q_value <= fdr_q)
    matched.sort(key=_sort_key(flt), reverse=flt.desc)
    pages = max(1, -(-len(matched) // limit))
    start = (flt.page - 1) * limit
    rows = [{**group_row(snap, g), "in_range": _in_range(g, flt),
             "on_hosts": None if on is None else on[g.key]}
            for g in matched[start:start + limit]]
    others = _unanalysed(snap, flt, on)
    return {
        "ready": True, "filter": flt.params(), "total": len(matched),
        "page": flt.page, "pages": pages, "rows": rows,
        "prev": flt.params(page=flt.page - 1 if flt.page > 2 else None) if flt.page > 1 else None,
        "next": flt.params(page=flt.page + 1) if flt.page < pages else None,
        "signatures": f.window.signature_groups,
        "analysed": sum(1 for g in f.groups if g.kind == "signature"),
        "max_groups": f.config.get("max_groups"),
        "unanalysed": others[:limit], "unanalysed_total": len(others),
        "axis": _axis(snap),
        "facets": {"verdict": verdicts.most_common(), "phenotype": phen.most_common(20),
                   "attr": attrs.most_common(20)},
    }


def group_view(snap: Snapshot, gid: str, crashes: list[dict[str, Any]],
               next_cursor: str | None) -> dict[str, Any] | None:
    """One group: verdict with all its evidence, rate, epidemic curve, rate
    ratios by attribute value (forest; ``too_few``: the minimum crashes, set
    when the group has fewer, the ``min_group_crashes`` below which its
    attribution is ``undetermined``), host concentration (observed vs
    expected per host), phenotype counts, first/last seen, a page of its
    crashes (``crashes``, from the store) and the representative crash
    (the first one of the page). None when no group has this id."""
    g = snap.groups.get(gid)
    if g is None:
        return None
    conc = g.concentration
    f = snap.findings
    least = int(f.config.get("min_group_crashes", 5)) if f else 5
    return {
        **group_row(snap, g), "axis": _axis(snap),
        # below the attribution's minimum the ratios are all ∞ or 0: noise, not drawn
        "too_few": least if g.crashes < least else None,
        "attribution": {"verdict": g.attribution.verdict, "rule": g.attribution.rule,
                        "evidence": evidence_rows(g.attribution)},
        "associations": [_assoc(a) for a in sorted(
            g.associations, key=lambda a: (a.p_value if a.p_value is not None else 2.0,
                                           a.attribute, a.value))],
        "concentration": {**conc.model_dump(mode="json", exclude={"top_hosts"}),
                          "top_hosts": [{**h.model_dump(mode="json"), "href": host_href(h.host_id)}
                                        for h in conc.top_hosts]},
        "hardware_phenotypes": [p.model_dump() for p in g.hardware_phenotypes],
        "crash_list": crashes, "next_cursor": next_cursor,
        "representative": crashes[0] if crashes else None,
    }


def signature_view(snap: Snapshot, gid: str, crashes: list[dict[str, Any]],
                   next_cursor: str | None) -> dict[str, Any] | None:
    """A signature of the window that the findings do not analyse as a group
    (outside the ``max_groups`` largest): its counts, ``why`` (one sentence)
    and a page of its crashes, as on a group page. None when no signature of
    the window has this id."""
    s = snap.signatures.get(gid)
    f = snap.findings
    if s is None or f is None or gid in snap.groups:
        return None
    why = (f"not analysed as a group: the findings analyse the "
           f"{f.config.get('max_groups')} largest of {f.window.signature_groups:,} signatures; "
           f"this one has {how_many(s.crashes, 'crash')} in the window")
    return {**_signature_row(gid, s), "kind": "signature", "why": why,
            "crash_list": crashes, "next_cursor": next_cursor}


def hosts_view(snap: Snapshot, drained: dict[str, DrainRecord],
               verdict: str | None = None) -> dict[str, Any]:
    """The hosts the findings report on (suspects first, then by SIR p-value),
    only those with ``verdict`` when given; ``drained`` as in :func:`overview_view`."""
    f = snap.findings
    if f is None:
        return {"ready": False}
    return {"ready": True, "verdict": verdict,
            "rows": [_host_row(h, drained) for h in f.hosts
                     if verdict is None or h.attribution.verdict == verdict],
            "hosts_in_window": f.window.hosts}
