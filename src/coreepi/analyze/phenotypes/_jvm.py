"""What the JVM phenotype rules read off an hs_err report: the fatal error
(``report.artifact.jvm``), the problematic frame and the crashing thread's
stack with HotSpot's frame kinds (``report.runtime.frames``), and when a
signal's fault address means something."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from coreepi.analyze.context import AnalysisContext
from coreepi.model.report import JvmErrorInfo, RuntimeFrame, SignalInfo
from coreepi.parse.signals import has_fault_address

__all__ = ["ACCESS", "ILLEGAL", "error", "fault_is_real", "hex_or_none", "stack", "top_frame"]

#: Signals and Windows exceptions of a bad memory access / a bad instruction.
ACCESS: Final = frozenset(
    {"SIGSEGV", "SIGBUS", "EXCEPTION_ACCESS_VIOLATION", "EXCEPTION_IN_PAGE_ERROR"}
)
ILLEGAL: Final = frozenset({"SIGILL", "EXCEPTION_ILLEGAL_INSTRUCTION", "EXCEPTION_PRIV_INSTRUCTION"})


def hex_or_none(value: int | None) -> str | None:
    """``0x…`` or None."""
    return None if value is None else f"0x{value:x}"


def error(ctx: AnalysisContext) -> JvmErrorInfo | None:
    """The fatal error as the hs_err log states it; None for other reports."""
    artifact = ctx.report.artifact
    return artifact.jvm if artifact is not None else None


def stack(ctx: AnalysisContext) -> Sequence[RuntimeFrame]:
    """The crashing thread's frames with HotSpot's kinds: the first
    ``len(crashed thread's frames)`` runtime frames (the Java frames the log
    prints separately follow them in ``runtime.frames``)."""
    crashed = ctx.report.crashed_thread
    return ctx.report.runtime.frames[: len(crashed.frames)] if crashed is not None else []


def top_frame(ctx: AnalysisContext) -> RuntimeFrame | None:
    """The problematic frame: frame 0 of a signal crash (or of a fragment
    without its error line); None for internal errors and out-of-memory."""
    info = error(ctx)
    frames = stack(ctx)
    if info is None or not frames or info.error_kind not in ("signal", None):
        return None
    return frames[0]


def fault_is_real(signal: SignalInfo) -> bool:
    """si_addr means something only for a kernel-raised fault; SI_KERNEL
    (a general protection fault) and kill()ed signals carry 0 there."""
    if signal.si_code is None or not 0 < signal.number <= 64:
        return True  # Windows, or a log without siginfo: the address stands as printed
    return has_fault_address(signal.number, signal.si_code)
