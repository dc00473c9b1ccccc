"""sigbus-mce: the kernel killed the process over an uncorrectable memory error."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class SigbusMce(PhenotypeRule):
    name = "sigbus-mce"
    kinds = frozenset({"native", "jvm"})  # an hs_err log prints the siginfo too
    hardware_indicative = True
    description = (
        "SIGBUS with si_code BUS_MCEERR_AR/AO: the kernel's memory-failure handler saw an "
        "uncorrectable hardware memory error in a page the process used (see sigaction(2))."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.si_code_name not in ("BUS_MCEERR_AR", "BUS_MCEERR_AO"):
            return None
        return self.fire(
            si_code=sig.si_code_name,
            action_required=sig.si_code_name == "BUS_MCEERR_AR",
            fault_address=None if sig.fault_address is None else f"0x{sig.fault_address:x}",
        )
