"""Every number format and sentence of the reports: one place, used by text, Markdown and HTML.

``coreepi.epi`` returns numbers and evidence as data
(:class:`~coreepi.epi.models.Evidence`: a kind, its numbers, its values);
this module words them:

* numbers — :func:`fmt_n` (counts and expectations), :func:`fmt_p` /
  :func:`fmt_q`, :func:`fmt_rate`, :func:`fmt_ci`, and ratios with their status
  (:func:`fmt_ratio_value`, :func:`fmt_ratio`): a finite ratio is a number, an
  unbounded one (k/0) ``unbounded`` (``∞`` in a table cell), an undefined one
  (0/0) ``undefined (0/0)``;
* sentences — :func:`evidence_text` (one per evidence kind, the table
  :data:`PHRASES`) and :func:`headline`; :func:`rates_note` says why a window
  shows no rate (every renderer asks it, so all decide alike) and
  :func:`hosts_phrase` counts its hosts.

Pure functions of their arguments; strings from crash data are returned as
is (each renderer escapes for its medium).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from coreepi.epi.models import Evidence, FleetFindings, RatioStatus, Tally, TelemetryLead

__all__ = [
    "EVENT_WORDS",
    "PHRASES",
    "already_drained",
    "evidence_text",
    "fmt_bound",
    "fmt_ci",
    "fmt_n",
    "fmt_p",
    "fmt_q",
    "recheck_sentence",
    "fmt_rate",
    "fmt_ratio",
    "fmt_ratio_value",
    "headline",
    "hosts_phrase",
    "rates_note",
    "ratio_words",
    "how_many",
    "lead_text",
]

UNDEFINED = "undefined (0/0)"


# --- numbers -----------------------------------------------------------------------------


def fmt_p(p: float | None) -> str:
    """``p < 1e-20``, ``p = 3.2e-05``, ``p = 0.031``, ``p = 1``; ``p n/a`` when undefined."""
    if p is None or not math.isfinite(p):
        return "p n/a"
    if p < 1e-20:
        return "p < 1e-20"
    if p < 1e-3:
        return f"p = {p:.1e}"
    return f"p = {p:.2g}"


def fmt_q(q: float | None, family: str | None = None) -> str:
    """A q-value in the format of :func:`fmt_p` with the family it was corrected in:
    ``q = 0.003 (signature-group family)``; signature and phenotype groups are separate
    FDR families (docs/epidemiology.md), so a q means nothing without its family."""
    text = fmt_p(q).replace("p", "q", 1)
    return f"{text} ({family}-group family)" if family else text


def fmt_n(x: float | None) -> str:
    """Two significant digits for small numbers, no exponent below a million; ``n/a`` for
    None or NaN, ``unbounded`` for ±inf."""
    if x is None or math.isnan(x):
        return "n/a"
    if not math.isfinite(x):
        return "unbounded"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 0.01:
        return f"{x:.2g}" if abs(x) < 10 else f"{x:.3g}"
    return f"{x:.1e}"


def fmt_ratio_value(x: float | None, status: RatioStatus | None) -> str:
    """A ratio in a sentence: a number, ``unbounded`` (k/0) or ``undefined (0/0)``."""
    if status == "unbounded":
        return "unbounded"
    if status == "undefined":
        return UNDEFINED
    return fmt_n(x)


def fmt_bound(x: float | None, status: RatioStatus | None) -> str:
    """A confidence limit of a ratio: a missing limit is ``unbounded`` (the reference side
    has no event), or ``n/a`` when the ratio itself is undefined."""
    if x is None:
        return "n/a" if status == "undefined" else "unbounded"
    return fmt_n(x)


def ratio_words(x: float | None, lo: float | None, hi: float | None,
                status: RatioStatus | None) -> str:
    """A ratio with its interval in a sentence, the one wording of every
    report and page: ``3.1 (95% CI 2.0–4.7)``, ``unbounded (95% CI
    24–unbounded)`` (k/0), ``undefined (0/0)``. Table cells use
    :func:`fmt_ratio` (``∞``)."""
    if status == "undefined":
        return UNDEFINED
    return (f"{fmt_ratio_value(x, status)} (95% CI {fmt_bound(lo, status)}–"
            f"{fmt_bound(hi, status)})")


def how_many(n: int | None, noun: str, plural: str | None = None) -> str:
    """``"1 crash"``, ``"2 crashes"``, ``"1,204 hosts"``: ``n`` with thousands
    separators and the noun in number (``plural`` default: noun + ``s``, or
    + ``es`` after s, sh, ch, x); ``"? crashes"`` when ``n`` is None (an
    evidence count not recorded)."""
    if n == 1:
        return f"1 {noun}"
    many = plural or noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")
    return f"? {many}" if n is None else f"{n:,} {many}"


def already_drained(at: datetime, by: str) -> str:
    """What a report says of a hardware-suspect host that is drained already,
    in place of "recommend drain": ``already drained (since 2026-12-01 22:28
    UTC, by ui:adm)`` (``at`` UTC; ``by`` "" reads "unknown")."""
    return f"already drained (since {at:%Y-%m-%d %H:%M} UTC, by {by or 'unknown'})"


def recheck_sentence(r: dict[str, Any], baseline_days: float) -> str:
    """One sentence for a drained host's re-check (the dict of
    :func:`coreepi.epi.surveillance.drain_recheck`, non-finite values as
    None) after its verdict: the counts behind it, or why there is nothing to
    compare (no crash of the host in the ``baseline_days`` before the drain:
    when it crashed earlier, ``host_last_crash`` (ISO) and
    ``host_last_crash_days_before`` say when, e.g. a host drained long after
    its crashes)."""
    if not r["host_crashes_before"]:
        last = r.get("host_last_crash")
        if last:
            days_before = r["host_last_crash_days_before"]
            return (f"the host's last crash was {last[:10]}, {days_before:,.0f} days before "
                    f"the drain (more than the {baseline_days:g} days compared): nothing "
                    "recent to follow on the other hosts")
        return (f"nothing to compare: no crash on this host in the {baseline_days:g} days "
                "before the drain, nor earlier, so no crash group to follow on the other hosts")
    text = (f"its {how_many(r['signatures'], 'signature')} had "
            f"{how_many(r['host_crashes_before'], 'crash')} on this host and "
            f"{r['others_crashes_before']:,} elsewhere in the "
            f"{r['others_node_days_before']:,.0f} node-days before the drain; "
            f"{r['others_crashes_after']:,} elsewhere in the "
            f"{r['others_node_days_after']:,.1f} node-days since")
    if r.get("ratio") is not None and r.get("upper") is not None:
        text += (f" (rate ratio {fmt_n(r['ratio'])}, 95% CI "
                 f"{fmt_n(r['lower'])}–{fmt_n(r['upper'])})")
    return text


def fmt_rate(x: float | None) -> str:
    """A rate or ratio with three significant digits (``n/a`` when undefined)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def fmt_ci(lo: float | None, hi: float | None) -> str:
    """``1.2–3.4``; an undefined upper limit is ``unbounded``."""
    return f"{fmt_rate(lo)}–{fmt_rate(hi) if hi is not None else 'unbounded'}"


