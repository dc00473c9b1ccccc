"""Stack facts the rules share: the crashing thread's stack mapping, how a pc
was reached (by a ``ret`` or by a ``call``), and the words of the stack.

x86-64 only where it says so: a ``call`` pushes the return address and a
``ret`` pops it (Intel SDM vol. 2, CALL and RET).
"""

from __future__ import annotations

from dataclasses import dataclass

from capstone import x86 as cs_x86

from coreepi.analyze.context import AnalysisContext, RegionLike
from coreepi.analyze.phenotypes._x86 import memory_operands, register_value

__all__ = [
    "NEAR_SP_BYTES",
    "STACK_GUARD_GAP",
    "ReturnSlot",
    "call_before",
    "reached_by_ret",
    "stack_overflow_fault",
    "stack_region",
    "stack_words",
]

#: Linux keeps this much unmapped space below a growable stack (the
#: ``stack_guard_gap`` boot parameter, 256 pages by default since 4.12,
#: mm/mmap.c); glibc puts a PROT_NONE guard of at least a page below each
#: thread stack (nptl/allocatestack.c).
STACK_GUARD_GAP = 256 * 4096
CALL_LENGTHS = (5, 2, 3, 6, 7, 4)  # e8 rel32 first, then ff /2 forms


def stack_region(ctx: AnalysisContext) -> RegionLike | None:
    """The writable mapping holding sp; when sp itself is not in one (it ran
    into a guard page or below the stack), the lowest writable mapping that
    starts above sp within :data:`STACK_GUARD_GAP`."""
    sp = ctx.sp
    if sp is None or ctx.memory is None:
        return None
    region = ctx.memory.region_for(sp)
    if region is not None and "w" in region.perms:
        return region
    above = [
        r for r in ctx.memory.regions if sp < r.start <= sp + STACK_GUARD_GAP and "w" in r.perms
    ]
    return min(above, key=lambda r: r.start) if above else None


def stack_words(ctx: AnalysisContext, limit_bytes: int) -> list[tuple[int, int]]:
    """(address, value) of the 8-byte words from sp upward, at most
    ``limit_bytes`` and never past the end of the stack mapping."""
    sp, region = ctx.sp, stack_region(ctx)
    if sp is None or region is None or ctx.memory is None or not region.start <= sp < region.end:
        return []
    size = min(limit_bytes, region.end - sp) & ~7
    data = ctx.memory.read(sp, size)
    if data is None:
        return []
    return [(sp + i, int.from_bytes(data[i : i + 8], "little")) for i in range(0, size, 8)]


def call_before(ctx: AnalysisContext, return_address: int) -> tuple[int, str] | None:
    """(address, text) of the ``call`` instruction ending exactly at
    ``return_address``, or None when no call ends there."""
    for length in CALL_LENGTHS:
        insn = ctx.raw_instruction(return_address - length)
        if insn is not None and insn.size == length and insn.mnemonic == "call":
            return insn.address, f"{insn.mnemonic} {insn.op_str}"
    return None


def _call_target(ctx: AnalysisContext, call_address: int) -> int | None:
    """Where the call at ``call_address`` went, computed from the registers
    (which a call leaves untouched except rsp and rip)."""
    insn = ctx.raw_instruction(call_address)
    if insn is None or not insn.operands:
        return None
    op = insn.operands[0]
    if op.type == cs_x86.X86_OP_IMM:  # direct call
        return int(op.imm)
    if op.type == cs_x86.X86_OP_REG:
        return register_value(ctx, insn.reg_name(op.reg), insn)
    mems = memory_operands(ctx, insn)
    if mems and mems[0].address is not None and ctx.memory is not None:
        # the call pushed 8 bytes since: an rsp-based operand is now 8 lower
        address = mems[0].address + (8 if "rsp" in mems[0].registers else 0)
        return ctx.memory.read_word(address)
    return None


@dataclass(frozen=True, slots=True)
class ReturnSlot:
    """Evidence that pc was popped by a ``ret``: the word just below sp."""

    address: int  # sp - 8
    value: int  # == pc

    def evidence(self) -> dict[str, str]:
        """These facts as phenotype evidence (addresses as ``0x…`` strings)."""
        return {"return_slot": f"0x{self.address:x}", "return_slot_value": f"0x{self.value:x}"}


def reached_by_ret(ctx: AnalysisContext) -> ReturnSlot | None:
    """A ``ret`` leaves sp just above the slot it popped pc from: the word at
    sp - 8 equals pc. A call through a pointer to pc would instead leave a
    return address at sp, right after a call whose target is pc; that
    reading is preferred when it holds (the slot below sp is then stale)."""
    pc, sp, mem = ctx.pc, ctx.sp, ctx.memory
    if pc is None or sp is None or mem is None or ctx.arch != "x86_64":
        return None
    if mem.read_word(sp - 8) != pc:
        return None
    ret_addr = mem.read_word(sp)
    if ret_addr is not None and ctx.executable(ret_addr):
        call = call_before(ctx, ret_addr)
        if call is not None and _call_target(ctx, call[0]) == pc:
            return None
    return ReturnSlot(sp - 8, pc)


#: how far from sp a stack-overflow fault may land: a function's frame
#: (GCC probes every 4 KiB with -fstack-clash-protection; 64 KiB is generous)
NEAR_SP_BYTES = 64 * 1024


def stack_overflow_fault(ctx: AnalysisContext) -> dict[str, object] | None:
    """Evidence that the fault address is in the crashing thread's stack
    guard (a PROT_NONE page just below the stack) or in the guard gap below
    its stack mapping, close to sp; None otherwise."""
    sig = ctx.report.signal
    if sig is None or sig.name not in ("SIGSEGV", "SIGBUS") or sig.fault_address is None:
        return None
    fault, sp, region = sig.fault_address, ctx.sp, stack_region(ctx)
    if sp is None or region is None or ctx.memory is None:
        return None
    if not region.start - STACK_GUARD_GAP <= fault < region.start:
        return None
    if abs(fault - sp) > NEAR_SP_BYTES:
        return None
    guard = ctx.memory.region_for(fault)
    return {
        "fault_address": f"0x{fault:x}",
        "sp": f"0x{sp:x}",
        "stack_mapping": f"0x{region.start:x}-0x{region.end:x}",
        "bytes_below_stack": region.start - fault,
        "guard": "guard-page" if guard is not None else "guard-gap",
        "guard_mapping": None
        if guard is None
        else f"0x{guard.start:x}-0x{guard.end:x} {guard.perms}",
    }
