"""kernel-taint-machine-check: the kernel was tainted ``M`` (a machine check
exception happened before or at this report): hardware-indicative."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype
from coreepi.model.taint import TAINT_FLAGS


@register
class KernelTaintMachineCheck(PhenotypeRule):
    name = "kernel-taint-machine-check"
    kinds = frozenset({"kernel"})
    hardware_indicative = True
    description = "The kernel report's taint has M: the CPU raised a machine check exception."

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        artifact = ctx.report.artifact
        info = artifact.kernel if artifact is not None else None
        if info is None or not info.tainted or "M" not in info.taint:
            return None
        return self.fire(taint=info.taint, meaning=TAINT_FLAGS["M"])