def fmt_ratio(
    x: float | None, lo: float | None, hi: float | None, status: RatioStatus | None = "finite"
) -> str:
    """A table cell: ``3.1 (2.0–4.7)``; unbounded (k/0) ``∞ (2.0–unbounded)``; undefined
    (0/0) ``undefined (0/0)``."""
    if status == "undefined":
        return UNDEFINED
    return f"{'∞' if status == 'unbounded' or x is None else fmt_rate(x)} ({fmt_ci(lo, hi)})"


NO_EXPOSURE = ("no exposure data in this window (exposure.csv / agent heartbeats): crashes "
               "are grouped, but rates, ratios and the host tests need node-time")
"""What a window without node-time says, once, instead of any rate."""


def fmt_node_days(x: float) -> str:
    """Node-days: ``5,865.7``; under one, two significant digits (``0.008``), so thin
    exposure never reads ``0.0``."""
    return f"{x:,.1f}" if x >= 1 else f"{x:.2g}"


def rates_note(f: FleetFindings) -> str | None:
    """Why the window shows no rate (None: its rates are shown), from
    ``window.rates_undetermined_reason``; a window of a producer before 2.4.0
    without node-time reads as ``no-exposure``."""
    w = f.window
    if w.rates_undetermined_reason == "no-exposure" or w.node_days <= 0:
        return NO_EXPOSURE
    if w.rates_undetermined_reason == "thin-exposure":
        return (f"exposure too thin for rates ({fmt_node_days(w.node_days)} node-days from "
                f"{how_many(w.hosts, 'host')} so far)")
    return None


