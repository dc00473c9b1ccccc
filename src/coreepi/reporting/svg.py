"""Inline SVG charts for the HTML report, drawn in Python (no JavaScript, no CDN).

Every label goes through :func:`html.escape`: signatures and host ids come
from crash data, which an attacker can shape.
"""

from __future__ import annotations

import math
from datetime import date, timedelta
from html import escape

from coreepi.epi.models import DayCount

__all__ = ["epidemic_curve", "forest_plot", "host_bars"]

FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _e(text: str) -> str:
    return escape(text, quote=True)


def _short(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def epidemic_curve(curve: list[DayCount], first: date, last: date, title: str,
                   width: int = 640, height: int = 120) -> str:
    """Bars of crashes per UTC day from ``first`` to ``last`` (inclusive)."""
    days = max(1, (last - first).days + 1)
    counts = [0] * days
    for p in curve:
        i = (p.day - first).days
        if 0 <= i < days:
            counts[i] += p.crashes
    top = max(counts) or 1
    left, bottom, top_pad = 40, 18, 6
    plot_w, plot_h = width - left - 6, height - bottom - top_pad
    bw = plot_w / days
    parts = [
        (f'<svg class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" {FONT}>'),
        f"<title>{_e(title)}</title>",
        (f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{width - 6}" y2="{top_pad + plot_h}" '
        'stroke="#888"/>'),
        f'<text x="{left - 4}" y="{top_pad + 9}" text-anchor="end">{top}</text>',
        f'<text x="{left - 4}" y="{top_pad + plot_h}" text-anchor="end">0</text>',
    ]
    for i, n in enumerate(counts):
        if not n:
            continue
        h = plot_h * n / top
        day = first + timedelta(days=i)
        parts.append(
            f'<rect x="{left + i * bw:.2f}" y="{top_pad + plot_h - h:.2f}" '
            f'width="{max(bw - 0.5, 0.5):.2f}" height="{h:.2f}" fill="#4a78b5">'
            f"<title>{day.isoformat()}: {n}</title></rect>"
        )
    parts.append(f'<text x="{left}" y="{height - 4}">{first.isoformat()}</text>')
    parts.append(f'<text x="{width - 6}" y="{height - 4}" text-anchor="end">'
                 f"{last.isoformat()}</text>")
    parts.append("</svg>")
    return "".join(parts)


def host_bars(rows: list[tuple[str, int, float, str]], width: int = 640) -> str:
    """Horizontal bars per host: observed crashes (bar, coloured by verdict) and the
    count expected at the fleet's rate (black tick). ``rows``: (host, observed,
    expected, verdict)."""
    colours = {"hardware-suspect": "#c0392b", "software": "#2e86ab",
               "environment-triggered": "#d4a017", "undetermined": "#999"}
    row_h, left, right = 18, 150, 60
    height = row_h * len(rows) + 24
    top = max([max(o, e) for _, o, e, _ in rows] + [1.0])
    plot_w = width - left - right
    parts = [
        (f'<svg class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" {FONT}>'),
        "<title>Crashes per host: observed (bar) vs expected (tick)</title>",
    ]
    for i, (host, obs, exp, verdict) in enumerate(rows):
        y = 4 + i * row_h
        w = plot_w * obs / top
        x_e = left + plot_w * exp / top
        parts.append(f'<text x="{left - 4}" y="{y + 12}" text-anchor="end">{_e(_short(host, 24))}'
                     "</text>")
        parts.append(
            f'<rect x="{left}" y="{y + 2}" width="{w:.2f}" height="{row_h - 5}" '
            f'fill="{colours.get(verdict, "#999")}"><title>{_e(host)}: {obs} observed, '
            f"{exp:.3g} expected ({_e(verdict)})</title></rect>"
        )
        parts.append(f'<line x1="{x_e:.2f}" y1="{y}" x2="{x_e:.2f}" y2="{y + row_h - 1}" '
                     'stroke="#000" stroke-width="2"/>')
        parts.append(f'<text x="{left + w + 4:.2f}" y="{y + 12}">{obs} / {exp:.3g}</text>')
    parts.append(f'<text x="{left}" y="{height - 4}">observed / expected</text>')
    parts.append("</svg>")
    return "".join(parts)


def forest_plot(rows: list[tuple[str, float | None, float | None, float | None]],
                width: int = 760) -> str:
    """Rate ratios with 95% CIs on a log axis. ``rows``: (label, ratio, lower, upper);
    a missing ratio or upper limit is unbounded (drawn as an arrow to the right edge)."""
    finite = [v for _, r, lo, hi in rows for v in (r, lo, hi)
              if v is not None and v > 0 and math.isfinite(v)]
    lo_v = min(finite + [0.5])
    hi_v = max(finite + [2.0])
    lo_l, hi_l = math.log10(lo_v) - 0.1, math.log10(hi_v) + 0.3
    row_h, left, right = 18, 330, 20
    height = row_h * len(rows) + 34
    plot_w = width - left - right

    def x(v: float) -> float:
        return left + plot_w * (math.log10(v) - lo_l) / (hi_l - lo_l)

    parts = [
        (f'<svg class="chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" {FONT}>'),
        "<title>Rate ratios (value vs rest of the fleet), 95% CI, log scale</title>",
        (f'<line x1="{x(1):.2f}" y1="0" x2="{x(1):.2f}" y2="{height - 22}" stroke="#888" '
        'stroke-dasharray="3,3"/>'),
    ]
    for i, (label, r, lo, hi) in enumerate(rows):
        y = 6 + i * row_h + row_h / 2
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{_e(_short(label, 56))}<title>{_e(label)}</title></text>")
        x_lo = x(lo) if lo is not None and lo > 0 else left
        x_hi = x(hi) if hi is not None and hi > 0 else left + plot_w
        parts.append(f'<line x1="{x_lo:.2f}" y1="{y:.1f}" x2="{x_hi:.2f}" y2="{y:.1f}" '
                     'stroke="#333"/>')
        if hi is None:
            parts.append(f'<path d="M{x_hi - 6:.2f},{y - 4:.1f} L{x_hi:.2f},{y:.1f} '
                         f'L{x_hi - 6:.2f},{y + 4:.1f}" fill="none" stroke="#333"/>')
        if r is not None and r > 0:
            parts.append(f'<rect x="{x(r) - 4:.2f}" y="{y - 4:.1f}" width="8" height="8" '
                         f'fill="#c0392b"><title>{r:.3g}</title></rect>')
    for tick in (0.1, 0.5, 1, 2, 5, 10, 100, 1000, 10000, 100000):
        if lo_l <= math.log10(tick) <= hi_l:
            parts.append(f'<text x="{x(tick):.2f}" y="{height - 8}" text-anchor="middle">'
                         f"{tick:g}</text>")
    parts.append("</svg>")
    return "".join(parts)
