"""in-exception-unwind: the crashing stack holds the exception machinery:
``__cxa_throw``/``__cxa_rethrow``, a personality routine, or an unwinder
(libgcc's ``_Unwind_*``, LLVM/nongnu libunwind's ``unw_*``/``_U*``)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import FrameTrust, Phenotype

PREFIXES = (
    "__cxa_throw", "__cxa_rethrow", "__cxa_end_catch", "_Unwind_", "__gxx_personality_",
    "__gcc_personality_", "unw_", "_ULx86_64_", "_Ux86_64_", "_ULaarch64_", "_Uaarch64_",
    "__unw_", "libunwind::", "uw_frame_state_for", "uw_update_context", "uw_init_context",
    "execute_cfa_program", "search_object", "_Unwind_Find_FDE",
)  # fmt: skip


@register
class InExceptionUnwind(PhenotypeRule):
    name = "in-exception-unwind"
    description = (
        "A frame of the crashing thread is __cxa_throw/__cxa_rethrow, a personality routine "
        "or an unwinder function (libgcc _Unwind_*, libunwind)."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        if ctx.thread is None or ctx.report.signal is None:
            return None
        hits = [
            {"index": f.index, "function": f.function, "module": f.module}
            for f in ctx.thread.frames
            # scanned frames may be stale return addresses of an old throw
            if f.function and f.function.startswith(PREFIXES) and f.trust != FrameTrust.SCAN
        ]
        if not hits:
            return None
        return self.fire(unwind_frames=hits, innermost=hits[0]["function"])