def hosts_phrase(f: FleetFindings) -> str:
    """The window's hosts after its crash count: ``on 16 of 200 hosts``; without exposure
    ``on 16 hosts``; when some crashes fall outside exposure (their hosts may be
    unobserved, so not "of" the observed ones), or fewer hosts have exposure than
    crashes, ``on 3 hosts with crashes, 2 with exposure`` — never "3 of 2 hosts"."""
    w = f.window
    if w.hosts <= 0:
        return f"on {how_many(w.hosts_with_crashes, 'host')}"
    if w.hosts_with_crashes > w.hosts or w.crashes_outside_exposure:
        return (f"on {how_many(w.hosts_with_crashes, 'host')} with crashes, {w.hosts:,} with "
                "exposure")
    return f"on {w.hosts_with_crashes:,} of {how_many(w.hosts, 'host')}"


def headline(f: FleetFindings) -> str:
    """One line: window, exposure, hosts, crashes, overall rate; a window
    without crashes says there is nothing to analyse (no rate of 0/0); a
    window without exposure, or too little of it (:func:`rates_note`), says
    so instead of the rate. Crashes outside exposure are named, as the rate
    leaves them out."""
    w = f.window
    per = f.config.get("rate_per", 1000)
    span = f"{w.since:%Y-%m-%d %H:%M} – {w.until:%Y-%m-%d %H:%M} UTC"
    if not w.crashes:
        exposure = (f" on {how_many(w.hosts, 'host')} over {fmt_node_days(w.node_days)} "
                    "node-days" if w.hosts else "")
        return f"{span}: no crash{exposure}: nothing to analyse"
    groups = (f"{how_many(w.signature_groups, 'signature')}, "
              f"{how_many(w.phenotype_groups, 'phenotype')}")
    note = rates_note(f)
    if note is not None:
        return f"{span}: {how_many(w.crashes, 'crash')} {hosts_phrase(f)}; {note}; {groups}"
    outside = (f" ({w.crashes_outside_exposure:,} outside exposure, not in the rate)"
               if w.crashes_outside_exposure else "")
    return (
        f"{span}: {how_many(w.crashes, 'crash')}{outside} {hosts_phrase(f)} over "
        f"{fmt_node_days(w.node_days)} node-days; {fmt_rate(w.rate)} per {per:,.0f} node-days "
        f"(95% CI {fmt_ci(w.rate_lower, w.rate_upper)}); {groups}"
    )


# --- evidence ----------------------------------------------------------------------------

EVENT_WORDS = {
    "edac_ue": "EDAC uncorrected error", "edac_ce": "EDAC corrected error",
    "mce": "machine check", "xid": "NVIDIA Xid error", "aer": "PCIe AER error",
    "sigbus_mce": "SIGBUS memory-error kill", "other": "hardware event",
}  # fmt: skip
"""Telemetry event kinds (:class:`coreepi.model.events.EventKind`) in words."""


def _host(e: Evidence) -> str:
    return ", ".join(e.host_ids)


def _on_host(e: Evidence) -> str:
    """``host h-017: `` for a host's evidence, nothing for a group's."""
    return f"host {_host(e)}: " if e.host_ids else ""


def _names(tallies: list[Tally]) -> str:
    return ", ".join(f"{t.count} {t.name}" for t in tallies)


def _sample_size(e: Evidence) -> str:
    if e.host_ids:
        return (f"host {_host(e)}: only {how_many(e.observed, 'crash')}; at least "
                f"{e.minimum} are needed")
    return (f"only {how_many(e.observed, 'crash')} on {how_many(e.hosts, 'host')}; at least "
            f"{e.minimum} are needed")


def _concentration(e: Evidence) -> str:
    return (f"{e.observed} of {how_many(e.total, 'crash')} on host {_host(e)}, expected "
            f"{fmt_n(e.expected)}, {fmt_p(e.p)}")


def _without_signs(e: Evidence) -> str:
    return (f"host {_host(e)} shows no hardware sign (diversity, private signatures, "
            "hardware phenotypes, hardware telemetry): a workload or configuration only "
            "that host has is as likely as its hardware")


