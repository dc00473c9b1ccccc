"""A crash report's analysis warnings as lines for stderr (``coreepi
inspect``, ``coreepi info``). Apart from :mod:`coreepi.reporting.crash_text`
so that ``inspect --json``, which draws nothing, does not import Rich for
them (~0.025 CPU-s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coreepi.model.report import CrashReport

__all__ = ["warning_lines"]


def warning_lines(report: CrashReport) -> list[str]:
    """The analysis warnings of ``report``, one line each (runs of
    whitespace, newlines included, become one space)."""
    return [" ".join(w.split()) for w in report.analysis.warnings]
