"""Stack scanning: recover caller frames where CFI unwinding gave up or went wrong.

When a stack is corrupted (a return address overwritten, the stack pointer
off by 8, a jump to NULL), DWARF CFI unwinding stops early, loops, or
produces frames whose pc is not code. Breakpad (``stackwalker_amd64.cc``,
``Stackwalker::ScanForReturnAddress``) and rust-minidump
(``minidump-unwind/src/amd64.rs``, ``get_caller_by_scan``) then scan the
stack memory upward from the last good stack pointer for words that look
like return addresses. coreepi does the same, with a stricter test than
either (they only ask that the word point into a module with code): a
candidate must point into an executable mapping *and* the bytes just before
it must decode as a call instruction ending exactly there (x86-64: capstone
on the 2..7 bytes before; aarch64: the word before is BL or BLR, with or
without pointer authentication).

What is kept: the frames up to the last trustworthy one (frame 0 always: it
is the register context). A frame stops being trustworthy when its pc is not
executable, when its (pc, sp) repeats an earlier frame (a loop), when its sp
is not above its callee's (except at a signal frame: the handler may run on
an alternate stack), or when a frame-pointer frame's pc is not preceded by a
call. Everything after that point is replaced by scanned frames with trust
``scan``; a stack that simply ends before its outermost function
(``_start``, ``clone3`` …) is extended the same way.

One more recovery, after a frame 0 whose pc is not code (a ``ret`` to a bad
address): the function that was running at that stack level lost its return
address, but the first recovered caller's *direct* call instruction names it.
That callee gets a frame (pc = its entry, since the real pc is lost; trust
``scan``), so ``overwrite_ret``'s ``commit_batch`` is not lost.

Bounds (each scan): at most :data:`MAX_SCAN_BYTES` of stack (1024 words) and
:data:`MAX_SCANNED_FRAMES` frames. Only the crashing thread is scanned: the
signature and the phenotypes read only it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

import capstone

from coreepi.analyze.context import AnalysisContext
from coreepi.model.report import Frame, FrameTrust, Thread
from coreepi.parse.elf.symbols import SymbolResolver

__all__ = [
    "MAX_SCANNED_FRAMES",
    "MAX_SCAN_BYTES",
    "OUTERMOST_FUNCTIONS",
    "ScanResult",
    "run_stack_scan",
    "scan_thread",
]

MAX_SCAN_BYTES = 64 * 1024
MAX_SCANNED_FRAMES = 64
WORD = 8

#: functions a complete stack ends in (glibc: main thread, pthreads, raw clone)
OUTERMOST_FUNCTIONS = frozenset(
    {"_start", "__libc_start_main", "__libc_start_main_impl", "clone", "clone3", "__clone",
     "__clone3", "thread_start", "start_thread"}
)  # fmt: skip

_CALL_MNEMONICS = ("call", "lcall")


@dataclass(slots=True)
class ScanResult:
    """What a scan did to one thread: frames kept, frames added, and why."""

    kept: int  # frames kept from the unwinder
    added: int  # frames recovered by scanning (and callee inference)
    reason: str  # why the scan ran


def run_stack_scan(ctx: AnalysisContext) -> None:
    """Pipeline step: scan the crashing thread's stack when its unwinding is
    unusable or incomplete; replace its frames in place."""
    thread = ctx.thread
    if thread is None or ctx.memory is None or ctx.arch not in ("x86_64", "aarch64"):
        return
    scan_thread(ctx, thread)


def scan_thread(ctx: AnalysisContext, thread: Thread) -> ScanResult | None:
    """Scan ``thread`` (whose registers and memory are ``ctx``'s); None when
    its unwinding needed no help."""
    frames = thread.frames
    sp0 = ctx.register("rsp" if ctx.arch == "x86_64" else "sp")
    if sp0 is None:
        return None
    if not frames:
        cut, reason = 0, "no frames"
    else:
        cut, reason = _first_untrustworthy(ctx, frames)
    if cut is None:
        last = frames[-1]
        if _base_name(last.function) in OUTERMOST_FUNCTIONS:
            return None
        cut, reason = len(frames), "unwinding stopped before an outermost function"
    kept = frames[:cut]
    last_sp = kept[-1].sp if kept else None
    start: int = last_sp if last_sp is not None else sp0
    if len(kept) == 1 and kept[0].trust == FrameTrust.CONTEXT:
        start = sp0  # frame 0's own sp: the register
    resolver = SymbolResolver(ctx.report.modules)
    recovered = _scan(ctx, start, resolver)
    if ctx.arch == "aarch64" and kept and not ctx.executable(kept[0].pc) and len(kept) == 1:
        recovered = _link_register_frame(ctx, resolver, recovered)
    if kept and not ctx.executable(kept[-1].pc) and recovered:
        callee = _callee_of(ctx, recovered[0].pc, resolver)
        if callee is not None:
            recovered.insert(0, callee)
    out = [*kept, *recovered]
    thread.frames = [f.model_copy(update={"index": i}) for i, f in enumerate(out)]
    return ScanResult(kept=len(kept), added=len(recovered), reason=reason)


def _first_untrustworthy(ctx: AnalysisContext, frames: list[Frame]) -> tuple[int | None, str]:
    """Index of the first frame not to trust (never 0), and why; (None, "")
    when every frame is fine."""
    if not ctx.executable(frames[0].pc):
        # Every caller was unwound from a pc that is not code: all guesswork.
        first_caller = next((i for i, f in enumerate(frames) if f.pc != frames[0].pc), None)
        if first_caller is None:
            return len(frames), "frame 0's pc is not executable"
        return 1, "frame 0's pc is not executable"
    seen = {(frames[0].pc, frames[0].sp)}
    prev_sp = frames[0].sp
    for i, f in enumerate(frames[1:], start=1):
        prev = frames[i - 1]
        if (f.inlined or prev.inlined) and f.pc == prev.pc and f.sp == prev.sp:
            # An inlined function shares its physical frame; drgn lists the
            # inlined frames first and the physical one last, at the same pc.
            continue
        if not ctx.executable(f.pc):
            return i, f"frame {i}'s pc is not executable"
        if (f.pc, f.sp) in seen:
            return i, f"frame {i} repeats an earlier frame (unwinding loop)"
        seen.add((f.pc, f.sp))
        if f.trust != FrameTrust.CONTEXT and None not in (f.sp, prev_sp):
            assert f.sp is not None and prev_sp is not None
            if f.sp <= prev_sp:
                return i, f"frame {i}'s sp is not above its callee's"
        # Code in neither the core nor a file at hand (a core without its
        # executable) cannot be checked: the frame-pointer chain is then all
        # there is to go on, and eu-stack follows it too.
        if (f.trust == FrameTrust.FRAME_POINTER and _code_known(ctx, f.pc)
                and not _follows_call(ctx, f.pc)):
            return i, f"frame {i} (frame pointer) does not return after a call"
        prev_sp = f.sp
    return None, ""


def _scan(ctx: AnalysisContext, start: int, resolver: SymbolResolver) -> list[Frame]:
    """Return-address candidates from ``start`` upward, innermost first."""
    assert ctx.memory is not None
    region = ctx.memory.region_for(start)
    if region is None:
        return []
    end = min(region.end, start + MAX_SCAN_BYTES)
    start -= start % WORD
    data = ctx.memory.read(start, end - start)
    if data is None:
        # Part of the range is unknown (not dumped): read what is, word by word.
        words = [ctx.memory.read_word(a) for a in range(start, end, WORD)]
    else:
        words = [w for (w,) in struct.iter_unpack("<Q", data[: len(data) - len(data) % WORD])]
    out: list[Frame] = []
    for i, word in enumerate(words):
        if word is None or word < 0x1000 or not ctx.executable(word):
            continue
        if not _follows_call(ctx, word):
            continue
        out.append(_frame(resolver, word, start + (i + 1) * WORD))
        if len(out) >= MAX_SCANNED_FRAMES:
            break
    return out


def _frame(resolver: SymbolResolver, pc: int, sp: int) -> Frame:
    """A scanned frame: pc is the return address, sp the caller's stack
    pointer after the return (one word above where the address was found)."""
    module = resolver.module_for(pc)
    function = resolver.function_for(pc)
    return Frame(
        index=0,
        pc=pc,
        sp=sp,
        module=module.path if module else None,
        build_id=module.build_id if module else None,
        module_offset=pc - module.base if module else None,
        function=function[0] if function else None,
        function_offset=function[1] if function else None,
        trust=FrameTrust.SCAN,
    )


def _code_known(ctx: AnalysisContext, address: int) -> bool:
    """Whether the bytes a call ending at ``address`` would occupy can be read."""
    assert ctx.memory is not None
    size = 4 if ctx.arch == "aarch64" else 7
    return ctx.memory.read(address - size, size) is not None


def _follows_call(ctx: AnalysisContext, address: int) -> bool:
    """Whether the instruction just before ``address`` is a call ending at it."""
    return _call_before(ctx, address) is not None


def _call_before(ctx: AnalysisContext, address: int) -> tuple[int, int | None] | None:
    """(address of the call instruction, its direct target or None) when a
    call instruction ends exactly at ``address``."""
    assert ctx.memory is not None
    if ctx.arch == "aarch64":
        if address % 4:
            return None
        data = ctx.memory.read(address - 4, 4)
        if data is None:
            return None
        insn = int.from_bytes(data, "little")
        if insn & 0xFC000000 == 0x94000000:  # BL imm26
            imm = insn & 0x03FFFFFF
            offset = (imm - (1 << 26) if imm & (1 << 25) else imm) * 4
            return address - 4, (address - 4 + offset) & ((1 << 64) - 1)
        if insn & 0xFFFFFC1F == 0xD63F0000 or insn & 0xFEFFF800 == 0xD63F0800:  # BLR, BLRA*
            return address - 4, None
        return None
    # x86-64 call encodings are 2 (ff d0) to 7 (ff 14 c5 disp32) bytes long,
    # 5 for the common direct call (e8 rel32): try each length.
    data = ctx.memory.read(address - 7, 7)
    if data is None:
        return None
    cs = _x86_64()
    for length in (5, 2, 3, 6, 7, 4):
        decoded = next(cs.disasm_lite(data[7 - length :], address - length, 1), None)
        if decoded is not None and decoded[1] == length and decoded[2] in _CALL_MNEMONICS:
            target = None
            if data[7 - length] == 0xE8 and length == 5:
                rel = int.from_bytes(data[3:7], "little", signed=True)
                target = (address + rel) & ((1 << 64) - 1)
            return address - length, target
    return None


@lru_cache(maxsize=1)
def _x86_64() -> capstone.Cs:
    # Without operand details: disasm_lite is several times faster, and the
    # direct target of e8 rel32 is computed from the bytes.
    return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def _callee_of(ctx: AnalysisContext, return_address: int, resolver: SymbolResolver) -> Frame | None:
    """The frame of the function a recovered caller had called directly."""
    call = _call_before(ctx, return_address)
    if call is None or call[1] is None or not ctx.executable(call[1]):
        return None
    frame = _frame(resolver, call[1], return_address)
    return frame.model_copy(update={"sp": None})  # its sp is unknown


def _link_register_frame(
    ctx: AnalysisContext, resolver: SymbolResolver, recovered: list[Frame]
) -> list[Frame]:
    """aarch64: after a branch to a bad address the link register (x30) may
    still hold the caller's return address (rust-minidump tries it first too)."""
    lr = ctx.register("x30")
    if lr is None or not ctx.executable(lr) or not _follows_call(ctx, lr):
        return recovered
    if recovered and recovered[0].pc == lr:
        return recovered
    frame = _frame(resolver, lr, ctx.register("sp") or 0)
    return [frame.model_copy(update={"sp": None}), *recovered]


def _base_name(function: str | None) -> str:
    if not function:
        return ""
    return function.split("(", 1)[0].strip()