def _rest_beside(e: Evidence) -> str:
    top = (e.total or 0) - (e.observed or 0)
    return (f"{top} of {how_many(e.total, 'crash')} on host {_host(e)}, which shows hardware "
            f"signs; the other {how_many(e.observed, 'crash')} on {how_many(e.hosts, 'host')} "
            f"are too few to judge without it (at least {e.minimum} are needed)")


def _spread(e: Evidence) -> str:
    top = (f"; the top host {_host(e)} has {e.observed} ({e.share or 0.0:.0%}), expected "
           f"{fmt_n(e.expected)}" if e.host_ids else "")
    return f"{how_many(e.total, 'crash')} on {how_many(e.hosts, 'host')}{top}"


def _adjusted(e: Evidence) -> str:
    a = e.adjusted
    assert a is not None
    return (f"{fmt_ratio_value(a.ratio, a.ratio_status)} ({fmt_bound(a.ci_low, a.ratio_status)}"
            f"–{fmt_bound(a.ci_high, a.ratio_status)})")


def _crude(e: Evidence) -> str:
    return (f"{fmt_ratio_value(e.ratio, e.ratio_status)} ({fmt_bound(e.ci_low, e.ratio_status)}"
            f"–{fmt_bound(e.ci_high, e.ratio_status)})")


# how an adjusted ratio was estimated, when it is not the plain Poisson GLM
_ADJUSTED_HOW = {"exact-conditional": " (exact conditional)",
                 "poisson-glm-cluster": " (Poisson GLM, CI robust to clustering by host)"}


def _rate_ratio(e: Evidence) -> str:
    lead = (f"{e.share:.0%} of its crashes with a known {e.attribute} have "
            f"{e.attribute}={e.level}; " if e.share is not None else "")
    text = (f"{e.attribute}={e.level}: {how_many(e.observed, 'crash')}, rate ratio "
            f"{ratio_words(e.ratio, e.ci_low, e.ci_high, e.ratio_status)} vs "
            f"the rest of the fleet, {fmt_p(e.p)}, {fmt_q(e.q, e.q_family)}")
    if e.adjusted is not None:
        how = _ADJUSTED_HOW.get(e.adjusted.method, "")
        text += (f"; adjusted for {', '.join(e.adjusted.adjusted_for) or 'nothing'}{how}: "
                 f"{_adjusted(e)}")
    elif e.note:
        text += f" ({e.note})"
    return lead + text


def _confounding(e: Evidence) -> str:
    adjusted_for = ", ".join(e.adjusted.adjusted_for) if e.adjusted else ""
    return (f"{e.attribute}={e.level}: crude rate ratio {_crude(e)} falls to "
            f"{_adjusted(e) if e.adjusted else 'n/a'} adjusted for {adjusted_for}: explained "
            "by confounding")


def _hardware_phenotypes(e: Evidence) -> str:
    return (f"{_on_host(e)}{e.observed} of {how_many(e.total, 'crash')} hardware-indicative "
            f"({_names(e.tallies)})")


def _diversity(e: Evidence) -> str:
    return (f"host {_host(e)}: {how_many(e.observed, 'distinct signature')} in "
            f"{how_many(e.total, 'crash')} where the "
            f"fleet's signature mix predicts {fmt_n(e.expected)}")


def _private(e: Evidence) -> str:
    return f"host {_host(e)}: {e.observed} of its signatures occur on no other host"


def lead_text(lead: TelemetryLead) -> str:
    """``3 EDAC uncorrected errors on DIMM_B2``."""
    word = EVENT_WORDS.get(lead.event_kind, lead.event_kind)
    return f"{lead.events} {word}{'s' if lead.events != 1 else ''}" + (
        f" on {lead.component}" if lead.component else "")


def _telemetry(e: Evidence) -> str:
    # The tallies count only the events in the window before a crash (epi's
    # HostTables.events), not every event of the report's window: a host
    # page listing all of them must not read as a contradiction.
    kinds = _names(e.tallies)
    example = f': "{e.example}"' if e.example else ""
    days = e.window_days or 0.0
    hours = days * 24
    window = f"{hours:g} h" if hours < 72 else f"{fmt_n(days)} days"  # 72 h or more: plural
    counted = f"only events in the {window} before a crash count: {kinds}"
    if e.lead is not None:
        return (f"host {_host(e)}: {lead_text(e.lead)} in the {window} before {e.observed} of "
                f"its {how_many(e.total, 'crash')} ({counted}){example}")
    return (f"host {_host(e)}: {e.observed} of {how_many(e.total, 'crash')} within "
            f"{fmt_n(days)} day{'' if days == 1 else 's'} "
            f"after a hardware event ({counted}){example}")


