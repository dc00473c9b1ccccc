"""stack-misaligned: a ``ret`` or an aligned stack access ran with rsp off by 8.

The alignment rule (System V AMD64 psABI, §3.2.2 "The Stack Frame"): "The end
of the input argument area shall be aligned on a 16 (32 or 64, if __m256 or
__m512 is passed on stack) byte boundary. In other words, the stack needs to
be 16 (32 or 64) byte aligned immediately before the call instruction is
executed. Once control has been transferred to the function entry point,
i.e. immediately after the return address has been pushed, %rsp points to
the return address, and the value of (%rsp + 8) is a multiple of 16."

Alignment alone is not proof: GCC calls functions that bind locally and need
no 16-byte alignment with rsp ≡ 8 (mod 16) (seen at -O0 in
tests/crashers/null_deref.c: handle_request calls store_field after
``sub $8,%rsp``), so a ``ret`` in such a callee runs at rsp ≡ 0 legitimately.
The rule therefore fires only on direct evidence that rsp is 8 away from
where the code expected it, and reports the psABI alignment alongside:

``after-ret``
    pc is not executable and was popped by a ``ret`` (the word at sp - 8 is
    pc), and the genuine return address — a code address right after a
    ``call`` — sits 8 bytes away from the popped slot (at sp: rsp was 8 too
    low at the ret; at sp - 16: 8 too high). psABI expectation: the ret ran
    at sp - 8 ≡ 8 (mod 16), so sp ≡ 0 now; with the disease sp ≡ 8.
``ret``
    pc is a ``ret`` that faulted (non-canonical or unreadable target), the
    word at rsp is not a return address but the word at rsp ± 8 is.
    psABI expectation at a ret: rsp ≡ 8 (mod 16).
``aligned-access``
    pc is a 16-byte-aligned SSE access (movaps, movdqa, legacy-SSE arithmetic
    on an m128, VEX vmovaps/vmovdqa) through rsp or rbp that raised #GP
    (SIGSEGV / SI_KERNEL) with the operand ≡ 8 (mod 16): compilers emit
    these only for slots at 16-byte offsets of a stack they know is aligned.

Confidence is 0.9 when the psABI alignment agrees with the off-by-8 reading,
0.6 when it does not (the GCC exception above). Hardware-indicative when
the code is ordinary compiled code: pc in a file-backed module (for
``after-ret``: the whole process) and no anonymous executable memory (JIT,
hand-made trampolines) in the process.

An hs_err log (no memory): rsp is judged at the entry of the problematic
native frame (symbol offset 0), where the psABI wants rsp ≡ 8 (mod 16);
never hardware-indicative, the log cannot exclude JIT code's own stacks.
"""

from __future__ import annotations

from typing import Any

from capstone import x86 as cs_x86

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import top_frame
from coreepi.analyze.phenotypes._stack import call_before, reached_by_ret
from coreepi.analyze.phenotypes._x86 import instruction_evidence, memory_operands
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

SI_KERNEL = 0x80
VSYSCALL = 0xFFFFFFFFFF600000
AGREES, DISAGREES = 0.9, 0.6
#: m128 accesses that do not require alignment (Intel SDM vol. 1 §14.9)
UNALIGNED_OK = {
    "movups", "movupd", "movdqu", "lddqu", "movq", "movd", "movss", "movsd", "movhps",
    "movlps", "movhpd", "movlpd", "maskmovdqu",
}  # fmt: skip
ALIGNED_VEX = {
    "vmovaps",
    "vmovapd",
    "vmovdqa",
    "vmovdqa32",
    "vmovdqa64",
    "vmovntps",
    "vmovntpd",
    "vmovntdq",
}


