"""stack-overflow: the fault is in the crashing thread's stack guard, or in the
gap just below its stack mapping, near sp."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import STACK_GUARD_GAP, stack_overflow_fault
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class StackOverflow(PhenotypeRule):
    name = "stack-overflow"
    description = (
        f"SIGSEGV/SIGBUS within {STACK_GUARD_GAP // 1024} KiB below the writable mapping that "
        "holds (or lies just above) sp, with the fault within 64 KiB of sp."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        evidence = stack_overflow_fault(ctx)
        return None if evidence is None else self.fire(**evidence)
