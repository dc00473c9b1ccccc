"""``coreepi list``: which stored crashes match, and one line per crash.

:func:`select_crashes` filters and orders the summaries of a
:class:`coreepi.cli.sources.CrashSource`; :func:`crash_lines` lays them out
for a terminal of a given width (the signature, last, is cut with ``…`` when
the line would not fit; ``coreepi info`` shows it whole).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from coreepi.cli.sources import CrashSource, short_id

if TYPE_CHECKING:
    from coreepi.epi.models import FleetFindings

__all__ = ["VERDICTS", "crash_lines", "jsonable", "select_crashes", "verdicts_by_crash"]

# epi.models.Verdict, spelled out: importing epi costs list its start-up (a test checks)
VERDICTS = ("hardware-suspect", "software", "environment-triggered", "undetermined")


def _when(row: dict[str, Any]) -> datetime:
    value = row.get("captured_at")
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if isinstance(value, datetime) else datetime.min.replace(tzinfo=UTC)


def select_crashes(
    source: CrashSource, *, since: datetime | None = None, until: datetime | None = None,
    host: str | None = None, signature: str | None = None, phenotype: str | None = None,
    verdict: str | None = None, limit: int | None = None,
) -> list[dict[str, Any]]:
    """The summaries of the crashes that match every filter given, oldest
    first (by ``captured_at``, then id); with ``limit``, the ``limit`` most
    recent. ``phenotype`` matches any of a crash's phenotypes; ``verdict``
    (one of :data:`VERDICTS`) a crash in a group (its signature's or one of
    its phenotypes') or on a host with that attribution — it computes the
    report's findings, so it costs what ``coreepi report`` costs. Each row
    then has ``verdicts`` (sorted)."""
    rows = [r for r in source.summaries(since, until, host, signature)
            if phenotype is None or phenotype in (r.get("phenotypes") or [])]
    if verdict is not None:
        by_crash = verdicts_by_crash(source.findings(since, until), rows)
        for row in rows:
            row["verdicts"] = sorted(by_crash.get(row["crash_id"], ()))
        rows = [r for r in rows if verdict in r["verdicts"]]
    rows.sort(key=lambda r: (_when(r), r["crash_id"]))
    return rows[-limit:] if limit else rows


def verdicts_by_crash(findings: FleetFindings, rows: Iterable[dict[str, Any]]
                      ) -> dict[str, set[str]]:
    """crash_id -> the verdicts of its signature group, its phenotype groups
    and its host (those the findings attribute)."""
    groups = {(g.kind, g.key): g.attribution.verdict for g in findings.groups}
    hosts = {h.host_id: h.attribution.verdict for h in findings.hosts}
    out: dict[str, set[str]] = {}
    for row in rows:
        found = {groups.get(("signature", row.get("signature") or "")),
                 hosts.get(row.get("host_id") or "")}
        found |= {groups.get(("phenotype", p)) for p in row.get("phenotypes") or []}
        out[row["crash_id"]] = {v for v in found if v is not None}
    return out


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its datetimes as ISO-8601 text (for ``--json``)."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


_HEAD = ("TIME (UTC)", "CRASH", "HOST", "SIGNAL", "CORE", "SIGNATURE")
_CORE = {"stored": "yes", "not-stored": "no", "missing": "missing", "unreadable": "unreadable",
         "pruned": "pruned", "not-found": "not found"}
"""The CORE cell of each ``core_status``: the words ``coreepi info`` uses
(an unreadable core is kept as received, but no analysis came of it;
``pruned``: deleted by retention since; ``not-found``: not in the blob store
the command was given, see :mod:`coreepi.cli.sources`)."""


def _core_cell(row: dict[str, Any]) -> str:
    """The CORE cell: :data:`_CORE`, but a stored artifact that is not a core
    says what it is (``log`` for a kernel or hs_err log)."""
    from coreepi.reporting.artifact_kind import artifact_kind

    cell = _CORE.get(row.get("core_status") or "", "no")
    return artifact_kind(row.get("source")).short if cell == "yes" else cell


def crash_lines(rows: list[dict[str, Any]], width: int | None) -> list[str]:
    """A header and one line per crash: time (UTC, to the minute), short id,
    host, signal, what became of the core (:func:`_core_cell`), signature (or the
    phenotypes when it has none). ``width``: cut each line's signature to fit
    (None: no cut, e.g. for a pipe)."""
    cells = [(_when(r).strftime("%Y-%m-%d %H:%M") if r.get("captured_at") else "-",
              short_id(r["crash_id"]), r.get("host_id") or "-", r.get("signal") or "-",
              _core_cell(r),
              r.get("signature") or ",".join(r.get("phenotypes") or []) or "-")
             for r in rows]
    widths = [max(len(c[i]) for c in [_HEAD, *cells]) for i in range(len(_HEAD) - 1)]
    lines = []
    for c in [_HEAD, *cells]:
        line = "  ".join(v.ljust(w) for v, w in zip(c, widths, strict=False)) + "  " + c[-1]
        if width is not None and len(line) > width:
            line = line[: width - 1] + "…"
        lines.append(line)
    return lines

