"""illegal-instruction: SIGILL raised by the CPU, classified by decoding the
bytes at pc.

* ``ud0``/``ud1``/``ud2``: defined to raise #UD (compilers emit ud2 for
  ``__builtin_trap`` and unreachable code): software, deliberate.
* bytes capstone cannot decode: a jump into data or corrupted code.
* a valid instruction of an ISA extension (AVX, AVX-512, SSE4 …): most likely
  a binary built for a newer CPU than the host's.
* a valid, ordinary base-ISA instruction: the CPU refused an instruction it
  must execute, or decoded something else than what memory holds:
  hardware-suspect.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._x86 import instruction_evidence
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

#: capstone groups that every x86-64 CPU implements (SSE2 is part of the
#: x86-64 baseline, AMD64 APM vol. 1 §1.1)
BASE_GROUPS = {
    "jump", "call", "ret", "int", "iret", "privilege", "branch_relative", "mode64",
    "fpu", "sse1", "sse2", "cmov", "not64bitmode",
}  # fmt: skip


@register
class IllegalInstruction(PhenotypeRule):
    name = "illegal-instruction"
    hardware_indicative = True
    description = (
        "SIGILL from the CPU; the instruction at pc is decoded: a valid base-ISA "
        "instruction that raised SIGILL is hardware-suspect."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name != "SIGILL" or sig.si_code is None or sig.si_code <= 0:
            return None  # si_code <= 0: sent by kill/tgkill, not raised by an instruction
        pc = ctx.pc
        evidence: dict[str, object] = {
            "pc": None if pc is None else f"0x{pc:x}",
            "si_code": sig.si_code_name,
        }
        data = ctx.memory.read(pc, 16) if pc is not None and ctx.memory is not None else None
        evidence["bytes_at_pc"] = None if data is None else data.hex()
        if data is None:
            return self.fire(hardware_indicative=False, verdict="bytes-unknown", **evidence)
        insn = ctx.raw_instruction(pc) if ctx.arch == "x86_64" else None
        if insn is None:
            return self.fire(hardware_indicative=False, verdict="undecodable", **evidence)
        evidence.update(instruction_evidence(insn))
        groups = sorted(insn.group_name(g) for g in insn.groups)
        extensions = [g for g in groups if g not in BASE_GROUPS]
        evidence["isa_groups"] = groups
        if insn.mnemonic.startswith("ud"):
            return self.fire(hardware_indicative=False, verdict="deliberate-trap", **evidence)
        if extensions:
            return self.fire(hardware_indicative=False, verdict="isa-extension", **evidence)
        return self.fire(hardware_indicative=True, verdict="valid-ordinary-instruction", **evidence)
