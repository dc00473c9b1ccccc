"""coreepi.reporting: the report stage — FleetFindings from the store, in four formats.

::

    findings = build_findings(store, since, until)      # store -> epi
    text = render(findings, "html")                      # text | json | markdown | html

``text`` prints Rich tables (groups by rate with attribution and top
evidence, suspect hosts, strongest attribute associations); ``json`` is the
FleetFindings JSON, every key (``docs/report-json.md``); ``markdown`` the same
tables in GitHub-flavoured Markdown; ``html`` one self-contained page with
inline SVG charts (epidemic curves, observed vs expected per host, a forest
plot of rate ratios). Modules: ``build`` (store → findings), ``summary``
(what the tables show), ``phrases`` (every number format and sentence: the
evidence items in words), ``text``, ``markdown``, ``html`` + ``svg``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

# The report renderers need the statistics (epi: pandas, SciPy, statsmodels,
# seconds to import); the package's other modules (ci, ci_machine) must not
# pay for them: `coreepi ci run -- true` would start 10x slower. So the
# package's names are loaded on first use.
if TYPE_CHECKING:
    from coreepi.epi.models import FleetFindings
    from coreepi.reporting.build import build_findings
    from coreepi.reporting.html import html_report
    from coreepi.reporting.markdown import markdown_report
    from coreepi.reporting.text import render_text, text_report

_LAZY = {"build_findings": "build", "html_report": "html", "markdown_report": "markdown",
         "render_text": "text", "text_report": "text"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"coreepi.reporting.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FORMATS",
    "Format",
    "build_findings",
    "html_report",
    "json_report",
    "markdown_report",
    "render",
    "render_text",
    "text_report",
]

Format = Literal["text", "json", "markdown", "html"]
FORMATS: tuple[str, ...] = ("text", "json", "markdown", "html")


def json_report(findings: FleetFindings) -> str:
    """The FleetFindings JSON (indented; keys as documented in docs/report-json.md)."""
    return findings.model_dump_json(indent=2) + "\n"


def render(findings: FleetFindings, fmt: str, *, width: int = 160) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`) as a string (text: no colour)."""
    if fmt == "json":
        return json_report(findings)
    if fmt == "markdown":
        return __getattr__("markdown_report")(findings)  # type: ignore[no-any-return]
    if fmt == "html":
        return __getattr__("html_report")(findings)  # type: ignore[no-any-return]
    if fmt == "text":
        return __getattr__("text_report")(findings, width=width)  # type: ignore[no-any-return]
    raise ValueError(f"unknown report format {fmt!r}; one of {', '.join(FORMATS)}")
