"""kernel-taint-out-of-tree: the kernel was tainted by a proprietary (``P``),
out-of-tree (``O``) or unsigned (``E``) module: the crash may be that
module's."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype
from coreepi.model.taint import OUT_OF_TREE_TAINTS, TAINT_FLAGS


@register
class KernelTaintOutOfTree(PhenotypeRule):
    name = "kernel-taint-out-of-tree"
    kinds = frozenset({"kernel"})
    description = (
        "The kernel report's taint has P, O or E: a proprietary, out-of-tree or unsigned "
        "module was loaded."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        artifact = ctx.report.artifact
        info = artifact.kernel if artifact is not None else None
        letters = set(info.taint) & OUT_OF_TREE_TAINTS if info is not None and info.tainted else set()
        if info is None or not letters:
            return None
        return self.fire(
            taint=info.taint, flags={f: TAINT_FLAGS[f] for f in sorted(letters)}
        )