def _sir(e: Evidence) -> str:
    s = e.ratio_status
    # an undefined SIR (no fleet rate) has no meaningful expectation nor p-value, whatever
    # numbers the table holds
    expected = "n/a" if s == "undefined" else fmt_n(e.expected)
    p = fmt_p(None if s == "undefined" else e.p)
    return (f"host {_host(e)}: {how_many(e.observed, 'crash')} where {expected} expected (SIR "
            f"{fmt_ratio_value(e.ratio, s)}, 95% CI {fmt_bound(e.ci_low, s)}–"
            f"{fmt_bound(e.ci_high, s)}, {p})")


def _excess_without_signs(e: Evidence) -> str:
    return f"host {_host(e)}: excess crashes without a hardware sign"


def _group_verdicts(e: Evidence) -> str:
    parts = ", ".join(f"{t.count} in {t.name} groups" for t in e.tallies)
    return f"host {_host(e)}: of its {how_many(e.total, 'crash')}, {parts}"


def _insufficient(e: Evidence) -> str:
    return (f"host {_host(e)}: insufficient exposure — {fmt_n(e.node_days)} node-days "
            f"observed, at least {fmt_n(e.threshold)} needed for any test; its "
            f"{how_many(e.observed, 'crash')} {'is' if e.observed == 1 else 'are'} counted, "
            "not judged")


def _window_exposure(e: Evidence) -> str:
    if e.note == "no-exposure":
        return ("no exposure data in this window: a verdict needs node-time (exposure.csv or "
                "agent heartbeats)")
    node_days = e.node_days or 0.0
    threshold = e.threshold or 0.0
    why: list[str] = []
    if node_days < threshold:
        why.append(f"at least {threshold:g} node-day{'' if threshold == 1 else 's'} "
                   f"{'is' if threshold == 1 else 'are'} needed")
    if (e.hosts or 0) < (e.hosts_with_crashes or 0):
        why.append(f"{how_many(e.hosts_with_crashes, 'host')} have crashes: each needs "
                   "node-time")
    return (f"exposure too thin for a verdict: {fmt_node_days(node_days)} node-days from "
            f"{how_many(e.hosts, 'host')} ({'; '.join(why)})")


def _host_clustered(e: Evidence) -> str:
    return (f"host-clustered: {how_many(e.hosts, 'host')} {'holds' if e.hosts == 1 else 'hold'}"
            f" {e.observed} of the {how_many(e.total, 'crash')} "
            f"with {e.attribute}={e.level} ({_host(e)}): those hosts, not {e.attribute}, "
            "explain them")


def _host_level(e: Evidence) -> str:
    return (f"{e.attribute}={e.level} at the host level: {e.observed} of "
            f"{how_many(e.exposed, 'host')} "
            f"affected vs {e.rest_observed} of {e.rest_exposed} with another value "
            f"(Fisher exact, {fmt_p(e.p)})")


def _not_estimable(e: Evidence) -> str:
    why = f" ({e.note})" if e.note else ""
    return (f"{e.attribute}={e.level}: confounding could not be assessed{why}; the crude "
            f"ratio alone does not name {e.attribute}")


PHRASES: dict[str, Callable[[Evidence], str]] = {
    "insufficient-exposure": _insufficient,
    "window-exposure": _window_exposure,
    "host-clustered": _host_clustered,
    "host-level": _host_level,
    "adjustment-not-estimable": _not_estimable,
    "sample-size": _sample_size,
    "host-concentration": _concentration,
    "concentration-without-signs": _without_signs,
    "fleet-spread": _spread,
    "rest-beside-hardware-host": _rest_beside,
    "rate-ratio": _rate_ratio,
    "confounding": _confounding,
    "hardware-phenotypes": _hardware_phenotypes,
    "diversity": _diversity,
    "private-signatures": _private,
    "telemetry": _telemetry,
    "sir": _sir,
    "excess-without-signs": _excess_without_signs,
    "group-verdicts": _group_verdicts,
}
"""One sentence per evidence kind (a test checks every kind of EvidenceKind has one)."""


def evidence_text(e: Evidence) -> str:
    """The sentence for one evidence item, a person can check it against the data."""
    return PHRASES[e.kind](e)
