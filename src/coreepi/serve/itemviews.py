"""The pages of one host and one crash: JSON-ready dicts, as in :mod:`coreepi.serve.views`.

The host page joins the findings (SIR, verdict, evidence) with the host's
facts, its crashes (one indexed store read) and its telemetry; the crash
page shows the stored CrashReport with the links around it (host, group,
the download of its artifact: core, kernel log or hs_err log) and the one
command that opens it (gdb for a core, a pager for a log).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from coreepi.model.report import CrashReport
from coreepi.reporting.artifact_kind import (
    LOG_TRUST,
    LOG_TRUST_NOTE,
    artifact_kind,
    frame_trust_text,
)
from coreepi.reporting.crash_text import evidence_items
from coreepi.serve.cores import StoredCore
from coreepi.serve.findings import Snapshot, group_id
from coreepi.serve.views import (
    crash_href,
    evidence_rows,
    group_href,
    host_href,
    recommendation,
)
from coreepi.store.alert_records import DrainRecord

__all__ = ["crash_rows", "crash_view", "host_view"]

MAX_MAPPINGS = 400


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def crash_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store crash summaries (``list_crashes``) with links to crash, host and group."""
    out = []
    for r in rows:
        sig = r.get("signature")
        gid = group_id("signature", sig) if sig else None
        out.append({**_jsonable(r), "href": crash_href(r["crash_id"]),
                    "host_href": host_href(r["host_id"]) if r.get("host_id") else None,
                    "group_href": group_href(gid) if gid else None})
    return out


def host_view(snap: Snapshot, host_id: str, crashes: list[dict[str, Any]],
              drain: DrainRecord | None = None) -> dict[str, Any] | None:
    """One host: facts, verdict with evidence and a recommendation
    (:func:`coreepi.serve.views.recommendation`, which knows ``drain``, the
    host's drain record when it is drained), SIR with its CI, crashes and
    telemetry (same time axis). None when the store knows nothing of it."""
    finding = snap.hosts.get(host_id)
    facts = snap.host_facts.get(host_id)
    tel = snap.telemetry.get(host_id, [])
    if finding is None and facts is None and not crashes and not tel:
        return None
    f = snap.findings
    window = ({"since": f.window.since.isoformat(), "until": f.window.until.isoformat()}
              if f else None)
    return {
        "host_id": host_id, "facts": facts or {},
        "finding": finding.model_dump(mode="json") if finding else None,
        "verdict": finding.attribution.verdict if finding else None,
        "evidence": evidence_rows(finding.attribution) if finding else [],
        "recommendation": recommendation(finding, drain) if finding else None,
        "top_signatures": [{"name": s.name, "crashes": s.crashes,
                            "href": group_href(group_id("signature", s.name))}
                           for s in finding.top_signatures] if finding else [],
        "crashes": sorted(crash_rows(crashes), key=lambda r: r.get("captured_at") or ""),
        "telemetry": [{"ts": t.ts.isoformat(), "kind": t.kind, "summary": t.summary,
                       "hardware": t.hardware} for t in tel],
        "window": window,
    }


def _hex(v: int | None) -> str | None:
    return None if v is None else f"0x{v:x}"


def crash_view(report: CrashReport, core: StoredCore | None) -> dict[str, Any]:
    """One crash: the report (JSON), links, the index of the crashing thread,
    each phenotype's evidence in words (``evidence``: ``[[[key, text],
    ...], ...]`` in phenotype order), the frame trust shown for every frame
    when the report's own does not apply (``frame_trust``: ``"log"`` for a
    kernel log, else None), what its artifact is (``artifact_kind``: ``"core"``,
    ``"kernel log"``, ...) and the stored artifact (``artifact``, when its
    blob is stored: what it is, download URL and name, size, and the command
    that opens it: gdb for a core, a pager for a log)."""
    data = report.model_dump(mode="json")
    sig = report.signature.signature if report.signature else None
    gid = group_id("signature", sig) if sig else None
    crashed = next((i for i, t in enumerate(report.threads) if t.crashed), None)
    data["memory_map_truncated"] = len(data["memory_map"]) > MAX_MAPPINGS
    data["memory_map"] = data["memory_map"][:MAX_MAPPINGS]
    kind = artifact_kind(report.source)
    trust = frame_trust_text(report.source, "")  # "": each frame's own trust applies
    return {
        "crash": data,
        "crashed_thread": crashed,
        "fault_address": _hex(report.signal.fault_address) if report.signal else None,
        "host_href": host_href(report.host_id) if report.host_id else None,
        "group_id": gid, "group_href": group_href(gid) if gid else None,
        "evidence": [evidence_items(p.evidence, max_chars=None) for p in report.phenotypes],
        "frame_trust": trust or None,
        "frame_trust_note": LOG_TRUST_NOTE if trust == LOG_TRUST else None,
        "artifact_kind": kind.name, "artifact_title": kind.title,
        "artifact": None if core is None else {
            "kind": core.kind, "url": f"/api/v1/crashes/{report.crash_id}/artifact",
            "filename": core.filename, "bytes": core.size,
            "gdb_command": core.gdb_command, "read_command": core.read_command},
    }
