"""null-deref: a memory fault at an address in the first pages.

Cores and hs_err logs: a JVM log gives the signal (or Windows exception)
and its siginfo, so the same limit applies to what HotSpot printed. A core of
abort() called by a fault handler (SIGABRT) is judged by the page fault the
handler was reporting, so a JVM's core and its hs_err log agree.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import ACCESS, fault_is_real
from coreepi.analyze.phenotypes._sigframe import TRAP_PAGE_FAULT, find_signal_frame
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

# Linux refuses to map below vm.mmap_min_addr (65536 by default), so a fault
# there is a NULL pointer plus a field offset, never a real mapping.
NULL_PAGE_LIMIT = 0x10000


@register
class NullDeref(PhenotypeRule):
    name = "null-deref"
    kinds = frozenset({"native", "jvm"})
    description = "SIGSEGV/SIGBUS at a fault address below 64 KiB: a NULL pointer (plus offset)."

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if ctx.kind == "jvm":
            return self._from_log(ctx)
        if sig is not None and sig.name == "SIGABRT":
            return self._from_handler(ctx)
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

    def _from_handler(self, ctx: AnalysisContext) -> Phenotype | None:
        """abort() inside a handler of a page fault (a crash reporter's, or
        HotSpot's JVM_handle_linux_signal -> VMError::report_and_die ->
        os::abort): the fault the handler was reporting, from the signal
        frame's saved trap and cr2 (:mod:`._sigframe`)."""
        frame = find_signal_frame(ctx)
        if frame is None or frame.trapno != TRAP_PAGE_FAULT or frame.cr2 is None:
            return None
        # The saved pc must be a frame the unwinder reached through the
        # handler: a stale rt_sigframe left in a live frame's locals is not.
        if ctx.thread is None or not any(f.pc == frame.pc for f in ctx.thread.frames[1:]):
            return None
        if frame.cr2 >= NULL_PAGE_LIMIT:
            return None
        return self.fire(
            fault_address=f"0x{frame.cr2:x}",
            offset_from_null=frame.cr2,
            access="execute" if frame.pc == frame.cr2 else "data",
            reported_by_signal_handler=True,
        )

    def _from_log(self, ctx: AnalysisContext) -> Phenotype | None:
        """An hs_err log: Windows access violations count too; a fault
        address that is not one (SI_KERNEL, kill) does not. No ``access``:
        the log's pc and fault address are not compared."""
        sig = ctx.report.signal
        fault = sig.fault_address if sig is not None else None
        if sig is None or sig.name not in ACCESS or fault is None or fault >= NULL_PAGE_LIMIT:
            return None
        if not fault_is_real(sig):
            return None
        return self.fire(fault_address=f"0x{fault:x}", si_code=sig.si_code_name, offset_from_null=fault)
