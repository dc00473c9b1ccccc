"""Inline SVG charts for the HTML report, drawn in Python (no JavaScript, no CDN).

Every label goes through :func:`html.escape`: signatures and host ids come
from crash data, which an attacker can shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, timedelta
from html import escape
from typing import Any

from coreepi.epi.models import DayCount

__all__ = ["epidemic_curve", "forest_plot", "host_bars"]

FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _e(text: object) -> str:
    return escape(str(text), quote=True)


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


def _log_axis(values: list[float]) -> tuple[float, float]:
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    lo = min(finite + [0.5])
    hi = max(finite + [2.0])
    return math.log10(lo) - 0.15, math.log10(hi) + 0.15


def forest_plot(rows: Sequence[dict[str, Any]], width: int = 720) -> str:
    """Rate ratios with 95% CIs on a log axis, one row per ``{"label", "irr",
    "irr_lower", "irr_upper", "irr_status"}`` (an Association's JSON, status
    ``finite``, ``unbounded`` or ``undefined``). Drawn as the numbers are,
    never invented:

    * finite ratio and limits: a square on its interval;
    * no upper limit (no crash outside the value): the interval runs to the
      right edge, ends in an arrow and says ``unbounded``;
    * an unbounded ratio (the rest of the fleet has no crash): no square; the
      value column says ``∞``;
    * an undefined ratio (0/0: nothing to estimate): no mark, the text
      ``undefined (0/0)`` instead.
    """
    lo_l, hi_l = _log_axis([v for r in rows for v in (r.get("irr"), r.get("irr_lower"),
                                                      r.get("irr_upper")) if v is not None])
    if any(r.get("irr_upper") is None for r in rows):
        hi_l += 0.6  # room for an unbounded interval to be seen running off the axis
    row_h, left, right = 20, 300, 90
    height = row_h * len(rows) + 30
    plot_w = width - left - right

    def x(v: float) -> float:
        return left + plot_w * (min(max(math.log10(v), lo_l), hi_l) - lo_l) / (hi_l - lo_l)

    out = [f'<svg class="chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" {FONT}>',
           "<title>Rate ratio (value vs rest of the fleet), 95% CI, log scale</title>",
           f'<line x1="{x(1):.1f}" y1="0" x2="{x(1):.1f}" y2="{height - 20}" stroke="#888" '
           'stroke-dasharray="3,3"/>']
    for i, r in enumerate(rows):
        y = 4 + i * row_h + row_h / 2
        irr, lo, hi = r.get("irr"), r.get("irr_lower"), r.get("irr_upper")
        label = str(r["label"])
        short = label if len(label) <= 44 else label[:43] + "…"
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_e(short)}'
                   f"<title>{_e(label)}</title></text>")
        if r.get("irr_status") == "undefined":
            out.append(f'<text x="{left + 4}" y="{y + 4:.1f}" fill="#555">undefined (0/0)</text>')
            continue
        x_lo = x(lo) if lo is not None and lo > 0 else left
        x_hi = x(hi) if hi is not None else left + plot_w
        out.append(f'<line x1="{x_lo:.1f}" y1="{y:.1f}" x2="{x_hi:.1f}" y2="{y:.1f}" '
                   'stroke="#333" stroke-width="1.5"/>')
        note = ""
        if hi is None:
            out.append(f'<path d="M{x_hi - 7:.1f},{y - 4:.1f} L{x_hi:.1f},{y:.1f} '
                       f'L{x_hi - 7:.1f},{y + 4:.1f}" fill="#333"/>')
            note = "unbounded"
        if irr is not None and irr > 0:
            out.append(f'<rect x="{x(irr) - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" '
                       f'fill="#1f4e8c"><title>{irr:.3g}</title></rect>')
        text = "∞" if irr is None else f"{irr:.3g}"  # unbounded: k crashes over 0 expected
        out.append(f'<text x="{left + plot_w + 6}" y="{y + 4:.1f}">{_e(text)}'
                   f'{" " + note if note else ""}</text>')
    for tick in (0.01, 0.1, 0.5, 1, 2, 5, 10, 100, 1000, 10000):
        if lo_l <= math.log10(tick) <= hi_l:
            out.append(f'<text x="{x(tick):.1f}" y="{height - 6}" text-anchor="middle">'
                       f"{tick:g}</text>")
    out.append("</svg>")
    return "".join(out)
