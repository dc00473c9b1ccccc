"""The signal frame on a crashing stack (x86-64): where a signal handler was
entered, with the interrupted registers and the trap that raised the signal.

Found by a stack word pointing at a trampoline's bytes (``mov $15,%rax;
syscall``: rt_sigreturn is syscall 15 on x86-64) with a plausible
``struct rt_sigframe`` behind it (arch/x86/include/asm/sigframe.h: pretcode,
then the ucontext whose mcontext is the ``struct sigcontext`` of
arch/x86/include/uapi/asm/sigcontext.h), checked by uc_flags
(UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS at most) and the
saved cs, which is __USER_CS, 0x33. The sigcontext's ``trapno`` and ``cr2``
are filled by the kernel for every handler (arch/x86/kernel/signal_64.c,
setup_sigcontext), SA_SIGINFO or not, from the thread's last trap: trap 14
is a page fault and cr2 its address, the handled SIGSEGV's fault address.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import stack_words

__all__ = ["TRAP_NAMES", "TRAP_PAGE_FAULT", "SignalFrame", "find_signal_frame"]

RESTORE_RT = (bytes.fromhex("48c7c00f0000000f05"), bytes.fromhex("b80f0000000f05"))
SCAN_BYTES = 256 * 1024
# offsets in struct rt_sigframe (x86-64), from its pretcode word
UC_MCONTEXT = 8 + 40  # pretcode, uc_flags, uc_link, uc_stack
SC_RSP, SC_RIP, SC_CS = UC_MCONTEXT + 15 * 8, UC_MCONTEXT + 16 * 8, UC_MCONTEXT + 18 * 8
SC_TRAPNO, SC_CR2 = UC_MCONTEXT + 20 * 8, UC_MCONTEXT + 22 * 8
UC_SIGMASK = UC_MCONTEXT + 32 * 8  # after the 256-byte struct sigcontext
USER_CS = 0x33  # arch/x86/include/asm/segment.h, 64-bit user code segment
MAX_UC_FLAGS = 0x7
TRAP_PAGE_FAULT = 14
_SHARED_KEY = "signal_frame"
#: x86 exception vectors that raise a fatal signal (Intel SDM vol. 3, 6.3.1).
#: Not 0 (divide error): it is also the value of a thread that never
#: trapped, whose handler ran for an asynchronous signal (kill, timer).
TRAP_NAMES = {
    6: "invalid opcode",
    13: "general protection",
    TRAP_PAGE_FAULT: "page fault",
    17: "alignment check",
}


@dataclass(frozen=True)
class SignalFrame:
    """One ``struct rt_sigframe``: its address (``slot``), the trampoline its
    pretcode points at, and what the kernel saved of the interrupted code
    (None where the word is not in the core)."""

    slot: int
    trampoline: int
    pc: int | None
    sp: int | None
    sigmask: int | None
    trapno: int | None
    cr2: int | None

    @property
    def trap(self) -> str | None:
        """The x86 exception that raised the handled signal, in words, or None."""
        return TRAP_NAMES.get(self.trapno) if self.trapno is not None else None


def find_signal_frame(ctx: AnalysisContext) -> SignalFrame | None:
    """The innermost signal frame within :data:`SCAN_BYTES` above sp, or None
    (no memory, not x86-64, no handler on the stack); scanned once per
    analysis (kept in ``ctx.shared``: two rules read it)."""
    if _SHARED_KEY not in ctx.shared:
        ctx.shared[_SHARED_KEY] = _scan(ctx)
    frame: SignalFrame | None = ctx.shared[_SHARED_KEY]
    return frame


def _scan(ctx: AnalysisContext) -> SignalFrame | None:
    mem = ctx.memory
    if mem is None or ctx.arch != "x86_64":
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
        return SignalFrame(
            slot=slot,
            trampoline=value,
            pc=mem.read_word(slot + SC_RIP),
            sp=mem.read_word(slot + SC_RSP),
            sigmask=mem.read_word(slot + UC_SIGMASK),
            trapno=mem.read_word(slot + SC_TRAPNO),
            cr2=mem.read_word(slot + SC_CR2),
        )
    return None
