"""non-canonical-address: an x86-64 general-protection fault on an address
whose bits 63..47 are not all equal.

A non-canonical access raises #GP, not #PF, so the kernel reports SIGSEGV
with si_code SI_KERNEL and si_addr 0 (arch/x86/kernel/traps.c,
exc_general_protection -> force_sig(SIGSEGV)). The address is recovered by
decoding the faulting instruction and computing its memory operands from the
saved registers (rust-minidump does the same in op_analysis.rs). A ``ret``
whose return address is non-canonical faults on the ``ret`` itself (Intel
SDM vol. 2, RET: "#GP(0) if the return instruction pointer is
non-canonical"), so its popped target counts too; likewise an indirect
``call``/``jmp`` whose target is non-canonical faults on the branch itself
(Intel SDM vol. 2, CALL and JMP: "#GP(0) if the target offset is
non-canonical"; nothing is pushed), so its target is read from the register
or the memory word it names.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._x86 import (
    branch_target,
    instruction_evidence,
    is_canonical,
    memory_operands,
)
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

SI_KERNEL = 0x80


@register
class NonCanonicalAddress(PhenotypeRule):
    name = "non-canonical-address"
    description = (
        "x86-64 SIGSEGV/SI_KERNEL (#GP) whose faulting instruction accesses, returns to or "
        "branches to a non-canonical address, computed from its operands, registers and memory."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if ctx.arch != "x86_64" or sig is None or sig.name != "SIGSEGV" or sig.si_code != SI_KERNEL:
            return None
        pc = ctx.pc
        insn = ctx.raw_instruction(pc) if pc is not None else None
        if insn is None:
            return None
        if insn.mnemonic in ("ret", "retf") and ctx.sp is not None and ctx.memory is not None:
            target = ctx.memory.read_word(ctx.sp)
            if target is not None and not is_canonical(target):
                return self.fire(
                    **instruction_evidence(insn),
                    operand="return address [rsp]",
                    address=f"0x{target:x}",
                    registers={"rsp": f"0x{ctx.sp:x}"},
                )
        for operand in memory_operands(ctx, insn):
            if operand.address is not None and not is_canonical(operand.address):
                return self.fire(
                    **instruction_evidence(insn),
                    operand=operand.expression,
                    address=f"0x{operand.address:x}",
                    registers={k: f"0x{v:x}" for k, v in operand.registers.items()},
                )
        # After the operand check: a non-canonical slot address faults on the read.
        branch = branch_target(ctx, insn)
        if branch is not None and not is_canonical(branch.target):
            slot = {} if branch.slot is None else {"target_slot": f"0x{branch.slot:x}"}
            return self.fire(
                **instruction_evidence(insn),
                operand=branch.expression,
                address=f"0x{branch.target:x}",
                branch_target=f"0x{branch.target:x}",
                **slot,
                registers={k: f"0x{v:x}" for k, v in branch.registers.items()},
            )
        return None
