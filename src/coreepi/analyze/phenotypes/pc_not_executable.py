"""pc-not-executable: the program counter is outside every executable mapping
(a call through a bad function pointer, a corrupted return address, a jump
into data)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class PcNotExecutable(PhenotypeRule):
    name = "pc-not-executable"
    description = "The crashing thread's pc is unmapped or in a mapping without execute permission."

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        pc = ctx.pc
        if pc is None or ctx.report.signal is None or ctx.executable(pc):
            return None
        if not ctx.report.memory_map and ctx.memory is None:
            return None  # no map at all: nothing to judge against
        mapping = next((m for m in ctx.report.memory_map if m.start <= pc < m.end), None)
        return self.fire(
            pc=f"0x{pc:x}",
            pc_mapping=None
            if mapping is None
            else f"0x{mapping.start:x}-0x{mapping.end:x} {mapping.perms}",
            pc_mapping_path=None if mapping is None else mapping.path,
        )
