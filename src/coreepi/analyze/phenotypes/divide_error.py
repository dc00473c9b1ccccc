"""divide-error: an integer division trapped (#DE -> SIGFPE FPE_INTDIV on
x86-64, for a zero divisor and for a quotient that does not fit, e.g.
INT_MIN / -1; Intel SDM vol. 2, DIV/IDIV). The divisor is read from the
instruction's operand."""

from __future__ import annotations

from capstone import x86 as cs_x86

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._x86 import instruction_evidence, memory_operands, register_value
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class DivideError(PhenotypeRule):
    name = "divide-error"
    description = (
        "SIGFPE with si_code FPE_INTDIV/FPE_INTOVF; records the div/idiv instruction and its "
        "divisor (zero: divide-by-zero, else quotient overflow)."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if (
            sig is None
            or sig.name != "SIGFPE"
            or sig.si_code_name not in ("FPE_INTDIV", "FPE_INTOVF")
        ):
            return None
        evidence: dict[str, object] = {"si_code": sig.si_code_name}
        insn = ctx.raw_instruction(ctx.pc) if ctx.pc is not None and ctx.arch == "x86_64" else None
        if insn is None or insn.mnemonic not in ("div", "idiv") or len(insn.operands) != 1:
            return self.fire(cause="unknown", **evidence)
        evidence.update(instruction_evidence(insn))
        op = insn.operands[0]
        divisor: int | None = None
        if op.type == cs_x86.X86_OP_REG:
            name = insn.reg_name(op.reg)
            evidence["divisor_operand"] = name
            divisor = register_value(ctx, name, insn)
        elif op.type == cs_x86.X86_OP_MEM:
            mem = memory_operands(ctx, insn)[0]
            evidence["divisor_operand"] = mem.expression
            evidence["divisor_address"] = None if mem.address is None else f"0x{mem.address:x}"
            raw = (
                ctx.memory.read(mem.address, op.size)
                if ctx.memory and mem.address is not None
                else None
            )
            divisor = None if raw is None else int.from_bytes(raw, "little")
        if divisor is not None and insn.mnemonic == "idiv" and divisor >> (op.size * 8 - 1):
            divisor -= 1 << (op.size * 8)  # two's complement
        evidence["divisor"] = divisor
        evidence["operand_size_bytes"] = op.size
        if divisor is None:
            cause = "unknown"
        else:
            cause = "divide-by-zero" if divisor == 0 else "quotient-overflow"
        return self.fire(cause=cause, **evidence)
