"""null-deref: a memory fault at an address in the first pages."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

# Linux refuses to map below vm.mmap_min_addr (65536 by default), so a fault
# there is a NULL pointer plus a field offset, never a real mapping.
NULL_PAGE_LIMIT = 0x10000


@register
class NullDeref(PhenotypeRule):
    name = "null-deref"
    description = "SIGSEGV/SIGBUS at a fault address below 64 KiB: a NULL pointer (plus offset)."

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name not in ("SIGSEGV", "SIGBUS") or sig.fault_address is None:
            return None
        if sig.fault_address >= NULL_PAGE_LIMIT:
            return None
        # pc == fault address: the CPU faulted fetching an instruction (a call
        # or jump through a NULL function pointer, or a return to NULL).
        access = "execute" if ctx.pc == sig.fault_address else "data"
        return self.fire(
            fault_address=f"0x{sig.fault_address:x}",
            si_code=sig.si_code_name,
            offset_from_null=sig.fault_address,
            access=access,
        )
