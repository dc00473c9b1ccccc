"""Server-rendered SVG charts of the web UI: sparkline, forest plot, host timeline.

Pure functions from the pages' JSON data (ISO dates as strings) to SVG
text; no script, no external asset. Every label goes through
:func:`html.escape` (signatures and host ids come from crash data). Each
chart has a ``<title>`` and ``role="img"`` so a screen reader names it, and
every mark that carries a meaning by colour also carries it in text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from html import escape
from typing import Any

from coreepi.reporting.svg import forest_plot as forest

__all__ = ["epicurve", "forest", "sparkline", "timeline"]

FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _day(value: str | date) -> date:
    return value if isinstance(value, date) else date.fromisoformat(value[:10])


def sparkline(curve: Sequence[dict[str, Any]], first: str | date, last: str | date,
              width: int = 120, height: int = 22, max_bars: int = 60) -> str:
    """Crashes per UTC day as a tiny bar chart. ``curve``: ``[{"day", "crashes"}]``
    (days without a crash left out); ``first``/``last``: the axis' days,
    inclusive. Over ``max_bars`` days, each bar sums several consecutive days
    (a 200-day window in 200 bars weighs 10 KB per row, and no eye tells
    them apart at 120 px)."""
    lo, hi = _day(first), _day(last)
    days = max(1, (hi - lo).days + 1)
    per = -(-days // max_bars)  # days per bar, rounded up
    bars = -(-days // per)
    counts = [0] * bars
    for p in curve:
        i = (_day(p["day"]) - lo).days
        if 0 <= i < days:
            counts[i // per] += int(p["crashes"])
    top = max(counts) or 1
    bw = width / bars
    total = sum(counts)
    unit = "day" if per == 1 else f"{per} days"
    w = max(bw - 0.3, 0.6)
    # one path of bars, not a rect each: a tenth of the bytes on a page of 100 rows
    d = "".join(f"M{i * bw:.1f} {height}v-{max(1.0, (height - 2) * n / top):.1f}h{w:.1f}V{height}z"
                for i, n in enumerate(counts) if n)
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img"><title>{total} crashes, per {unit}, {lo} to {hi}, peak {top}</title>'
            f'<path d="{d}"/></svg>')


def epicurve(curve: Sequence[dict[str, Any]], first: str | date, last: str | date,
             width: int = 720, height: int = 130) -> str:
    """An epidemic curve: crashes per UTC day as bars, with the peak and the
    first and last day labelled. ``curve`` as in :func:`sparkline`."""
    lo, hi = _day(first), _day(last)
    days = max(1, (hi - lo).days + 1)
    counts = [0] * days
    for p in curve:
        i = (_day(p["day"]) - lo).days
        if 0 <= i < days:
            counts[i] += int(p["crashes"])
    top = max(counts) or 1
    left, bottom, pad = 40, 18, 8
    plot_w, plot_h = width - left - 8, height - bottom - pad
    bw = plot_w / days
    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" {FONT}><title>Crashes per UTC day, {lo} to {hi} '
           f'({sum(counts)} in all, peak {top})</title>',
           f'<line x1="{left}" y1="{pad + plot_h}" x2="{width - 8}" y2="{pad + plot_h}" '
           'stroke="#888"/>',
           f'<text x="{left - 4}" y="{pad + 8}" text-anchor="end">{top}</text>',
           f'<text x="{left - 4}" y="{pad + plot_h}" text-anchor="end">0</text>']
    for i, n in enumerate(counts):
        if n:
            h = plot_h * n / top
            out.append(f'<rect class="bar" x="{left + i * bw:.2f}" y="{pad + plot_h - h:.2f}" '
                       f'width="{max(bw - 0.5, 0.6):.2f}" height="{h:.2f}">'
                       f"<title>{lo + timedelta(days=i)}: {n}</title></rect>")
    out.append(f'<text x="{left}" y="{height - 4}">{lo}</text>'
               f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">{hi}</text></svg>')
    return "".join(out)


def _ts(value: str | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def timeline(crashes: Sequence[dict[str, Any]], telemetry: Sequence[dict[str, Any]],
             since: str | datetime, until: str | datetime, width: int = 720) -> str:
    """A host's crashes (top row, ``{"captured_at", "signature"}``) and its
    telemetry events (bottom row, ``{"ts", "kind", "summary", "hardware"}``)
    on one time axis from ``since`` to ``until``. Hardware-indicative events
    are drawn as filled triangles and named ``hardware`` in their tooltip."""
    t0, t1 = _ts(since), _ts(until)
    span = max((t1 - t0).total_seconds(), 1.0)
    left, right, height = 90, 10, 86
    plot_w = width - left - right

    def x(t: datetime) -> float:
        return left + plot_w * min(max((t - t0).total_seconds() / span, 0.0), 1.0)

    out = [f'<svg class="chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" {FONT}>',
           "<title>Crashes and telemetry events of this host over time</title>",
           '<text x="4" y="22">crashes</text><text x="4" y="52">telemetry</text>',
           f'<line x1="{left}" y1="64" x2="{width - right}" y2="64" stroke="#888"/>']
    for c in crashes:
        if c.get("captured_at") is None:
            continue
        cx = x(_ts(c["captured_at"]))
        out.append(f'<line x1="{cx:.1f}" y1="10" x2="{cx:.1f}" y2="28" stroke="#b03a2e" '
                   f'stroke-width="2"><title>crash {_e(c["captured_at"])}: '
                   f'{_e(c.get("signature") or "no signature")}</title></line>')
    for ev in telemetry:
        ex = x(_ts(ev["ts"]))
        hw = bool(ev.get("hardware"))
        fill = "#b03a2e" if hw else "none"
        out.append(f'<path d="M{ex - 5:.1f},56 L{ex:.1f},44 L{ex + 5:.1f},56 Z" fill="{fill}" '
                   f'stroke="#333"><title>{_e(ev["ts"])} {_e(ev["kind"])}'
                   f'{" (hardware)" if hw else ""}: {_e(ev.get("summary", ""))}</title></path>')
    days = (t1 - t0).days
    step = max(1, days // 6)
    d = t0.replace(hour=0, minute=0, second=0, microsecond=0)
    while d <= t1 and days:
        if d >= t0 and x(d) < width - right - 16:  # a label at the edge would be cut
            out.append(f'<text x="{x(d):.1f}" y="78" text-anchor="middle">{d:%m-%d}</text>')
        d += timedelta(days=step)
    out.append("</svg>")
    return "".join(out)
