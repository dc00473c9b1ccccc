"""The terminal report: the answers first, one sentence per finding, then the
detail — in tables when they fit the console's width, else as lists, so that
no word or identifier is ever split or cut (Rich wraps at spaces only: every
text goes in with ``overflow="fold"`` off and ``no_wrap`` off).

Layout: a headline; **Findings** (hardware-suspect hosts with a
recommendation, then groups by verdict: hardware-suspect, environment-triggered
with its trigger, software with its association); **Crash groups** and **Suspect
hosts** as lists; with ``details`` also every group, host and association
as tables (or lists at a narrow width).
"""

from __future__ import annotations

import io
from collections.abc import Mapping

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from coreepi.epi.models import Association, FleetFindings, GroupFinding, HostFinding
from coreepi.reporting.phrases import (
    already_drained,
    evidence_text,
    fmt_bound,
    fmt_ci,
    fmt_n,
    fmt_p,
    fmt_q,
    fmt_rate,
    fmt_ratio,
    fmt_ratio_value,
    headline,
    how_many,
    ratio_words,
    rates_note,
)
from coreepi.reporting.summary import (
    groups_title,
    strongest_associations,
    suspect_hosts,
    top_groups,
)
from coreepi.store.alert_records import DrainRecord

__all__ = ["VERDICT_STYLE", "finding_lines", "render_text", "text_report"]

VERDICT_STYLE = {
    "hardware-suspect": "bold red",
    "software": "cyan",
    "environment-triggered": "yellow",
    "undetermined": "dim",
}
SHOWN_GROUPS = 10
INDENT = 4


def _verdict(v: str) -> Text:
    return Text(v, style=VERDICT_STYLE.get(v, ""))


def _top_association(g: GroupFinding, attribute_class: str | None = None) -> Association | None:
    """The group's most significant raising association (of ``attribute_class``)."""
    q_max = 0.05
    found = [a for a in g.associations
             if a.q_value is not None and a.q_value <= q_max and (a.irr is None or a.irr > 1)
             and (attribute_class is None or a.attribute_class == attribute_class)]
    return min(found, key=lambda a: (a.p_value if a.p_value is not None else 2.0), default=None)


def _crude(a: Association) -> str:
    return fmt_ratio(a.irr, a.irr_lower, a.irr_upper, a.irr_status)


def _adjusted(a: Association) -> str:
    if a.adjusted_irr is None:
        return ""
    return fmt_ratio(a.adjusted_irr, a.adjusted_lower, a.adjusted_upper, a.adjusted_status)


def _assoc_words(a: Association) -> str:
    # a sentence: worded as the evidence sentences word the same ratio
    return (f"{a.crashes:,} of its crashes with {a.attribute}={a.value}, rate ratio "
            f"{ratio_words(a.irr, a.irr_lower, a.irr_upper, a.irr_status)}, "
            f"{fmt_q(a.q_value, a.q_family)}")


Drains = Mapping[str, DrainRecord]
"""The store's drained hosts by host_id (``Store.drained_hosts``): a drained
hardware-suspect host is said to be drained, not recommended for a drain."""


def _host_line(h: HostFinding, drains: Drains) -> Text:
    hw = ", ".join(f"{p.name} ×{p.crashes}" for p in h.hardware_phenotypes)
    text = Text.assemble(
        (f"{h.attribution.verdict} host ", VERDICT_STYLE.get(h.attribution.verdict, "")),
        (h.host_id, "bold"),
        f": {how_many(h.crashes, 'crash')} where {fmt_n(h.expected)} expected (SIR "
        # as the SIR evidence sentence words it (phrases._sir)
        f"{fmt_ratio_value(h.sir, h.sir_status)}, 95% CI {fmt_bound(h.sir_lower, h.sir_status)}"
        f"–{fmt_bound(h.sir_upper, h.sir_status)})",
    )
    if hw:
        text.append(f"; {hw}")
    drain = drains.get(h.host_id)
    if h.attribution.verdict == "hardware-suspect" and drain is not None:
        text.append(f"; {already_drained(drain.drained_at, drain.drained_by)}: run the "
                    f"hardware diagnostics, then `coreepi host undrain {h.host_id}` once "
                    "repaired", "bold")
    elif h.attribution.verdict == "hardware-suspect":
        text.append("; recommend drain and hardware diagnostics", "bold")
    return text


def _group_line(g: GroupFinding) -> Text:
    verdict = g.attribution.verdict
    spread = f"{how_many(g.crashes, 'crash')} on {how_many(g.hosts, 'host')}"
    if verdict == "environment-triggered":
        trigger = _top_association(g, "environment") or _top_association(g)
        if trigger is not None:
            return Text.assemble((f"{trigger.attribute}={trigger.value}", "yellow"),
                                 " triggers ", (g.key, "bold"), f": {spread}; "
                                 + _assoc_words(trigger))
    text = Text.assemble((f"{verdict} ", VERDICT_STYLE.get(verdict, "")),
                         ("bug " if verdict == "software" else f"{g.kind} "), (g.key, "bold"),
                         f": {spread}")
    top = g.concentration
    if verdict == "hardware-suspect" and top.top_host is not None:
        text.append(f" ({top.top_host} has {top.top_host_crashes:,})")
        return text
    assoc = _top_association(g)
    if assoc is not None:
        text.append("; " + _assoc_words(assoc))
    return text


