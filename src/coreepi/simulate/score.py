"""Score coreepi's attribution against a simulated fleet's ``truth.json``.

After ``coreepi simulate`` and ``coreepi ingest``, :func:`score` compares the
report (:class:`coreepi.epi.FleetFindings`) with what was planted:

- each crash file of ``truth.json`` is mapped to its stored crash through the
  crash's ``artifact`` column (the path ingest read it from), hence to its
  signature group;
- a hardware disease is right when every planted bad host with crashes is
  ``hardware-suspect``; hardware-suspect hosts are scored by precision and
  recall against the planted ones;
- a software or environment disease is right when the signature group that
  holds most of its crashes (its *home group*) has the expected verdict, and,
  when the disease was planted on an attribute value (``app_version``,
  ``kernel`` …), that group shows a significant association with that value
  (for ``environment``: the association that decided the verdict); when it was
  planted on a hidden workload condition, with the top stratum of a measure
  that condition drives (``exceptions_per_s`` …). Significance uses the
  findings' own EpiConfig (``fdr_q``, ``min_irr``); evidence is matched by its
  structured ``attribute`` and ``level``, never by its wording;
- two diseases are *merged* when they share a home group.

:func:`crashes_needed` replays the data in time order (reports on growing
time prefixes) and says after how many of its crashes each disease's
verdict became right and stayed right.

Used by ``coreepi demo`` (the "planted vs found" table), the end-to-end test
and ``benchmarks/attribution.py``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coreepi.epi.models import FleetFindings, GroupFinding
from coreepi.reporting.phrases import evidence_text
from coreepi.store import Store

__all__ = [
    "CrashLink",
    "DiseaseScore",
    "FleetScore",
    "crashes_needed",
    "link_crashes",
    "load_truth",
    "score",
]

SCORED_KINDS = ("hardware", "software", "environment")


def load_truth(fleet: str | Path) -> dict[str, Any]:
    """``truth.json`` of a simulated fleet directory."""
    data: dict[str, Any] = json.loads((Path(fleet) / "truth.json").read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True)
class CrashLink:
    """A crash file of truth.json and the stored crash it became."""

    file: str
    disease: str
    host_id: str
    captured_at: datetime
    crash_id: str | None
    signature: str | None
    phenotypes: tuple[str, ...]


def _parse_time(s: str) -> datetime:
    t = datetime.fromisoformat(s)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def link_crashes(store: Store, fleet: str | Path, truth: dict[str, Any]) -> list[CrashLink]:
    """Every produced crash of ``truth`` with its stored crash (by artifact path).

    A crash file that was not ingested keeps ``crash_id=None``."""
    root = Path(fleet).resolve()
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in truth["crashes"]:
        by_host[c["host_id"]].append(c)
    lo = _parse_time(truth["window"]["start"]) - timedelta(days=1)
    hi = _parse_time(truth["window"]["end"]) + timedelta(days=1)
    stored: dict[str, Any] = {}
    for host in by_host:
        for rec in store.crash_records(host, lo, hi):
            if rec.artifact:
                stored[str(Path(rec.artifact).resolve())] = rec.report
    out = []
    for host, entries in by_host.items():
        for c in entries:
            rep = stored.get(str((root / c["file"]).resolve()))
            out.append(
                CrashLink(
                    file=c["file"],
                    disease=c["disease"],
                    host_id=host,
                    captured_at=_parse_time(c["captured_at"]),
                    crash_id=rep.crash_id if rep is not None else None,
                    signature=(rep.signature.signature if rep is not None and rep.signature
                               else None),
                    phenotypes=tuple(p.name for p in rep.phenotypes) if rep is not None else (),
                )
            )
    out.sort(key=lambda link: (link.captured_at, link.file))
    return out


@dataclass
class DiseaseScore:
    name: str
    kind: str
    expected_verdict: str | None
    crashes: int
    home_group: str | None = None
    home_share: float = 0.0
    """Share of the disease's crashes in its home group."""
    group_crashes: int = 0
    """Crashes in the home group (all diseases)."""
    verdict: str | None = None
    """Found verdict: the home group's (software/environment), or the bad hosts' (hardware)."""
    cause: str = ""
    """The planted cause, e.g. ``app_version=2.0.0`` or ``host h-017``."""
    attribute_found: bool | None = None
    """Software/environment planted on an attribute value: was that value found?"""
    attribute_evidence: str = ""
    """The group's association with the planted value, as the report states it."""
    evidence: str = ""
    """The deciding evidence of the verdict (one sentence)."""
    merged_with: list[str] = field(default_factory=list)
    host_verdicts: dict[str, str] = field(default_factory=dict)
    crashes_needed: int | None = None
    """Crashes of this disease in the first time prefix from which it stayed right."""

    @property
    def right(self) -> bool:
        if self.verdict != self.expected_verdict:
            return False
        if self.attribute_found is False:
            return False
        return not self.merged_with


