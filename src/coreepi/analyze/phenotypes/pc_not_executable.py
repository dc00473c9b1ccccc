"""pc-not-executable: the program counter is outside every executable mapping
(a call through a bad function pointer, a corrupted return address, a jump
into data).

An hs_err log: the pc of the error line is judged against the NULL page,
the fault address (an instruction fetch) and the ``Dynamic libraries``
map, with the reason in the evidence.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import ACCESS, ILLEGAL, error, fault_is_real, hex_or_none
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.analyze.phenotypes.null_deref import NULL_PAGE_LIMIT
from coreepi.model.report import Phenotype


@register
class PcNotExecutable(PhenotypeRule):
    name = "pc-not-executable"
    kinds = frozenset({"native", "jvm"})
    description = "The crashing thread's pc is unmapped or in a mapping without execute permission."

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        if ctx.kind == "jvm":
            return self._from_log(ctx)
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

    def _from_log(self, ctx: AnalysisContext) -> Phenotype | None:
        """An hs_err log (no memory): why the pc of the error line cannot be code."""
        sig, info = ctx.report.signal, error(ctx)
        pc = info.pc if info is not None else None
        if sig is None or pc is None or sig.name not in ACCESS | ILLEGAL:
            return None
        fault = sig.fault_address
        reason = None
        if pc < NULL_PAGE_LIMIT:
            reason = "pc in the NULL page"
        elif fault == pc and sig.name in ACCESS and fault_is_real(sig):
            reason = "the faulting access was the instruction fetch (fault address == pc)"
        else:
            mapping = next((m for m in ctx.report.memory_map if m.start <= pc < m.end), None)
            if mapping is not None and "x" not in mapping.perms:
                reason = f"pc in a {mapping.perms} mapping"
        if reason is None:
            return None
        return self.fire(pc=hex_or_none(pc), fault_address=hex_or_none(fault), reason=reason)
