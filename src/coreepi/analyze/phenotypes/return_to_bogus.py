"""return-to-bogus: a ``ret`` popped a return address that is not code: pc is
non-zero and not executable and the slot just below sp holds it; or a ``ret``
faulted on a non-canonical return address (pc still on the ``ret``)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import reached_by_ret
from coreepi.analyze.phenotypes._x86 import instruction_evidence, is_canonical
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class ReturnToBogus(PhenotypeRule):
    name = "return-to-bogus"
    description = (
        "A ret went to a non-zero address that is not executable (the word at sp - 8 equals "
        "pc), or faulted on a non-canonical return address."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        pc, sp = ctx.pc, ctx.sp
        if pc is None or sp is None or pc == 0 or ctx.report.signal is None:
            return None
        if not ctx.executable(pc):
            slot = reached_by_ret(ctx)
            if slot is None:
                return None
            perms = ctx.perms_at(pc)
            return self.fire(
                pc=f"0x{pc:x}",
                sp=f"0x{sp:x}",
                pc_perms=perms,
                **slot.evidence(),
            )
        insn = ctx.raw_instruction(pc) if ctx.arch == "x86_64" else None
        if insn is not None and insn.mnemonic == "ret" and ctx.memory is not None:
            target = ctx.memory.read_word(sp)
            if target is not None and not is_canonical(target):
                return self.fire(
                    pc=f"0x{pc:x}",
                    sp=f"0x{sp:x}",
                    return_address=f"0x{target:x}",
                    **instruction_evidence(insn),
                )
        return None
