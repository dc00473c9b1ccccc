"""Run the analysis steps over one crash report, whatever its kind.

One :func:`analyze` for every artifact: an ELF core (with its memory), an
hs_err log, a kernel oops. The report's kind (:func:`coreepi.analyze.context.kind_of`)
picks the built-in phenotype rules and the signature rule list; the user's
case definitions are rules of every kind, run after the built-ins.

Steps run in a fixed order (plain data below). One failing step or rule
never fails the crash: the failure becomes a warning naming the step and the
error class, and the rest still run (Socorro's processor pipeline does the
same).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coreepi.analyze.context import AnalysisContext, Memory
from coreepi.analyze.phenotypes import PhenotypeRule, builtin_rules
from coreepi.analyze.signature import run_signature
from coreepi.analyze.stackscan import run_stack_scan
from coreepi.model.report import CrashReport

__all__ = ["analyze", "run_phenotypes"]

Step = Callable[[AnalysisContext], None]


def run_phenotypes(ctx: AnalysisContext, rules: Sequence[PhenotypeRule] | None = None) -> None:
    """Evaluate ``rules`` (default: the built-ins of the report's kind) in
    order; set the report's phenotypes to those that fire. A rule sees the
    phenotypes fired before it in ``ctx.fired``; one that raises becomes a
    warning ``phenotype rule NAME failed: ERROR``."""
    for rule in builtin_rules(ctx.kind) if rules is None else rules:
        try:
            phenotype = rule.evaluate(ctx)
        except Exception as exc:  # one rule's bug must not cost the crash its analysis
            ctx.report.analysis.warnings.append(
                f"phenotype rule {rule.name} failed: {type(exc).__name__}: {exc}"
            )
            continue
        if phenotype is not None:
            ctx.fired.append(phenotype)
    ctx.report.phenotypes = list(ctx.fired)


def analyze(
    report: CrashReport,
    memory: Memory | None = None,
    *,
    case_definitions: Sequence[PhenotypeRule] = (),
) -> CrashReport:
    """Enrich ``report`` in place with scanned frames (cores), phenotypes and
    a signature; returns it. Any phenotypes and signature it had are
    replaced. ``memory``: the crashed process's memory when the core is at
    hand (None for logs and uploaded reports). ``case_definitions``: user
    case definitions (:func:`coreepi.analyze.casedefs.load_case_definitions`),
    evaluated after the built-in rules, in order. Never raises: a failing
    step or rule becomes a line in ``report.analysis.warnings``."""
    ctx = AnalysisContext(report, memory)
    rules = [*builtin_rules(ctx.kind), *case_definitions]
    # Order matters: phenotypes read frames (so stack scanning, which adds
    # frames, goes before them), user definitions may name built-ins (so they
    # come after them), and the signature reads phenotypes (an unusable
    # stack's phenotype heads it, a JVM out-of-memory's allocator too) and
    # the scanned frames, so it goes last.
    steps: list[tuple[str, Step]] = [
        ("stack-scan", run_stack_scan),
        ("phenotypes", lambda c: run_phenotypes(c, rules)),
        ("signature", run_signature),
    ]
    for name, step in steps:
        try:
            step(ctx)
        except Exception as exc:
            report.analysis.warnings.append(
                f"analysis step {name} failed: {type(exc).__name__}: {exc}"
            )
    return report
