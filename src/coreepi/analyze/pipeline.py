"""Run the analysis steps over one crash report.

Steps run in a fixed order (plain data below). One failing step or rule
never fails the crash: the failure becomes a warning naming the step and the
error class, and the rest still run (Socorro's processor pipeline does the
same).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coreepi.analyze.context import AnalysisContext, Memory
from coreepi.analyze.phenotypes import PhenotypeRule, builtin_rules
from coreepi.report import CrashReport

__all__ = ["analyze", "run_phenotypes"]

Step = Callable[[AnalysisContext], None]


def run_phenotypes(ctx: AnalysisContext, rules: Sequence[PhenotypeRule] | None = None) -> None:
    """Evaluate every rule; replace the report's phenotypes with those that fire."""
    fired = []
    for rule in builtin_rules() if rules is None else rules:
        try:
            phenotype = rule.evaluate(ctx)
        except Exception as exc:  # one rule's bug must not cost the crash its analysis
            ctx.report.analysis.warnings.append(
                f"phenotype rule {rule.name} failed: {type(exc).__name__}: {exc}"
            )
            continue
        if phenotype is not None:
            fired.append(phenotype)
    ctx.report.phenotypes = fired


# Order matters: phenotypes read frames (so stack scanning, which adds frames,
# goes before them), and the signature reads phenotypes.
STEPS: list[tuple[str, Step]] = [
    ("phenotypes", run_phenotypes),
]


def analyze(report: CrashReport, memory: Memory | None = None) -> CrashReport:
    """Enrich ``report`` in place with phenotypes (and, as steps are added,
    scanned frames and a signature); returns it. ``memory`` is the crashed
    process's memory when the core is at hand."""
    ctx = AnalysisContext(report, memory)
    for name, step in STEPS:
        try:
            step(ctx)
        except Exception as exc:
            report.analysis.warnings.append(
                f"analysis step {name} failed: {type(exc).__name__}: {exc}"
            )
    return report
