"""possible-bit-flip: the fault address (or the pc) is one bit away from an
address that is mapped (for pc: executable), so a single flipped bit in a
pointer, a register or the cache would explain the crash.

The idea and the confidence heuristics follow rust-minidump's bit-flip
detection (minidump-processor ``process_state.rs``, ``BitFlipDetails``),
which Socorro shows for Firefox crashes: start from a low baseline (0.25);
a non-canonical original (only a flip makes it canonical) adds 0.9;
registers within 4 KiB of the candidate add 0.5–0.65 (the program was
working with that neighbourhood); independent evidence is combined as
``1 - Π(1 - p)``; a register holding an allocator poison pattern (0xa5a5…,
0xe5e5…) halves it (a use-after-free explains the address better).
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import stack_overflow_fault
from coreepi.analyze.phenotypes._x86 import is_canonical, memory_operands
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.analyze.phenotypes.null_deref import NULL_PAGE_LIMIT
from coreepi.model.report import Phenotype

BASELINE, NON_CANONICAL = 0.25, 0.9
NEARBY_REGISTER = (0.5, 0.55, 0.6, 0.65)
NEARBY_DISTANCE = 1 << 12
POISON_BYTES = {
    0x2B,
    0x2D,
    0x2F,
    0x49,
    0x4B,
    0x4D,
    0x4F,
    0x6B,
    0x8B,
    0x9B,
    0x9F,
    0xA5,
    0xBB,
    0xCC,
    0xCD,
    0xCE,
    0xDB,
    0xE5,
}
GPRS = (
    "rax",
    "rbx",
    "rcx",
    "rdx",
    "rsi",
    "rdi",
    "rbp",
    "rsp",
    "r8",
    "r9",
    "r10",
    "r11",
    "r12",
    "r13",
    "r14",
    "r15",
)
SI_KERNEL = 0x80
USER_TOP = 1 << 47


def _combine(values: list[float]) -> float:
    product = 1.0
    for v in values:
        product *= 1.0 - v
    return 1.0 - product


@register
class PossibleBitFlip(PhenotypeRule):
    name = "possible-bit-flip"
    hardware_indicative = True
    description = (
        "The unmapped or non-canonical fault address, or the non-executable pc, is one bit "
        "away from a mapped (for pc: executable) address; best candidate and confidence."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or ctx.arch != "x86_64":
            return None
        targets: list[tuple[str, int, bool]] = []  # (what, address, non-canonical)
        pc = ctx.pc
        if pc is not None and pc >= NULL_PAGE_LIMIT and not ctx.executable(pc):
            targets.append(("pc", pc, not is_canonical(pc)))
        if sig.name in ("SIGSEGV", "SIGBUS") and sig.fault_address is not None:
            fault = sig.fault_address
            # A stack overflow lands just below the stack, a low bit away from it.
            overflow = stack_overflow_fault(ctx) is not None
            if fault >= NULL_PAGE_LIMIT and fault != pc and not ctx.mapped(fault) and not overflow:
                targets.append(("fault_address", fault, False))
        elif sig.si_code == SI_KERNEL and sig.name == "SIGSEGV" and pc is not None:
            insn = ctx.raw_instruction(pc)
            for op in memory_operands(ctx, insn) if insn is not None else []:
                if op.address is not None and not is_canonical(op.address):
                    targets.append(("operand_address", op.address, True))
        registers = {n: ctx.register(n) for n in GPRS}
        values = [v for v in registers.values() if v is not None]
        poison = any(
            v == (v & 0xFF) * 0x0101010101010101 and v & 0xFF in POISON_BYTES for v in values
        )
        candidates = []
        for what, address, non_canonical in targets:
            for bit in range(64):
                candidate = address ^ (1 << bit)
                if not NULL_PAGE_LIMIT <= candidate < USER_TOP:
                    continue
                ok = ctx.executable(candidate) if what == "pc" else ctx.mapped(candidate)
                if not ok:
                    continue
                nearby = sorted(
                    n
                    for n, v in registers.items()
                    if v is not None and abs(v - candidate) <= NEARBY_DISTANCE
                )
                parts = [BASELINE] + ([NON_CANONICAL] if non_canonical else [])
                if nearby:
                    parts.append(NEARBY_REGISTER[min(len(nearby), len(NEARBY_REGISTER)) - 1])
                confidence = _combine(parts) * (0.5 if poison else 1.0)
                candidates.append(
                    {
                        "of": what,
                        "observed": f"0x{address:x}",
                        "candidate": f"0x{candidate:x}",
                        "flipped_bit": bit,
                        "candidate_perms": ctx.perms_at(candidate),
                        "nearby_registers": nearby,
                        "was_non_canonical": non_canonical,
                        "confidence": round(confidence, 3),
                    }
                )
        if not candidates:
            return None
        candidates.sort(key=lambda c: (-c["confidence"], c["flipped_bit"]))  # type: ignore[operator]
        best = candidates[0]
        return self.fire(
            confidence=best["confidence"],  # type: ignore[arg-type]
            best=best,
            candidates=candidates,
            poison_registers=poison,
        )
