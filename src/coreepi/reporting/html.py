"""The HTML report: one self-contained file (inline CSS and SVG; no script, no
network), readable offline and safe to mail around.

Every string from crash data (signatures, host ids, attribute values,
evidence sentences, telemetry summaries) is HTML-escaped: signatures are
function names an attacker can choose.
"""

from __future__ import annotations

from datetime import timedelta
from html import escape

from coreepi.epi.models import FleetFindings, GroupFinding
from coreepi.reporting.phrases import (
    evidence_text,
    fmt_ci,
    fmt_n,
    fmt_p,
    fmt_q,
    fmt_rate,
    fmt_ratio,
    headline,
    how_many,
    rates_note,
)
from coreepi.reporting.summary import (
    groups_title,
    strongest_associations,
    suspect_hosts,
    top_groups,
)
from coreepi.reporting.svg import epidemic_curve, forest_plot, host_bars

__all__ = ["html_report"]

CURVES = 8
"""Epidemic curves drawn: the largest groups, plus every hardware-suspect group."""

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}
th,td{border:1px solid #ddd;padding:3px 6px;vertical-align:top;text-align:left}
td.n{text-align:right;white-space:nowrap}th{background:#f4f4f4}
code{font-size:12px}.w{white-space:nowrap}
.t{overflow-x:auto;max-width:100%}
.v-hardware-suspect{color:#c0392b;font-weight:bold}.v-software{color:#2e86ab}
.v-environment-triggered{color:#b8860b}.v-undetermined{color:#888}
.curve{display:inline-block;margin:0 1em 1em 0;vertical-align:top}
.curve h3{font-size:13px;margin:.2em 0;max-width:640px;overflow-wrap:break-word}
.note{color:#666;font-size:12px}
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _words(text: str) -> str:
    """``text`` escaped, each space-separated word unbreakable: an identifier
    (a signature "a | b::c", a host id, a phenotype "double-free-or-heap-corruption")
    wraps at its spaces only, never inside a word or at a hyphen."""
    return " ".join(f'<span class="w">{_e(word)}</span>' for word in str(text).split(" "))


def _ident(text: str) -> str:
    return f"<code>{_words(text)}</code>"


def _verdict(v: str) -> str:
    return f'<span class="v-{_e(v)}">{_e(v)}</span>'


def _table(head: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    """``rows`` cells are HTML already (escaped by the caller)."""
    # identifiers break only at their spaces (" | " between frames), never
    # mid-word: a table wider than the page scrolls in its own box instead
    out = ['<div class="t"><table><thead><tr>', *(f"<th>{_e(h)}</th>" for h in head),
           "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>")
        out.extend(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                   for i, c in enumerate(row))
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _curve_groups(f: FleetFindings) -> list[GroupFinding]:
    chosen = top_groups(f, CURVES)
    chosen += [g for g in f.groups
               if g.attribution.verdict == "hardware-suspect" and g not in chosen][:CURVES]
    return chosen


def html_report(findings: FleetFindings) -> str:
    f = findings
    w = f.window
    out = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        f"<title>coreepi report {_e(f'{w.since:%Y-%m-%d}')} – {_e(f'{w.until:%Y-%m-%d}')}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>coreepi report</h1>",
        f"<p>{_e(headline(f))}</p>",
    ]
    if not w.crashes:  # the headline says so once ("no crash: nothing to analyse")
        return "".join(out + _footer(f))

    # groups: no rate column when the window shows no rate (the headline said why, once)
    out.append(f"<h2>{_e(groups_title(f))}</h2>")
    shown = rates_note(f) is None
    rows = []
    for g in top_groups(f):
        ev = evidence_text(g.attribution.evidence[0]) if g.attribution.evidence else ""
        rate = [_e(f"{fmt_rate(g.rate)} ({fmt_ci(g.rate_lower, g.rate_upper)})")]
        rows.append([_e(g.kind), _ident(g.key), f"{g.crashes:,}", f"{g.hosts:,}",
                     *(rate if shown else []), _verdict(g.attribution.verdict), _e(ev)])
    head = ["kind", "group", "crashes", "hosts", *(["rate (95% CI)"] if shown else []),
            "attribution", "top evidence"]
    out.append(_table(head, rows, {2, 3, 4} if shown else {2, 3}) if rows
               else "<p>No crash group.</p>")

    # epidemic curves
    curve_groups = _curve_groups(f)
    if curve_groups:
        out.append("<h2>Epidemic curves (crashes per UTC day)</h2>")
        first = w.since.date()
        last = max(first, (w.until - timedelta(microseconds=1)).date())  # until is exclusive
        for g in curve_groups:
            title = f"{g.kind} {g.key}: {how_many(g.crashes, 'crash')}, {g.attribution.verdict}"
            out.append(f'<div class="curve"><h3>{_words(g.key)} '
                       f"<small>({_e(g.kind)}, {g.crashes:,}, "
                       f"{_verdict(g.attribution.verdict)})</small></h3>"
                       f"{epidemic_curve(g.epidemic_curve, first, last, title)}</div>")

    # hosts
    hosts = suspect_hosts(f)
    out.append("<h2>Suspect hosts</h2>")
    if hosts:
        out.append(host_bars([(h.host_id, h.crashes, h.expected, h.attribution.verdict)
                              for h in hosts]))
        rows = []
        for h in hosts:
            hw = ", ".join(f"{p.name} ×{p.crashes}" for p in h.hardware_phenotypes)
            evidence = "<br>".join(_e(evidence_text(e)) for e in h.attribution.evidence[:4])
            rows.append([_ident(h.host_id), f"{h.crashes:,}",
                         _e(fmt_n(h.expected)),
                         _e(fmt_ratio(h.sir, h.sir_lower, h.sir_upper, h.sir_status)),
                         _e(f"{h.distinct_signatures} ({fmt_n(h.expected_distinct_signatures)})"),
                         _e(hw), _verdict(h.attribution.verdict), evidence])
        out.append(_table(["host", "crashes", "expected", "SIR (95% CI)",
                           "signatures (expected)", "hardware phenotypes", "attribution",
                           "evidence"], rows, {1, 2, 3, 4}))
    else:
        out.append("<p>No suspect host.</p>")

    # associations
    assoc = strongest_associations(f, limit=30)
    out.append("<h2>Strongest attribute associations</h2>")
    if assoc:
        plot_rows = []
        for r in assoc:
            a = r.association
            label = f"{r.group.key} · {a.attribute}={a.value}"
            plot_rows.append({"label": label, "irr": a.irr, "irr_lower": a.irr_lower,
                              "irr_upper": a.irr_upper, "irr_status": a.irr_status})
        out.append(forest_plot(plot_rows))
        rows = []
        for r in assoc:
            a = r.association
            adj = (fmt_ratio(a.adjusted_irr, a.adjusted_lower, a.adjusted_upper, a.adjusted_status)
                   if a.adjusted_irr is not None else "")
            rows.append([_ident(r.group.key), _e(f"{a.attribute}={a.value}"),
                         _e(f"{a.crashes:,} of {a.crashes + a.rest_crashes:,}"),
                         _e(r.hosts),
                         _e(fmt_ratio(a.irr, a.irr_lower, a.irr_upper, a.irr_status)), _e(adj),
                         _e(fmt_p(a.p_value)), _e(fmt_q(a.q_value, a.q_family))])
        out.append(_table(["group", "attribute", "crashes", "hosts (with it)",
                           "rate ratio (95% CI)", "adjusted (95% CI)", "p", "q"], rows,
                          {2, 3, 4, 5}))
    else:
        out.append("<p>No significant attribute association.</p>")
    for note in f.notes:
        out.append(f'<p class="note">note: {_e(note)}</p>')
    return "".join(out + _footer(f))


def _footer(f: FleetFindings) -> list[str]:
    """The schema line and the end of the document."""
    return [f'<p class="note">FleetFindings schema {_e(f.schema_version)}; '
            "the same findings as <code>coreepi report --format json</code>.</p>",
            "</body></html>\n"]