@register
class StackMisaligned(PhenotypeRule):
    name = "stack-misaligned"
    kinds = frozenset({"native", "jvm"})
    hardware_indicative = True
    description = (
        "A ret (or an aligned SSE stack access) ran with rsp 8 bytes away from the return "
        "address / 16-byte slot the code expected; alignment per SysV psABI §3.2.2."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        if ctx.kind == "jvm":
            return self._from_log(ctx)
        pc, sp = ctx.pc, ctx.sp
        if ctx.arch != "x86_64" or pc is None or sp is None or ctx.report.signal is None:
            return None
        if not ctx.executable(pc):
            slot = reached_by_ret(ctx)
            genuine = self._genuine_return(ctx, slot.address) if slot else None
            if slot is None or genuine is None:
                return None
            return self.fire(
                AGREES if sp % 16 == 8 else DISAGREES,
                hardware_indicative=self._ordinary_process(ctx),
                check="after-ret",
                expected="the ret runs at rsp = sp - 8 ≡ 8 (mod 16), leaving sp ≡ 0 (mod 16)",
                sp=f"0x{sp:x}",
                sp_mod_16=sp % 16,
                **slot.evidence(),
                **genuine,
            )
        insn = ctx.raw_instruction(pc)
        if insn is None:
            return None
        if insn.mnemonic == "ret":
            if self._is_return_address(ctx, sp):
                return None
            genuine = self._genuine_return(ctx, sp)
            if genuine is None:
                return None
            return self.fire(
                AGREES if sp % 16 == 0 else DISAGREES,
                hardware_indicative=self._ordinary_code(ctx, pc),
                check="ret",
                expected="rsp ≡ 8 (mod 16) at a ret, pointing at the return address",
                sp=f"0x{sp:x}",
                sp_mod_16=sp % 16,
                **genuine,
                **instruction_evidence(insn),
            )
        if ctx.report.signal.si_code != SI_KERNEL:
            return None
        for op in memory_operands(ctx, insn):
            if not (set(op.registers) & {"rsp", "rbp"}) or op.address is None:
                continue
            if not _requires_alignment(insn.mnemonic, op.size_bytes) or op.address % 16 != 8:
                continue
            return self.fire(
                AGREES,
                hardware_indicative=self._ordinary_code(ctx, pc),
                check="aligned-access",
                expected=f"{op.expression} ≡ 0 (mod 16) for {insn.mnemonic}",
                operand=op.expression,
                operand_address=f"0x{op.address:x}",
                sp=f"0x{sp:x}",
                sp_mod_16=sp % 16,
                **instruction_evidence(insn),
            )
        return None

    @staticmethod
    def _is_return_address(ctx: AnalysisContext, slot: int) -> bool:
        value = ctx.memory.read_word(slot) if ctx.memory is not None else None
        return value is not None and ctx.executable(value) and call_before(ctx, value) is not None

    def _genuine_return(self, ctx: AnalysisContext, popped: int) -> dict[str, object] | None:
        """The real return address 8 bytes from the slot a ret popped (or
        would pop): above it when rsp was 8 too low, below when 8 too high."""
        assert ctx.memory is not None
        for delta, direction in ((8, "rsp 8 bytes too low"), (-8, "rsp 8 bytes too high")):
            slot = popped + delta
            if self._is_return_address(ctx, slot):
                value = ctx.memory.read_word(slot)
                call = call_before(ctx, value) if value is not None else None
                assert value is not None and call is not None
                if _ordinary_explanation(ctx, delta, value, call[0], popped):
                    continue
                return {
                    "off_by": direction,
                    "genuine_return_slot": f"0x{slot:x}",
                    "genuine_return_address": f"0x{value:x}",
                    "genuine_call": f"0x{call[0]:x}: {call[1]}",
                }
        return None

    @staticmethod
    def _ordinary_code(ctx: AnalysisContext, pc: int) -> bool:
        return ctx.report.module_for(pc) is not None and StackMisaligned._ordinary_process(ctx)

    def _from_log(self, ctx: AnalysisContext) -> Phenotype | None:
        top, rsp = top_frame(ctx), ctx.register("rsp")
        if ctx.report.signal is None or ctx.arch != "x86_64" or top is None or rsp is None:
            return None
        if not top.kind or top.kind not in "CV" or top.symbol_offset != 0 or rsp % 16 == 8:
            return None
        return self.fire(
            hardware_indicative=False,
            rsp=f"0x{rsp:x}",
            rsp_mod_16=rsp % 16,
            function=top.symbol,
            expected="rsp % 16 == 8 at function entry (System V ABI)",
        )

    @staticmethod
    def _ordinary_process(ctx: AnalysisContext) -> bool:
        """No anonymous executable memory (the vDSO and vsyscall page aside)."""
        for m in ctx.report.memory_map:
            anonymous_code = "x" in m.perms and m.path is None and m.start != VSYSCALL
            if anonymous_code and ctx.report.module_for(m.start) is None:  # the vDSO is a module
                return False
        return ctx.report.runtime.kind == "native"


#: how many instructions :func:`_rsp_walk` decodes before giving up
WALK_LIMIT = 256


def _ordinary_explanation(ctx: AnalysisContext, delta: int, value: int, call: int,
                          popped: int) -> bool:
    """Whether ordinary code explains a return address 8 bytes from the
    popped slot with rsp right, so the word proves no off-by-8.

    GCC calls a local function that needs no 16-byte alignment straight from
    its entry, with no push or ``sub`` (``g: call f; ...; ret``). Then:

    * 8 above the popped slot (the "too low" reading) lies g's own return
      address, when f's return address was overwritten (return-to-null in
      -O2 code) -- the call before that word targets such a g. Unless f's
      return address (the one g's ``call f`` pushes) sits 8 *below* the
      popped slot: then g made that call with rsp 8 too low, and its own
      ``ret`` popped the slot (rsp off by 8 in g, as at kvstore's
      ``table_lookup: call table_find``, a one-instruction window of
      ``test_rsp_minus_8_gives_stack_misaligned``);
    * 8 below it (the "too high" reading) lies the stale return address of
      a call that f made from its entry -- the code after that word returns
      (or tail-jumps) without having moved rsp.
    """
    if delta > 0:
        insn = ctx.raw_instruction(call)
        if insn is None or not insn.operands or insn.operands[0].type != cs_x86.X86_OP_IMM:
            return False  # an indirect call: today's registers do not say where it went
        inner = _rsp_walk(ctx, int(insn.operands[0].imm), stop_at_call=True)
        if inner is None or ctx.memory is None:
            return False
        return ctx.memory.read_word(popped - 8) != inner.address + inner.size
    return _rsp_walk(ctx, value, stop_at_call=False) is not None


def _rsp_walk(ctx: AnalysisContext, address: int, *, stop_at_call: bool) -> Any | None:
    """Decode from ``address`` (straight on past conditional jumps, through
    direct ``jmp``s) tracking rsp. The ``call`` reached with rsp unchanged
    (``stop_at_call``) or else the ``ret`` (a capstone instruction); None at
    an rsp change it cannot follow, an indirect jump, a loop, or unknown code."""
    depth, seen = 0, set()
    for _ in range(WALK_LIMIT):
        if address in seen:
            return None  # a loop that never gets there
        seen.add(address)
        insn = ctx.raw_instruction(address)
        if insn is None:
            return None
        m = insn.mnemonic
        if m == "call":
            if stop_at_call and depth == 0:
                return insn
        elif m == "ret":
            return insn if not stop_at_call and depth == 0 else None
        elif m == "jmp":
            # follow a direct jump (inside the function, or a tail call)
            if not insn.operands or insn.operands[0].type != cs_x86.X86_OP_IMM:
                return None
            address = int(insn.operands[0].imm)
            continue
        elif m in ("hlt", "ud2", "int3"):
            return None
        elif m == "push":
            depth -= 8
        elif m == "pop":
            if "rsp" in insn.op_str:
                return None
            depth += 8
        elif m in ("sub", "add") and insn.op_str.startswith("rsp, "):
            try:
                imm = int(insn.op_str[5:], 0)
            except ValueError:
                return None
            depth += imm if m == "add" else -imm
        elif "rsp" in insn.op_str.split(",")[0] or m in ("leave", "enter"):
            if not (m == "cmp" or m == "test" or "[" in insn.op_str.split(",")[0]):
                return None  # rsp written some other way: a frame we cannot follow
        address += insn.size
    return None


def _requires_alignment(mnemonic: str, size: int) -> bool:
    if mnemonic in ALIGNED_VEX:
        return True
    # Legacy-SSE (non-VEX) instructions with a 16-byte memory operand fault
    # on a misaligned one unless they are explicitly unaligned forms.
    return size == 16 and not mnemonic.startswith("v") and mnemonic not in UNALIGNED_OK
