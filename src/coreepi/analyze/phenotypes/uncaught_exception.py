"""uncaught-exception: a C++ exception ended in ``std::terminate`` (no
handler, a throw through ``noexcept``, a throw during unwinding), with the
exception's type (and what() text) read from its header in memory."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._cxx import find_exception
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import FrameTrust, Phenotype

#: frames of libstdc++'s (and libc++abi's) terminate path
TERMINATE_FUNCTIONS = (
    "std::terminate()", "__cxxabiv1::__terminate(void (*)())", "__cxa_call_terminate",
    "__gnu_cxx::__verbose_terminate_handler()", "std::__terminate()",
    "demangling_terminate_handler()",
)  # fmt: skip


@register
class UncaughtException(PhenotypeRule):
    name = "uncaught-exception"
    description = (
        "SIGABRT with std::terminate on the stack or a C++ exception header (class "
        "GNUCC++) in flight; records the exception type and what() when readable."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name != "SIGABRT":
            return None
        frames = ctx.thread.frames if ctx.thread else []
        terminate = next(
            (
                f
                for f in frames
                if f.function
                and f.function.startswith(TERMINATE_FUNCTIONS)
                and f.trust != FrameTrust.SCAN
            ),
            None,
        )
        exception = find_exception(ctx)
        if terminate is None and exception is None:
            return None
        evidence: dict[str, object] = {
            "terminate_frame": None if terminate is None else terminate.index,
        }
        if exception is not None:
            evidence.update(exception.evidence())
        else:
            evidence["exception_type"] = None
        return self.fire(**evidence)
