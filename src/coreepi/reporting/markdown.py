"""The Markdown report (GitHub-flavoured tables), e.g. for a ticket or a wiki page.

Text from crash data is escaped so that it stays text: ``|`` cannot break a
table, ``<script>`` is not HTML, ``*``/``_``/backticks/brackets are not markup.
"""

from __future__ import annotations

import re

from coreepi.epi.models import FleetFindings
from coreepi.reporting.phrases import (
    evidence_text,
    fmt_ci,
    fmt_n,
    fmt_p,
    fmt_q,
    fmt_rate,
    fmt_ratio,
    headline,
    rates_note,
)
from coreepi.reporting.summary import (
    groups_title,
    strongest_associations,
    suspect_hosts,
    top_groups,
)

__all__ = ["markdown_report", "md_escape"]

_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(text: object) -> str:
    """Text safe in a Markdown table cell."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    s = _SPECIAL.sub(r"\\\1", s)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _table(head: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def markdown_report(findings: FleetFindings) -> str:
    f = findings
    out = ["# coreepi report", "", md_escape(headline(f)), ""]
    if not f.window.crashes:  # the headline says so once ("no crash: nothing to analyse")
        return "\n".join(out).rstrip() + "\n"

    out += [f"## {groups_title(f)}", ""]
    shown = rates_note(f) is None  # else no rate column: the headline said why, once
    rows = []
    for g in top_groups(f):
        ev = evidence_text(g.attribution.evidence[0]) if g.attribution.evidence else ""
        rate = [md_escape(f"{fmt_rate(g.rate)} ({fmt_ci(g.rate_lower, g.rate_upper)})")]
        rows.append([g.kind, md_escape(g.key), f"{g.crashes:,}", f"{g.hosts:,}",
                     *(rate if shown else []), f"**{g.attribution.verdict}**", md_escape(ev)])
    head = ["kind", "group", "crashes", "hosts", *(["rate (95% CI)"] if shown else []),
            "attribution", "top evidence"]
    out += _table(head, rows, {2, 3, 4} if shown else {2, 3}) if rows else ["No crash group."]
    out.append("")

    out += ["## Suspect hosts", ""]
    hosts = suspect_hosts(f)
    if hosts:
        rows = []
        for h in hosts:
            hw = ", ".join(f"{p.name} ×{p.crashes}" for p in h.hardware_phenotypes)
            ev = evidence_text(h.attribution.evidence[0]) if h.attribution.evidence else ""
            rows.append([md_escape(h.host_id), f"{h.crashes:,}", md_escape(fmt_n(h.expected)),
                         md_escape(fmt_ratio(h.sir, h.sir_lower, h.sir_upper, h.sir_status)),
                         md_escape(f"{h.distinct_signatures} "
                                   f"({fmt_n(h.expected_distinct_signatures)})"),
                         md_escape(hw), f"**{h.attribution.verdict}**", md_escape(ev)])
        out += _table(["host", "crashes", "expected", "SIR (95% CI)", "signatures (expected)",
                       "hardware phenotypes", "attribution", "top evidence"], rows, {1, 2, 3, 4})
    else:
        out.append("No suspect host.")
    out.append("")

    out += ["## Strongest attribute associations", ""]
    assoc = strongest_associations(f)
    if assoc:
        rows = []
        for r in assoc:
            a = r.association
            adj = (fmt_ratio(a.adjusted_irr, a.adjusted_lower, a.adjusted_upper, a.adjusted_status)
                   if a.adjusted_irr is not None else "")
            rows.append([md_escape(r.group.key), md_escape(f"{a.attribute}={a.value}"),
                         f"{a.crashes:,} of {a.crashes + a.rest_crashes:,}", r.hosts,
                         md_escape(fmt_ratio(a.irr, a.irr_lower, a.irr_upper, a.irr_status)),
                         md_escape(adj),
                         md_escape(fmt_p(a.p_value)), md_escape(fmt_q(a.q_value, a.q_family))])
        out += _table(["group", "attribute", "crashes", "hosts (with it)",
                       "rate ratio (95% CI)", "adjusted (95% CI)", "p", "q"], rows,
                      {2, 3, 4, 5})
    else:
        out.append("No significant attribute association.")
    out.append("")
    for note in f.notes:
        out.append(f"> note: {md_escape(note)}")
    return "\n".join(out).rstrip() + "\n"
