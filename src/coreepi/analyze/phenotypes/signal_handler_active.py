"""signal-handler-active: the crash happened while a signal handler ran on the
crashing stack.

Found two ways: a frame named ``__restore_rt`` (glibc's and musl's
sigreturn trampoline), or, when the trampoline is unnamed or the unwinder
lost it, the signal frame itself on the stack (:mod:`._sigframe`), which
also gives the interrupted registers and the trap that raised the handled
signal (``interrupted_trap``: a page fault at ``interrupted_fault_address``
is the SIGSEGV a crash handler was reporting when it called abort()).
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._sigframe import TRAP_PAGE_FAULT, find_signal_frame
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import FrameTrust, Phenotype


@register
class SignalHandlerActive(PhenotypeRule):
    name = "signal-handler-active"
    description = (
        "A signal frame is on the crashing stack: a __restore_rt frame, or a stack word "
        "pointing at rt_sigreturn trampoline code with an rt_sigframe behind it."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        if ctx.thread is None or ctx.report.signal is None:
            return None
        named = next(
            (
                f
                for f in ctx.thread.frames
                if f.function == "__restore_rt" and f.trust != FrameTrust.SCAN
            ),
            None,
        )
        frame = find_signal_frame(ctx)
        if named is None and frame is None:
            return None
        evidence: dict[str, object] = {"restore_rt_frame": None if named is None else named.index}
        if frame is not None:
            evidence.update(
                sigframe_address=f"0x{frame.slot:x}",
                trampoline=f"0x{frame.trampoline:x}",
                interrupted_pc=_hex(frame.pc),
                interrupted_sp=_hex(frame.sp),
                interrupted_sigmask=_hex(frame.sigmask),
            )
            if frame.trap is not None:
                evidence["interrupted_trap"] = frame.trap
                if frame.trapno == TRAP_PAGE_FAULT:
                    evidence["interrupted_fault_address"] = _hex(frame.cr2)
        return self.fire(**evidence)


def _hex(value: int | None) -> str | None:
    return None if value is None else f"0x{value:x}"
