"""stack-overflow: the fault is in the crashing thread's stack guard, or in the
gap just below its stack mapping, near sp.

An hs_err log: a Windows stack overflow exception, or an access fault in
HotSpot's guard zones at the low end of the stack the log reports (or just
below it) and under sp.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import ACCESS, error, fault_is_real, hex_or_none
from coreepi.analyze.phenotypes._stack import STACK_GUARD_GAP, stack_overflow_fault
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class StackOverflow(PhenotypeRule):
    name = "stack-overflow"
    kinds = frozenset({"native", "jvm"})
    description = (
        f"SIGSEGV/SIGBUS within {STACK_GUARD_GAP // 1024} KiB below the writable mapping that "
        "holds (or lies just above) sp, with the fault within 64 KiB of sp."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        if ctx.kind == "jvm":
            return self._from_log(ctx)
        evidence = stack_overflow_fault(ctx)
        return None if evidence is None else self.fire(**evidence)

    def _from_log(self, ctx: AnalysisContext) -> Phenotype | None:
        """An hs_err log: the stack bounds and sp it prints (no memory)."""
        sig, info = ctx.report.signal, error(ctx)
        if sig is None or info is None:
            return None
        fault, sp = sig.fault_address, info.sp
        low, high = info.stack_low, info.stack_high
        bounded = low is not None and high is not None
        if sig.name != "EXCEPTION_STACK_OVERFLOW" and not (
            sig.name in ACCESS
            and low is not None
            and high is not None
            and fault is not None
            and fault_is_real(sig)
            and low - 0x10000 <= fault < min(high, low + 0x400000)
            and (sp is None or fault <= sp)
        ):
            return None
        return self.fire(
            fault_address=hex_or_none(fault),
            sp=hex_or_none(sp),
            stack=[hex_or_none(low), hex_or_none(high)] if bounded else None,
        )
