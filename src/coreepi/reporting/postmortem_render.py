"""A :class:`~coreepi.reporting.postmortem.Postmortem` as markdown or as one HTML page.

Both formats hold the same sections (summary, recommended actions, what
changed, groups, hosts, timeline), with links to the UI's pages when a base
URL is given: ``/groups/{id}``, ``/hosts/{host}``, ``/crashes/{crash_id}``.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from urllib.parse import quote

from coreepi.epi.models import group_id
from coreepi.reporting.phrases import evidence_text, how_many
from coreepi.reporting.postmortem import Event, Postmortem

__all__ = ["FORMATS", "render_postmortem"]

FORMATS = ("markdown", "html")
MAX_TIMELINE = 300


class _Links:
    def __init__(self, base: str | None) -> None:
        self.base = base.rstrip("/") if base else None

    def group(self, key: str) -> str | None:
        return f"{self.base}/groups/{group_id('signature', key)}" if self.base else None

    def host(self, host_id: str) -> str | None:
        return f"{self.base}/hosts/{quote(host_id, safe='')}" if self.base else None

    def crash(self, crash_id: str | None) -> str | None:
        return f"{self.base}/crashes/{quote(crash_id, safe='')}" if self.base and crash_id \
            else None


def _rows(pm: Postmortem, links: _Links, link: Callable[[str, str | None], str],
          code: Callable[[str], str], esc: Callable[[str], str]
          ) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Each table as (header, rows of formatted cells): ``esc`` escapes text,
    ``code`` formats a signature, ``link`` wraps formatted text in a link."""
    def sir(v: float | None) -> str:
        return f"{v:.1f}" if v is not None else "-"

    return {
        "What changed in the window": (
            ["attribute", "value", "node-time share, first quarter", "last quarter",
             "first seen"],
            [[esc(c.attribute), esc(c.value), f"{c.share_before:.0%}", f"{c.share_after:.0%}",
              c.first_seen.strftime("%Y-%m-%d %H:%M") if c.first_seen else "-"]
             for c in pm.changes]),
        "Groups involved": (
            ["signature", "crashes in scope", "window: crashes / hosts", "window verdict",
             "whole store: crashes / hosts", "whole-store verdict", "evidence (whole store)"],
            [[link(code(g.key), links.group(g.key)), str(pm.group_crashes.get(g.key, 0)),
              f"{g.crashes} / {g.hosts}", g.attribution.verdict,
              f"{w.crashes} / {w.hosts}" if w else "-", w.attribution.verdict if w else "-",
              esc("; ".join(evidence_text(e) for e in (w or g).attribution.evidence[:2])
                  or "-")]
             for g, w in ((g, pm.fleet_group(g.key)) for g in pm.groups)]),
        "Hosts": (
            ["host", "crashes", "hardware events (all events)", "SIR", "window verdict",
             "whole store: crashes, verdict", "evidence"],
            [[link(esc(h["host_id"]), links.host(h["host_id"])), str(h["crashes"]),
              f"{h['hardware_events']} ({h['events']})", sir(h["sir"]), h["verdict"] or "-",
              f"{h['fleet_crashes']}, {h['fleet_verdict']}" if h["fleet_verdict"] else "-",
              esc(h["evidence"] or h["fleet_evidence"] or "-")] for h in pm.hosts]),
        "Timeline": (
            ["time (UTC)", "host", "kind", "what"],
            [[e.ts.strftime("%Y-%m-%d %H:%M:%S"), esc(e.host_id), _kind(e),
              link(code(e.text), links.crash(e.crash_id)) if e.kind == "crash"
              else esc(f"{e.kind}: {e.text}")] for e in pm.timeline[:MAX_TIMELINE]]),
    }


def _kind(e: Event) -> str:
    """crash, hardware (a hardware-indicative event) or telemetry."""
    return "crash" if e.kind == "crash" else "hardware" if e.hardware else "telemetry"


def _summary(pm: Postmortem) -> str:
    crashes = sum(1 for e in pm.timeline if e.kind == "crash")
    hw = sum(1 for e in pm.timeline if e.hardware)
    return (f"{pm.since:%Y-%m-%d %H:%M} to {pm.until:%Y-%m-%d %H:%M} UTC, {pm.scope}: "
            f"{how_many(crashes, 'crash')} on "
            f"{how_many(sum(1 for h in pm.hosts if h['crashes']), 'host')}, "
            f"{how_many(len(pm.groups), 'signature group')}, "
            f"{how_many(hw, 'hardware event')}, "
            f"{how_many(len(pm.changes), 'rollout')} in the window.")


def _markdown(pm: Postmortem, links: _Links) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    def link(text: str, url: str | None) -> str:
        return f"[{text}]({url})" if url else text

    out = ["## Crashes", "", _summary(pm), "", "### Recommended actions", ""]
    out += [f"- {a}" for a in pm.actions]
    for title, (head, rows) in _rows(pm, links, link, lambda s: f"`{cell(s)}`", cell).items():
        out += ["", f"### {title}", ""]
        if not rows:
            out.append("None.")
            continue
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
    if len(pm.timeline) > MAX_TIMELINE:
        out.append(f"\n… and {len(pm.timeline) - MAX_TIMELINE} more events.")
    return "\n".join(out) + "\n"


def _html(pm: Postmortem, links: _Links) -> str:
    esc = html.escape

    def link(text: str, url: str | None) -> str:
        return f'<a href="{esc(url)}">{text}</a>' if url else text

    body = [f"<h2>Crashes</h2><p>{esc(_summary(pm))}</p>", "<h3>Recommended actions</h3><ul>"]
    body += [f"<li>{esc(a)}</li>" for a in pm.actions]
    body.append("</ul>")
    for title, (head, rows) in _rows(pm, links, link, lambda s: f"<code>{esc(s)}</code>",
                                     esc).items():
        body.append(f"<h3>{esc(title)}</h3>")
        if not rows:
            body.append("<p>None.</p>")
            continue
        body.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
        body += ["<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows]
        body.append("</table>")
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Postmortem: crashes "
            f"{pm.since:%Y-%m-%d}</title><style>{style}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def render_postmortem(pm: Postmortem, fmt: str, base_url: str | None = None) -> str:
    """The postmortem in ``fmt`` (one of :data:`FORMATS`); links when ``base_url``."""
    links = _Links(base_url)
    if fmt == "markdown":
        return _markdown(pm, links)
    if fmt == "html":
        return _html(pm, links)
    raise ValueError(f"unknown postmortem format {fmt!r}; one of {', '.join(FORMATS)}")
