"""write-to-readonly: a store into a mapping that is readable but not writable
(.rodata, a string literal, a PROT_READ mapping, RELRO)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._x86 import instruction_evidence, memory_operands
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class WriteToReadonly(PhenotypeRule):
    name = "write-to-readonly"
    description = (
        "SIGSEGV/SEGV_ACCERR at a fault address in a readable, non-writable mapping, raised "
        "by an instruction that writes memory."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.si_code_name != "SEGV_ACCERR" or sig.fault_address is None:
            return None
        fault = sig.fault_address
        mapping = next((m for m in ctx.report.memory_map if m.start <= fault < m.end), None)
        if mapping is None or "r" not in mapping.perms or "w" in mapping.perms:
            return None
        if ctx.pc == fault:
            return None  # an instruction fetch from a non-executable page, not a store
        evidence: dict[str, object] = {
            "fault_address": f"0x{fault:x}",
            "mapping": f"0x{mapping.start:x}-0x{mapping.end:x} {mapping.perms}",
            "mapping_path": mapping.path,
        }
        insn = ctx.raw_instruction(ctx.pc) if ctx.pc is not None and ctx.arch == "x86_64" else None
        if insn is not None:
            writes = [op for op in memory_operands(ctx, insn) if op.write]
            # push/call store through rsp implicitly; anything else must name
            # a written memory operand to be a store.
            if not writes and insn.mnemonic not in ("push", "call"):
                return None
            evidence.update(instruction_evidence(insn))
            if writes:
                evidence["operand"] = writes[0].expression
        return self.fire(**evidence)
