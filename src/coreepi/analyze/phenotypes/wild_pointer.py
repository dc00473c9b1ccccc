"""wild-pointer: a data access at an unmapped address that is neither near
NULL nor in the stack's guard (those are null-deref and stack-overflow).
Instruction fetches (pc == fault address) are left to pc-not-executable."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import stack_overflow_fault
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.analyze.phenotypes.null_deref import NULL_PAGE_LIMIT
from coreepi.model.report import Phenotype


@register
class WildPointer(PhenotypeRule):
    name = "wild-pointer"
    description = (
        "SIGSEGV/SIGBUS at an unmapped fault address at or above 64 KiB that is not in the "
        "stack guard: a garbage, freed or corrupted pointer."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name not in ("SIGSEGV", "SIGBUS") or sig.fault_address is None:
            return None
        fault = sig.fault_address
        if fault < NULL_PAGE_LIMIT or ctx.mapped(fault) or stack_overflow_fault(ctx) is not None:
            return None
        if ctx.pc == fault:
            return None  # an instruction fetch: pc-not-executable / return-to-bogus say more
        below = [m for m in ctx.report.memory_map if m.end <= fault]
        above = [m for m in ctx.report.memory_map if m.start > fault]
        nearest_below = max(below, key=lambda m: m.end, default=None)
        nearest_above = min(above, key=lambda m: m.start, default=None)
        return self.fire(
            fault_address=f"0x{fault:x}",
            si_code=sig.si_code_name,
            bytes_above_mapping_below=None
            if nearest_below is None
            else fault - nearest_below.end + 1,
            bytes_below_mapping_above=None
            if nearest_above is None
            else nearest_above.start - fault,
        )