def finding_lines(f: FleetFindings, drains: Drains | None = None) -> list[Text]:
    """One sentence per finding, the most actionable first: hardware-suspect
    hosts (those in ``drains`` said to be drained already), then signature
    groups by verdict (hardware-suspect, environment-triggered, software) and
    crash count, then phenotype groups
    whose verdict no signature group carries; a count of the undetermined."""
    lines = [_host_line(h, drains or {}) for h in f.hosts
             if h.attribution.verdict == "hardware-suspect"]
    order = {"hardware-suspect": 0, "environment-triggered": 1, "software": 2}
    decided = [g for g in f.groups if g.attribution.verdict in order]
    signatures = [g for g in decided if g.kind == "signature"]
    verdicts = {g.attribution.verdict for g in signatures}
    phenotypes = [g for g in decided if g.kind == "phenotype"
                  and g.attribution.verdict not in verdicts | {"software"}]
    for g in sorted(signatures + phenotypes,
                    key=lambda g: (order[g.attribution.verdict], -g.crashes, g.key)):
        lines.append(_group_line(g))
    rest = sum(g.attribution.verdict == "undetermined" for g in f.groups)
    if rest:
        lines.append(Text(f"{rest} group{'s' if rest > 1 else ''} undetermined (too few "
                          "crashes, or no pattern yet): see --details", style="dim"))
    return lines


def _bullet(text: Text, console: Console) -> None:
    """``text`` as a list item: wrapped at spaces with a hanging indent."""
    table = Table.grid(padding=(0, 1))
    table.add_column(width=1, no_wrap=True)
    table.add_column()
    table.add_row("•", text)
    console.print(table)


def _fits(table: Table, console: Console) -> bool:
    """Whether ``table`` fits the console without wrapping any cell (its
    natural width, measured as if the console had no limit)."""
    unlimited = console.options.update(width=100_000, max_width=100_000)
    return Measurement.get(console, unlimited, table).maximum <= console.width


def _section(title: str, console: Console) -> None:
    console.print()
    console.print(Text(title, style="bold underline"))


def _group_entry(g: GroupFinding, per: str | None) -> RenderableType:
    """One group as a list entry; ``per`` (``"1,000"``) None: the window shows no rate."""
    ev = evidence_text(g.attribution.evidence[0]) if g.attribution.evidence else ""
    head = Text.assemble((g.key, "bold"))
    rate = (f"{fmt_rate(g.rate)} per {per} node-days (95% CI "
            f"{fmt_ci(g.rate_lower, g.rate_upper)}) · " if per else "")
    facts = Text(f"{g.kind} · {how_many(g.crashes, 'crash')} on {how_many(g.hosts, 'host')} · "
                 f"{rate}")
    facts.append_text(_verdict(g.attribution.verdict))
    return _indented(head, facts, Text(ev) if ev else None)


def _indented(head: Text, *rest: Text | None) -> RenderableType:
    grid = Table.grid()
    grid.add_column(width=INDENT)
    grid.add_column()
    for line in rest:
        if line is not None:
            grid.add_row("", line)
    return Group(head, grid)


def _groups(f: FleetFindings, console: Console, limit: int | None) -> None:
    groups = top_groups(f, limit=limit or len(f.groups))
    # no rate column when the window's rates mean nothing: the headline said why, once
    per = f"{f.config.get('rate_per', 1000):,.0f}" if rates_note(f) is None else None
    title = groups_title(f)
    table = Table(title=title, title_justify="left", show_lines=True)
    columns = [("kind", {}), ("group", {}), ("crashes", {"justify": "right"}),
               ("hosts", {"justify": "right"})]
    columns += [("rate (95% CI)", {"justify": "right"})] if per else []
    for col, kw in (*columns, ("attribution", {}), ("top evidence", {})):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for g in groups:
        ev = evidence_text(g.attribution.evidence[0]) if g.attribution.evidence else ""
        rate = [f"{fmt_rate(g.rate)} ({fmt_ci(g.rate_lower, g.rate_upper)})"] if per else []
        table.add_row(g.kind, Text(g.key), f"{g.crashes:,}", f"{g.hosts:,}", *rate,
                      _verdict(g.attribution.verdict), Text(ev))
    if _fits(table, console):
        console.print(table)
        return
    _section(title, console)
    for g in groups:
        console.print(_group_entry(g, per))
    if len(f.groups) > len(groups):
        console.print(Text(f"{len(f.groups) - len(groups)} more groups: --details",
                           style="dim"))