@dataclass
class FleetScore:
    diseases: list[DiseaseScore]
    true_hw_hosts: set[str]
    """Planted bad hosts of single-host hardware diseases with at least one crash (a host
    without crash cannot be found)."""
    found_hw_hosts: set[str]
    unlinked: int = 0
    population_hosts: set[str] = field(default_factory=set)
    """Hosts with crashes of a population hardware disease (a bad stepping): flagging one
    is right (it is bad), missing one is not counted (it has a crash or two)."""

    @property
    def scored(self) -> list[DiseaseScore]:
        return [d for d in self.diseases if d.kind in SCORED_KINDS]

    @property
    def hw_tp(self) -> int:
        return len(self.true_hw_hosts & self.found_hw_hosts)

    @property
    def hw_fp(self) -> int:
        return len(self.found_hw_hosts - self.true_hw_hosts - self.population_hosts)

    @property
    def hw_fn(self) -> int:
        return len(self.true_hw_hosts - self.found_hw_hosts)

    @property
    def precision(self) -> float | None:
        found = self.found_hw_hosts - self.population_hosts
        return self.hw_tp / len(found) if found else None

    @property
    def recall(self) -> float | None:
        return self.hw_tp / len(self.true_hw_hosts) if self.true_hw_hosts else None

    @property
    def merged(self) -> list[tuple[str, str]]:
        pairs = {tuple(sorted((d.name, o))) for d in self.scored for o in d.merged_with}
        return sorted(pairs)  # type: ignore[arg-type]

    @property
    def all_right(self) -> bool:
        return (all(d.right for d in self.scored) and not self.merged
                and self.hw_fp == 0 and self.hw_fn == 0)

    def table(self) -> list[dict[str, Any]]:
        return [
            {
                "disease": d.name,
                "planted": f"{d.expected_verdict} ({d.cause})" if d.cause else d.expected_verdict,
                "crashes": d.crashes,
                "found": d.verdict,
                "right": d.right,
                "evidence": d.evidence,
                "attribute_evidence": d.attribute_evidence,
            }
            for d in self.scored
        ]


def _cause(d: dict[str, Any]) -> str:
    cause = d.get("cause") or {}
    if d["kind"] == "hardware":
        return "host " + ", ".join(cause.get("host_ids") or [])
    attrs = cause.get("attributes") or {}
    parts = [f"{k}={v}" for k, v in attrs.items()]
    parts += [f"{k}={v} (hidden; shows as high {', '.join(cause.get('measures') or [])})"
              for k, v in (cause.get("hidden") or {}).items()]
    return ", ".join(parts)


def _deciding(ev: Sequence[Any]) -> str:
    return evidence_text(ev[0]) if ev else ""


def score(findings: FleetFindings, truth: dict[str, Any], links: Sequence[CrashLink]) -> FleetScore:
    """Compare ``findings`` with ``truth`` (``links``: from :func:`link_crashes`)."""
    sig_groups: dict[str, GroupFinding] = {g.key: g for g in findings.groups
                                           if g.kind == "signature"}
    hosts = {h.host_id: h for h in findings.hosts}
    found_hw = {h.host_id for h in findings.hosts if h.attribution.verdict == "hardware-suspect"}
    by_disease: dict[str, list[CrashLink]] = defaultdict(list)
    for link in links:
        by_disease[link.disease].append(link)
    true_hw: set[str] = set()
    population: set[str] = set()
    out: list[DiseaseScore] = []
    homes: dict[str, str] = {}
    for d in truth["diseases"]:
        mine = [x for x in by_disease.get(d["name"], []) if x.crash_id is not None]
        ds = DiseaseScore(d["name"], d["kind"], d.get("expected_verdict"), len(mine),
                          cause=_cause(d))
        sigs = Counter(x.signature for x in mine if x.signature)
        if sigs:
            ds.home_group, n = sigs.most_common(1)[0]
            ds.home_share = n / len(mine)
            if d["kind"] != "hardware":
                homes[d["name"]] = ds.home_group
        g = sig_groups.get(ds.home_group) if ds.home_group else None
        if g is not None:
            ds.group_crashes = g.crashes
        if d["kind"] == "hardware" and _population(d):
            # a bad stepping: many hosts with a crash or two each; no host can be singled
            # out, the group (and its hardware attribute) must be
            population |= {x.host_id for x in mine}
            if g is not None:
                ds.verdict = g.attribution.verdict
                ds.evidence = _deciding(g.attribution.evidence)
        elif d["kind"] == "hardware":
            bad = {x.host_id for x in mine}
            true_hw |= bad
            ds.host_verdicts = {
                h: (hosts[h].attribution.verdict if h in hosts else "not reported")
                for h in sorted(bad)
            }
            if bad:
                verdicts = set(ds.host_verdicts.values())
                ds.verdict = verdicts.pop() if len(verdicts) == 1 else "mixed"
                first = min(bad)
                if first in hosts:
                    ds.evidence = _deciding(hosts[first].attribution.evidence)
        elif g is not None:
            ds.verdict = g.attribution.verdict
            ds.evidence = _deciding(g.attribution.evidence)
            attrs = ((d.get("cause") or {}).get("attributes") or {})
            measures = (d.get("cause") or {}).get("measures") or []
            if (attrs or measures) and d["kind"] in ("software", "environment"):
                want = {(k, str(v)) for k, v in attrs.items()} | _top_strata(findings, measures)
                ds.attribute_found = (
                    (not attrs or _attribute_found(g, attrs, d["kind"], findings.config))
                    and (not measures or any(
                        (a.attribute, a.value) in want and _significant(a, findings.config)
                        for a in g.associations)))
                ds.attribute_evidence = next(
                    (evidence_text(e) for e in g.attribution.evidence
                     if e.kind == "rate-ratio" and (e.attribute, e.level) in want), "")
        out.append(ds)
    # merged: two diseases (noise included) whose crashes mostly share one group
    by_home: dict[str, list[str]] = defaultdict(list)
    for name, home in homes.items():
        by_home[home].append(name)
    for ds in out:
        if ds.kind in ("software", "environment") and ds.home_group:
            ds.merged_with = [n for n in by_home[ds.home_group] if n != ds.name]
    unlinked = sum(1 for x in links if x.crash_id is None)
    return FleetScore(out, true_hw, found_hw, unlinked, population)


