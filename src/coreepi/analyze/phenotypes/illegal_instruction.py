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

An hs_err log has no memory: the bytes at pc come from its
``Instructions:`` dump, and the rule says only whether they are the ``ud2``
that C2 and the template interpreter plant on purpose (never
hardware-indicative: the log cannot tell more).
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import ILLEGAL, error, hex_or_none
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
    kinds = frozenset({"native", "jvm"})
    hardware_indicative = True
    description = (
        "SIGILL from the CPU; the instruction at pc is decoded: a valid base-ISA "
        "instruction that raised SIGILL is hardware-suspect."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if ctx.kind == "jvm":
            return self._from_log(ctx)
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

    def _from_log(self, ctx: AnalysisContext) -> Phenotype | None:
        """An hs_err log: SIGILL or a Windows illegal/privileged instruction."""
        sig = ctx.report.signal
        if sig is None or sig.name not in ILLEGAL:
            return None
        info = error(ctx)
        pc = info.pc if info is not None else None
        text = info.instruction_bytes if info is not None and pc is not None else None
        code = bytes.fromhex(text) if text else None
        return self.fire(
            hardware_indicative=False,
            si_code=sig.si_code_name,
            pc=hex_or_none(pc),
            instruction_bytes=code.hex(" ") if code else None,
            # C2 and the template interpreter plant ud2 on purpose (halt, unreachable code).
            deliberate_trap=code[:2] == b"\x0f\x0b" if code and ctx.arch in ("x86_64", "x86") else None,
        )