def _hosts(f: FleetFindings, console: Console) -> None:
    hosts = suspect_hosts(f)
    if not hosts:
        console.print(Text("No suspect host."))
        return
    table = Table(title="Suspect hosts", title_justify="left", show_lines=True)
    for col, kw in (("host", {}), ("crashes", {"justify": "right"}),
                    ("expected", {"justify": "right"}), ("SIR (95% CI)", {"justify": "right"}),
                    ("signatures (expected)", {"justify": "right"}),
                    ("hardware phenotypes", {}), ("attribution", {}), ("top evidence", {})):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for h in hosts:
        hw = ", ".join(f"{p.name} ×{p.crashes}" for p in h.hardware_phenotypes)
        ev = evidence_text(h.attribution.evidence[0]) if h.attribution.evidence else ""
        table.add_row(Text(h.host_id), f"{h.crashes:,}", fmt_n(h.expected),
                      fmt_ratio(h.sir, h.sir_lower, h.sir_upper, h.sir_status),
                      f"{h.distinct_signatures} ({fmt_n(h.expected_distinct_signatures)})",
                      Text(hw), _verdict(h.attribution.verdict), Text(ev))
    if _fits(table, console):
        console.print(table)
        return
    _section("Suspect hosts", console)
    for h in hosts:
        ev = evidence_text(h.attribution.evidence[0]) if h.attribution.evidence else None
        facts = Text(f"{how_many(h.crashes, 'crash')}, {fmt_n(h.expected)} expected, SIR "
                     f"{fmt_ratio(h.sir, h.sir_lower, h.sir_upper, h.sir_status)}; "
                     f"{how_many(h.distinct_signatures, 'signature')} "
                     f"({fmt_n(h.expected_distinct_signatures)}"
                     " expected) · ")
        facts.append_text(_verdict(h.attribution.verdict))
        console.print(_indented(Text(h.host_id, style="bold"), facts,
                                Text(ev) if ev else None))


def _associations(f: FleetFindings, console: Console) -> None:
    rows = strongest_associations(f)
    if not rows:
        console.print(Text("No significant attribute association."))
        return
    table = Table(title="Strongest attribute associations", title_justify="left")
    for col, kw in (("group", {}), ("attribute", {}), ("crashes", {"justify": "right"}),
                    ("hosts (with it)", {"justify": "right"}),
                    ("rate ratio (95% CI)", {"justify": "right"}),
                    ("adjusted (95% CI)", {"justify": "right"}), ("p", {}), ("q", {})):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for r in rows:
        a = r.association
        table.add_row(Text(r.group.key), Text(f"{a.attribute}={a.value}"),
                      f"{a.crashes:,} of {a.crashes + a.rest_crashes:,}", r.hosts, _crude(a),
                      _adjusted(a), fmt_p(a.p_value), fmt_q(a.q_value, a.q_family))
    if _fits(table, console):
        console.print(table)
        return
    _section("Strongest attribute associations", console)
    for r in rows:
        a = r.association
        adj = f"; adjusted {_adjusted(a)}" if a.adjusted_irr is not None else ""
        console.print(_indented(
            Text.assemble((f"{a.attribute}={a.value}", "bold"), " in ", r.group.key),
            Text(f"{a.crashes:,} of {how_many(a.crashes + a.rest_crashes, 'crash')}"
                 + (f" on {r.hosts} hosts with it" if r.hosts else "") + ", rate ratio "
                 f"{_crude(a)}{adj}, {fmt_p(a.p_value)}, "
                 f"{fmt_q(a.q_value, a.q_family)}")))


def render_text(findings: FleetFindings, console: Console, *, details: bool = False,
                drains: Drains | None = None) -> None:
    """Print the report to ``console`` (its width decides tables or lists).
    Every string from crash data goes in as :class:`rich.text.Text` (never
    parsed as markup)."""
    f = findings
    console.print(Text("coreepi report", style="bold"))
    console.print(Text(headline(f)))
    if not f.window.crashes:  # the headline says so: nothing more to show
        return
    _section("Findings", console)
    lines = finding_lines(f, drains)
    for line in lines or [Text("No group or host stands out.")]:
        _bullet(line, console)
    console.print()
    _groups(f, console, None if details else SHOWN_GROUPS)
    console.print()
    _hosts(f, console)
    if details:
        console.print()
        _associations(f, console)
        for note in f.notes:
            console.print(Text(f"note: {note}", style="dim"))
    else:
        console.print()
        console.print(Text("More: --details (every group, the attribute associations, notes), "
                           "--format html.", style="dim"))


def text_report(findings: FleetFindings, width: int = 160, *, details: bool = False,
                color: bool = False, drains: Drains | None = None) -> str:
    """The text report at ``width`` columns, e.g. for ``--out FILE`` or a
    pager (``color``: ANSI colours; ``drains``: see :data:`Drains`); lines
    carry no trailing blanks."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="standard" if color else None,
                      force_terminal=color, soft_wrap=False, emoji=False, highlight=False)
    render_text(findings, console, details=details, drains=drains)
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))