def _top_strata(findings: FleetFindings, measures: Sequence[str]) -> set[tuple[str, str]]:
    """(measure, its highest stratum) for each measure binned into strata by the engine: a
    hidden condition that raises a measure is found as that measure's top stratum."""
    return {(a.name, a.levels[-1]) for a in findings.attributes
            if a.name in measures and a.kind == "strata" and a.levels}


def _population(d: dict[str, Any]) -> bool:
    """A hardware disease of a host population (``hosts = "all"`` with ``when``, e.g. a CPU
    model and microcode): planted on an attribute value and more than two hosts."""
    cause = d.get("cause") or {}
    return bool(cause.get("attributes")) and len(cause.get("host_ids") or []) > 2


def _attribute_found(g: GroupFinding, attrs: dict[str, Any], kind: str,
                     config: dict[str, Any]) -> bool:
    """The group shows the planted attribute value, read from structured evidence: for
    environment diseases the deciding association (its ``attribute`` and ``level``); for
    software ones any significant association (q ≤ ``fdr_q``, rate ratio ≥ ``min_irr``
    with a CI above 1: the findings' own EpiConfig, as the attribution rules count it)."""
    want = {(k, str(v)) for k, v in attrs.items()}
    if kind == "environment":
        ev = g.attribution.evidence
        return (g.attribution.rule == "environment-association" and bool(ev)
                and (ev[0].attribute, ev[0].level) in want)
    return any((a.attribute, a.value) in want and _significant(a, config)
               for a in g.associations)


def _significant(a: Any, config: dict[str, Any]) -> bool:
    return (a.q_value is not None and a.q_value <= config["fdr_q"] and a.irr_lower is not None
            and a.irr_lower > 1.0
            and (a.irr_status == "unbounded" or (a.irr is not None
                                                 and a.irr >= config["min_irr"])))


def crashes_needed(
    truth: dict[str, Any],
    links: Sequence[CrashLink],
    findings_until: Callable[[datetime], FleetFindings],
    step: timedelta = timedelta(days=1),
) -> dict[str, int | None]:
    """For each scored disease, the number of its crashes in the first time
    prefix ``[start, t)`` (``t`` in steps of ``step``) from which its verdict was
    right in every later prefix; None when it was never right at the end.

    ``findings_until(t)`` builds the findings of the window ending at ``t``."""
    start = _parse_time(truth["window"]["start"])
    end = _parse_time(truth["window"]["end"])
    cuts = []
    t = start + step
    while t < end:
        cuts.append(t)
        t += step
    cuts.append(end)
    right_at: dict[str, list[bool]] = defaultdict(list)
    counts: dict[str, list[int]] = defaultdict(list)
    names = [d["name"] for d in truth["diseases"] if d["kind"] in SCORED_KINDS]
    for cut in cuts:
        prefix = [x for x in links if x.captured_at < cut]
        if not prefix:
            for n in names:
                right_at[n].append(False)
                counts[n].append(0)
            continue
        sc = score(findings_until(cut), truth, prefix)
        by_name = {d.name: d for d in sc.diseases}
        for n in names:
            d = by_name[n]
            ok = d.right
            if d.kind == "hardware":
                ok = d.verdict == "hardware-suspect"
            right_at[n].append(ok)
            counts[n].append(sum(1 for x in prefix if x.disease == n))
    out: dict[str, int | None] = {}
    for n in names:
        flags = right_at[n]
        if not flags or not flags[-1]:
            out[n] = None
            continue
        i = len(flags) - 1
        while i > 0 and flags[i - 1]:
            i -= 1
        out[n] = counts[n][i]
    return out
