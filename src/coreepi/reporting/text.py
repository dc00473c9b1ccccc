"""The terminal report: Rich tables of groups, suspect hosts and associations."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

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
)
from coreepi.reporting.summary import strongest_associations, suspect_hosts, top_groups

__all__ = ["VERDICT_STYLE", "render_text", "text_report"]

VERDICT_STYLE = {
    "hardware-suspect": "bold red",
    "software": "cyan",
    "environment-triggered": "yellow",
    "undetermined": "dim",
}


def _verdict(v: str) -> Text:
    return Text(v, style=VERDICT_STYLE.get(v, ""))


def render_text(findings: FleetFindings, console: Console) -> None:
    """Print the report to ``console``. Every string from crash data goes in as
    :class:`rich.text.Text` (never parsed as markup)."""
    f = findings
    per = f"{f.config.get('rate_per', 1000):,.0f}"
    console.print(Text("coreepi report", style="bold"))
    console.print(Text(headline(f)))
    if not f.window.crashes:
        console.print(Text("No crash in this window.", style="bold"))

    groups = Table(title=f"Crash groups by rate (per {per} node-days)", title_justify="left",
                   show_lines=True)
    for col, kw in (("kind", {}), ("group", {"overflow": "fold", "max_width": 48}),
                    ("crashes", {"justify": "right"}), ("hosts", {"justify": "right"}),
                    ("rate (95% CI)", {"justify": "right"}), ("attribution", {}),
                    ("top evidence", {"overflow": "fold"})):
        groups.add_column(col, **kw)
    for g in top_groups(f):
        ev = evidence_text(g.attribution.evidence[0]) if g.attribution.evidence else ""
        groups.add_row(
            g.kind, Text(g.key), f"{g.crashes:,}", f"{g.hosts:,}",
            f"{fmt_rate(g.rate)} ({fmt_ci(g.rate_lower, g.rate_upper)})",
            _verdict(g.attribution.verdict), Text(ev),
        )
    if f.groups:
        console.print(groups)

    hosts = suspect_hosts(f)
    if hosts:
        table = Table(title="Suspect hosts", title_justify="left", show_lines=True)
        for col, kw in (("host", {}), ("crashes", {"justify": "right"}),
                        ("expected", {"justify": "right"}), ("SIR (95% CI)", {"justify": "right"}),
                        ("signatures (expected)", {"justify": "right"}),
                        ("hardware phenotypes", {}), ("attribution", {}),
                        ("top evidence", {"overflow": "fold"})):
            table.add_column(col, **kw)  # type: ignore[arg-type]
        for h in hosts:
            hw = ", ".join(f"{p.name} ×{p.crashes}" for p in h.hardware_phenotypes)
            ev = evidence_text(h.attribution.evidence[0]) if h.attribution.evidence else ""
            table.add_row(
                Text(h.host_id), f"{h.crashes:,}", fmt_n(h.expected),
                fmt_ratio(h.sir, h.sir_lower, h.sir_upper, h.sir_status),
                f"{h.distinct_signatures} ({fmt_n(h.expected_distinct_signatures)})",
                Text(hw), _verdict(h.attribution.verdict), Text(ev),
            )
        console.print(table)
    else:
        console.print(Text("No suspect host."))

    rows = strongest_associations(f)
    if rows:
        table = Table(title="Strongest attribute associations", title_justify="left")
        for col, kw in (("group", {"overflow": "fold", "max_width": 40}), ("attribute", {}),
                        ("crashes", {"justify": "right"}),
                        ("rate ratio (95% CI)", {"justify": "right"}),
                        ("adjusted (95% CI)", {"justify": "right"}),
                        ("p", {}), ("q", {})):
            table.add_column(col, **kw)
        for r in rows:
            a = r.association
            adj = (fmt_ratio(a.adjusted_irr, a.adjusted_lower, a.adjusted_upper, a.adjusted_status)
                   if a.adjusted_irr is not None else "")
            table.add_row(
                Text(r.group.key), Text(f"{a.attribute}={a.value}"),
                f"{a.crashes:,} of {a.crashes + a.rest_crashes:,}",
                fmt_ratio(a.irr, a.irr_lower, a.irr_upper, a.irr_status), adj, fmt_p(a.p_value),
                fmt_q(a.q_value),
            )
        console.print(table)
    else:
        console.print(Text("No significant attribute association."))
    for note in f.notes:
        console.print(Text(f"note: {note}", style="dim"))


def text_report(findings: FleetFindings, width: int = 160) -> str:
    """The text report as plain text (no colour), e.g. for ``--out FILE``."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                      soft_wrap=False, emoji=False, highlight=False)
    render_text(findings, console)
    return buf.getvalue()
