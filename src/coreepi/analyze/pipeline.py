"""Run the analysis steps over one crash report.

Steps run in a fixed order (plain data below). One failing step or rule
never fails the crash: the failure becomes a warning naming the step and the
error class, and the rest still run (Socorro's processor pipeline does the
same).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from coreepi.analyze.context import AnalysisContext, Memory
from coreepi.analyze.phenotypes import PhenotypeRule, builtin_rules
from coreepi.analyze.signature import run_signature
from coreepi.analyze.stackscan import run_stack_scan
from coreepi.model.report import CrashReport

if TYPE_CHECKING:
    from coreepi.analyze.casedefs import CaseDefinition

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


def run_case_definitions(ctx: AnalysisContext) -> None:
    """Add the user case definitions that fire (after the built-in phenotypes)."""
    if ctx.case_definitions:
        from coreepi.analyze.casedefs import evaluate_case_definitions

        ctx.report.phenotypes.extend(
            evaluate_case_definitions(ctx.report, list(ctx.case_definitions))
        )


# Order matters: phenotypes read frames (so stack scanning, which adds frames,
# goes before them), and the signature reads phenotypes (an unusable stack's
# phenotype heads it) and the scanned frames, so it goes last.
STEPS: list[tuple[str, Step]] = [
    ("stack-scan", run_stack_scan),
    ("phenotypes", run_phenotypes),
    ("case-definitions", run_case_definitions),  # after the built-ins they may name
    ("signature", run_signature),
]


def analyze(
    report: CrashReport,
    memory: Memory | None = None,
    *,
    case_definitions: Sequence[CaseDefinition] = (),
) -> CrashReport:
    """Enrich ``report`` in place with phenotypes (and, as steps are added,
    scanned frames and a signature); returns it. ``memory`` is the crashed
    process's memory when the core is at hand. ``case_definitions``: user
    case definitions (:func:`coreepi.analyze.casedefs.load_case_definitions`)
    evaluated after the built-in phenotypes."""
    ctx = AnalysisContext(report, memory, case_definitions=case_definitions)
    for name, step in STEPS:
        try:
            step(ctx)
        except Exception as exc:
            report.analysis.warnings.append(
                f"analysis step {name} failed: {type(exc).__name__}: {exc}"
            )
    return report
