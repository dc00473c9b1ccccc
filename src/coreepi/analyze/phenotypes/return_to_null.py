"""return-to-null: pc is 0 and was popped by a ``ret``: the stack slot just
below sp holds 0 (a saved return address overwritten with 0, or a ``ret``
executed with sp pointing at a zero word)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import reached_by_ret
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class ReturnToNull(PhenotypeRule):
    name = "return-to-null"
    description = (
        "pc == 0 reached by a ret: the word at sp - 8 (the slot the ret popped) is 0, and "
        "no call through a NULL pointer explains it."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        if ctx.pc != 0 or ctx.sp is None:
            return None
        slot = reached_by_ret(ctx)
        if slot is None:
            return None
        return self.fire(pc="0x0", sp=f"0x{ctx.sp:x}", **slot.evidence())
