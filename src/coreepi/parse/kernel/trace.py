"""Frames of a kernel crash report: the faulting-pc line and the call trace.

Reads the shapes every architecture and kernel generation prints (Linux
``arch/*/kernel/traps.c``, ``dumpstack.c``, ``process.c``, ``unwind.c``)::

    RIP: 0010:__memset+0x24/0x30                       x86-64 (also e030: under Xen PV)
    RIP: 0010:[<ffffffff81234567>]  [<…>] func+0x1/0x2  x86-64 before 4.x; "[]" when stripped
    EIP is at page_remove_rmap+0x70/0x8f               i386 before 2.6.30
    NIP [c000000000445af8] .__dev_printk+0x28/0xc0     ppc64 (ELF v1 dot-symbols)
    pc : mutex_lock+0x1c/0x60     pc : bio_free        arm64, with or without offset
    PC is at expire_timers+0x70/0x15c                  arm
    Krnl PSW : 0704c00180000000 00000000735d720c (func+0x25c/0x320)   s390x

    Call Trace:
     <IRQ>  [<ffffffff8163a12c>] dump_stack+0x19/0x1b  a frame after a context marker
     [<ffffffffa0099645>] :dvb_core:dvb_unregister_frontend+0xb5/0x100   x86-64 2.6.2x
     [<ffffffff810bd917>] ? rcu_irq_exit+0x77/0xc0     unreliable: skipped
    [c0000001fffd3bf0] [d000000003649a04] .ibmvfc_scsi_done+0x334/0x3e0 [ibmvfc]
    --- Exception: 501 at .plpar_hcall_norets+0x84/0xd4   ppc64 exception frame marker
     ([<00000002623523de>] free_unref_page+0xee/0x148)   s390 "maybe" frame: skipped
    [<c03d7430>] (expire_timers) from [<c03d75d0>] (run_timer_softirq+0xb4/0x1dc)   arm
     __drm_fb_helper_initial_config_and_unlock from drm_client_dev_hotplug+0xac/0x104  arm 6.x
      bio_free                                          arm64 without offsets
     crypto_more_spawns crypto/algapi.c:105 [inline]    symbolised inline frame

Shapes: :func:`read_frames` returns ``[Frame, ...]``: frame 0 from the
faulting-pc line when there is one (trust ``context``: the register dump's
pc), then the first call trace (the unwinder's own frames as printed, trust
``log``). For ARM's ``f from g``
lines the frame is ``f`` (``g`` is the next line's ``f``). Functions keep
GCC suffixes (``.isra.0``) and lose ppc64's leading dot and the old
``:module:`` prefix (the module goes to ``Frame.module``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from coreepi.model.report import Frame, FrameTrust
from coreepi.model.trusted import trusted
from coreepi.parse.demangle import demangle_function

__all__ = ["MAX_FRAMES", "PC_LINE", "read_frames"]

MAX_FRAMES: Final = 256
_NAME: Final = r"[A-Za-z_][A-Za-z0-9_.$]*"
_OFFSET: Final = r"\+0x([0-9a-f]+)/0x ?[0-9a-f]+"  # s390 pastes may split "0x 4e0"
_MODULE: Final = r"(?: \[([A-Za-z0-9_\-]+)[^\]]*\])?"

PC_LINE: Final = re.compile(
    r"^\s*(?:(?:RIP|EIP|IP): (?:[0-9a-f]{4}:)?(?:\[<?[0-9a-f]*>?\]\s*){0,2}"
    r"|EIP is at |PC is at |NIP \[[0-9a-f]+\] |(?:pc|epc) : (?:\[<[0-9a-f]+>\]\s*)?"
    r"|Krnl PSW : [0-9a-f]+ [0-9a-f]+ \()"
    rf"\.?({_NAME})(?:{_OFFSET}|(?=\s*(?:\[|\)|$))){_MODULE}"
)
_TRACE_START: Final = re.compile(
    r"Call (?:T|t)race:|Backtrace:|^\s*backtrace(?: \(crc [0-9a-f]+\))?:|^\s*stack backtrace:"
)
# Lines inside a trace that are not frames but do not end it.
_MARKER: Final = re.compile(
    r"^\s*(?:</?(?:IRQ|TASK|NMI|EOI|SOFTIRQ)>\s*$|Exception stack|--- (?:Exception|interrupt)"
    r"|LR = |[0-9a-f]{4}:(?: +[0-9a-f]{8})+\s*$|\(\[<)"
)
_MARKER_INITIALS: Final = frozenset("<EL-(0123456789abcdef")  # what a _MARKER line starts with
_CONTEXT_PREFIX: Final = re.compile(r"^\s*<(?:IRQ|EOI|NMI|TASK|SOFTIRQ)>\s*")
_FRAME: Final = re.compile(
    rf"^\s*(?:\[<?(?:0x)?([0-9a-f]*)>?\]\s*){{0,2}}(?::([A-Za-z0-9_\-]+):)?\.?({_NAME}){_OFFSET}{_MODULE}"
    r"(?: ([A-Za-z0-9_\-./]+\.[A-Za-z]+):(\d+))?"
)
_ARM_OLD: Final = re.compile(
    rf"^\s*\[<([0-9a-f]+)>\] \(({_NAME})(?:\+0x([0-9a-f]+)/0x[0-9a-f]+)?{_MODULE}\) from "
)
_ARM_NEW: Final = re.compile(rf"^\s*({_NAME}){_MODULE} from {_NAME}\+0x")
_INLINE: Final = re.compile(rf"^\s*({_NAME}) ([A-Za-z0-9_\-./]+\.[A-Za-z]+):(\d+) \[inline\]")
_BARE: Final = re.compile(rf"^\s*\.?({_NAME})\s*$")
# (two regexps: the anchored forms are tried at the line's start only, the
# "(unreliable)" suffix only where that substring is)
_UNRELIABLE_HEAD: Final = re.compile(r"\s*(?:\[<?[0-9a-f]*>?\]\s*)*\? |\s*(?:\[<?[0-9a-f]*>?\]\s*)+0x")
_UNRELIABLE_TAIL: Final = re.compile(r"\(unreliable\)\s*$")


def _may_be_pc_line(line: str) -> bool:
    """Whether ``line`` holds a literal every PC_LINE form needs (RIP/EIP/IP/
    NIP, "PC is at", "pc :"/"epc :", "Krnl PSW")."""
    return "IP" in line or "PC is at" in line or "pc :" in line or "PSW" in line


_U64_MAX: Final = (1 << 64) - 1


def _hex(text: str | None) -> int | None:
    """A printed hex number as an address; ValueError past 64 bits (a
    garbled line: the report then falls back to its minimal form, as when
    the model refused such a value)."""
    if not text:
        return None
    value = int(text, 16)
    if value > _U64_MAX:
        raise ValueError(f"address out of the unsigned 64-bit range: 0x{value:x}")
    return value


# Frames are built with trusted(): every value below is typed by its regexp
# (an address by _hex, a line number by \d+), see coreepi.model.trusted.
def _pc_frame(match: re.Match[str]) -> Frame:
    return trusted(Frame, index=0, pc=None, function=demangle_function(match.group(1)),
                   function_offset=_hex(match.group(2)), module=match.group(3), trust=FrameTrust.CONTEXT)


def _frame(line: str, index: int, bare_ok: bool) -> Frame | None:
    """The frame one trace line prints, or None. Each regexp is tried only
    on lines holding the literal it needs (most lines are x86 frames)."""
    if " from " in line:
        if ") from " in line and (m := _ARM_OLD.match(line)) is not None:
            return trusted(Frame, index=index, pc=_hex(m.group(1)), function=m.group(2),
                           function_offset=_hex(m.group(3)), module=m.group(4), trust=FrameTrust.LOG)
        if (m := _ARM_NEW.match(line)) is not None:
            return trusted(Frame, index=index, pc=None, function=m.group(1), module=m.group(2),
                           trust=FrameTrust.LOG)
    if " [inline]" in line and (m := _INLINE.match(line)) is not None:
        return trusted(Frame, index=index, pc=None, function=m.group(1), file=m.group(2), line=int(m.group(3)),
                       inlined=True, trust=FrameTrust.LOG)
    if "+0x" in line and (m := _FRAME.match(line)) is not None:
        return trusted(Frame, index=index, pc=_hex(m.group(1)), module=m.group(5) or m.group(2),
                       function=demangle_function(m.group(3)), function_offset=_hex(m.group(4)),
                       file=m.group(6), line=int(m.group(7)) if m.group(7) else None, trust=FrameTrust.LOG)
    if bare_ok and (m := _BARE.match(line)) is not None:
        return trusted(Frame, index=index, pc=None, function=m.group(1), trust=FrameTrust.LOG)
    return None


def read_frames(lines: Sequence[str]) -> list[Frame]:
    """Frame 0 from the faulting-pc line (when printed before the trace),
    then the frames of the first call trace. Without a trace keyword (KMSAN,
    ARM warnings, pastes that lost it) the trace is the first run of frame
    lines after the report's first line; frames without an offset are only
    read under a trace keyword (arm64 prints them bare)."""
    frames: list[Frame] = []
    start, keyword = 1, False
    for i, line in enumerate(lines):
        if i == 0:
            continue
        if "race" in line and _TRACE_START.search(line):  # every keyword holds "race"
            start, keyword = i + 1, True
            break
        if not frames and _may_be_pc_line(line) and (m := PC_LINE.match(line)) is not None:
            frames.append(_pc_frame(m))
    in_trace = False
    for line in lines[start:]:
        if len(frames) >= MAX_FRAMES:
            break
        if "<" in line:
            line = _CONTEXT_PREFIX.sub("", line, count=1)
        if ((("? " in line or "[" in line) and _UNRELIABLE_HEAD.match(line))
                or ("(unreliable)" in line and _UNRELIABLE_TAIL.search(line))
                or (line.lstrip()[:1] in _MARKER_INITIALS and _MARKER.match(line))):
            continue
        frame = _frame(line, len(frames), keyword)
        if frame is not None:
            frames.append(frame)
            in_trace = True
        elif in_trace and line.strip():
            break
    return frames
