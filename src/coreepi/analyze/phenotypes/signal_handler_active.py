"""signal-handler-active: the crash happened while a signal handler ran on the
crashing stack.

Found two ways: a frame named ``__restore_rt`` (glibc's and musl's
sigreturn trampoline), or, when the trampoline is unnamed or the unwinder
lost it, a stack word pointing at a trampoline's bytes (``mov $15,%rax;
syscall``: rt_sigreturn is syscall 15 on x86-64) with a plausible
``struct rt_sigframe`` behind it (arch/x86/include/asm/sigframe.h:
pretcode, then the ucontext whose mcontext holds the interrupted registers;
checked by uc_flags (UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS
at most) and the saved cs, which is __USER_CS, 0x33). The siginfo behind the
ucontext is filled in only for SA_SIGINFO handlers, so the handled signal's
number is not reported.
"""

from __future__ import annotations

import bisect

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import stack_words
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import FrameTrust, Phenotype

RESTORE_RT = (bytes.fromhex("48c7c00f0000000f05"), bytes.fromhex("b80f0000000f05"))
SCAN_BYTES = 256 * 1024
# offsets in struct rt_sigframe (x86-64), from its pretcode word
UC_MCONTEXT = 8 + 40  # pretcode, uc_flags, uc_link, uc_stack
SC_RSP, SC_RIP, SC_CS = UC_MCONTEXT + 15 * 8, UC_MCONTEXT + 16 * 8, UC_MCONTEXT + 18 * 8
UC_SIGMASK = UC_MCONTEXT + 32 * 8  # after the 256-byte struct sigcontext
USER_CS = 0x33  # arch/x86/include/asm/segment.h, 64-bit user code segment
MAX_UC_FLAGS = 0x7


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
        frame = self._scan(ctx) if ctx.arch == "x86_64" else None
        if named is None and frame is None:
            return None
        evidence: dict[str, object] = {"restore_rt_frame": None if named is None else named.index}
        if frame is not None:
            evidence.update(frame)
        return self.fire(**evidence)

    def _scan(self, ctx: AnalysisContext) -> dict[str, object] | None:
        mem = ctx.memory
        if mem is None:
            return None
        code = sorted((r.start, r.end) for r in mem.regions if "x" in r.perms)
        starts = [s for s, _ in code]
        checked: dict[int, bool] = {}
        for slot, value in stack_words(ctx, SCAN_BYTES):
            i = bisect.bisect_right(starts, value) - 1
            if i < 0 or value >= code[i][1]:
                continue
            if value not in checked:
                head = mem.read(value, 9) or mem.read(value, 7)
                checked[value] = head is not None and any(head.startswith(p) for p in RESTORE_RT)
            if not checked[value]:
                continue
            uc_flags, cs = mem.read_word(slot + 8), mem.read_word(slot + SC_CS)
            if uc_flags is None or uc_flags > MAX_UC_FLAGS or cs is None or cs & 0xFFFF != USER_CS:
                continue
            rip, rsp = mem.read_word(slot + SC_RIP), mem.read_word(slot + SC_RSP)
            mask = mem.read_word(slot + UC_SIGMASK)
            return {
                "sigframe_address": f"0x{slot:x}",
                "trampoline": f"0x{value:x}",
                "interrupted_pc": None if rip is None else f"0x{rip:x}",
                "interrupted_sp": None if rsp is None else f"0x{rsp:x}",
                "interrupted_sigmask": None if mask is None else f"0x{mask:x}",
            }
        return None
