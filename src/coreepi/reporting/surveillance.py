"""The sentence of a surveillance detection (its evidence stays data in ``epi``).

    rollout-regression →
    "sig_004: rate ×5.2 (95% CI 3.9–6.8) on kernel 6.8.0-45 since it reached 30% of node-time
    on 2026-11-01 (41 hosts with 44 crashes on it)"
"""

from __future__ import annotations

from coreepi.epi.surveillance import Detection
from coreepi.reporting.phrases import fmt_bound, fmt_ratio_value, how_many

__all__ = ["alert_summary"]


def _per_1000(crashes: float, node_days: float) -> str:
    return f"{1000 * crashes / node_days:.3g}" if node_days > 0 else "∞"


def _ratio(e: dict) -> str:
    """The evidence's ratio (:func:`coreepi.epi.surveillance.models.ratio_evidence`):
    ``×5.2``, or ``unbounded`` (k/0) / ``undefined (0/0)``."""
    status = e.get("ratio_status")
    if status in ("unbounded", "undefined"):
        return fmt_ratio_value(None, status)
    return f"×{float(e['ratio']):.1f}"


def _bound(e: dict, name: str) -> str:
    x = e.get(name)
    return fmt_bound(None, e.get("ratio_status")) if x is None else f"{float(x):.1f}"


def _group(subject: dict[str, str]) -> str:
    """A signature group by its signature; a phenotype group as "phenotype NAME"."""
    return subject["signature"] if "signature" in subject else f"phenotype {subject['phenotype']}"


def alert_summary(d: Detection) -> str:
    """One line saying what was detected, with its numbers."""
    e, s = d.evidence, d.subject
    if d.kind == "new-group":
        return (f"new crash group {_group(s)}: {how_many(int(e['crashes']), 'crash')} on "
                f"{how_many(int(e['hosts']), 'host')} "
                f"since {_minute(e['first_seen'])} UTC")
    if d.kind == "rising":
        base = _per_1000(float(e["baseline_crashes"]), float(e["baseline_node_days"]))
        now = _per_1000(float(e["run_crashes"]), float(e["run_node_days"]))
        return (f"{_group(s)} is rising: {now} crashes per 1,000 node-days since "
                f"{_minute(e['run_start'])} UTC against {base} in its "
                f"baseline ({_ratio(e)}, CUSUM {float(e['statistic']):.1f})")
    if d.kind == "rollout-regression":
        # alerts stored before hosts were counted carry no hosts_on_value
        hosts = (f" ({how_many(int(e['hosts_on_value']), 'host')} with "
                 f"{how_many(int(e['crashes_on_value']), 'crash')} on it)"
                 if "hosts_on_value" in e else "")
        return (f"{s['signature']}: rate {_ratio(e)} (95% CI {_bound(e, 'lower')}–"
                f"{_bound(e, 'upper')}) on {s['attribute']} {s['value']} since it reached "
                f"{float(e['share']) * 100:.0f}% of node-time on {e['reached']}{hosts}")
    return (f"host {s['host_id']} looks hardware-suspect: {how_many(int(e['crashes']), 'crash')} "
            f"({e['hardware_crashes']} hardware-indicative, "
            f"{how_many(int(e['signatures']), 'signature')}){_since(e)} in "
            f"{float(e['node_days']):.1f} node-days where {float(e['expected']):.2f} were expected"
            f"{_tipped(d)} — recommend: drain")


def _since(e: dict) -> str:
    # alerts stored before the counts ran to the evaluation carry no "since"
    return f" since {_minute(e['since'])} UTC" if e.get("since") else ""


def _tipped(d: Detection) -> str:
    """When the host test tipped and after how many crashes (the counts before
    it run to the evaluation's time: they grow while the host keeps crashing)."""
    n = d.evidence.get("alarm_crashes")
    if n is None:
        return ""
    return (f"; the host test tipped on {_minute(d.at.isoformat())} UTC after "
            f"{how_many(int(n), 'crash')}")


def _minute(iso: object) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM``."""
    return str(iso)[:16].replace("T", " ")
