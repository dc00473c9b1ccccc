"""x86-64 instruction facts the rules share: register values by any alias,
memory operand addresses computed from the registers, indirect branch
targets, canonical addresses.

Addresses follow the Intel SDM vol. 1 §3.7.5 (effective address = base +
index * scale + displacement, plus the segment base for fs/gs) and §3.3.7.1
(canonical addressing: with 48-bit linear addresses, bits 63..47 must all be
equal).
"""

from __future__ import annotations

from dataclasses import dataclass

import capstone
from capstone import x86 as cs_x86

from coreepi.analyze.context import AnalysisContext

__all__ = [
    "BranchTarget",
    "MemoryOperand",
    "branch_target",
    "instruction_evidence",
    "is_canonical",
    "memory_operands",
    "register_value",
]

_U64 = (1 << 64) - 1

# 32/16/8-bit names of the general-purpose registers -> their 64-bit register.
_ALIASES: dict[str, str] = {}
for _r in ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp"):
    _ALIASES[f"e{_r}"] = _ALIASES[_r] = f"r{_r}"
for _r in ("a", "b", "c", "d"):
    _ALIASES[f"{_r}l"] = _ALIASES[f"{_r}h"] = f"r{_r}x"
for _r in ("si", "di", "bp", "sp"):
    _ALIASES[f"{_r}l"] = f"r{_r}"
for _n in range(8, 16):
    for _suffix in ("d", "w", "b"):
        _ALIASES[f"r{_n}{_suffix}"] = f"r{_n}"
_WIDTH = {"d": 32, "w": 16, "b": 8, "l": 8, "h": 8}


def register_value(
    ctx: AnalysisContext, name: str, insn: capstone.CsInsn | None = None
) -> int | None:
    """Value of a register named as capstone names it (``rax``, ``eax``, ``r8d``,
    ``ah``, ``rip``), from the crashing thread's registers. ``rip`` is the
    address of the next instruction when ``insn`` is given (RIP-relative
    addressing, Intel SDM vol. 2 §2.2.1.6)."""
    if name == "rip":
        return None if insn is None else insn.address + insn.size
    if name in ("fs", "gs"):
        return ctx.register(f"{name}_base")
    if name in ("cs", "ds", "es", "ss"):
        return 0  # flat segments in 64-bit mode
    full = _ALIASES.get(name, name)
    value = ctx.register(full)
    if value is None or full == name:
        return value
    if name.endswith("h") and len(name) == 2:
        return (value >> 8) & 0xFF
    if name.startswith("e"):
        bits = 32
    elif name.startswith("r"):
        bits = _WIDTH[name[-1]]
    else:
        bits = 8 if name.endswith("l") else 16
    return value & ((1 << bits) - 1)


def is_canonical(address: int, va_bits: int = 48) -> bool:
    """True when bits 63..(va_bits-1) are all 0 or all 1 (4-level paging: 48)."""
    top = address >> (va_bits - 1)
    return top == 0 or top == (1 << (65 - va_bits)) - 1


@dataclass(frozen=True, slots=True)
class MemoryOperand:
    """One memory operand of an instruction and the address it computes to."""

    expression: str  # e.g. "[rax + 0x10]"
    address: int | None  # None when a register it needs is unknown
    size_bytes: int
    registers: dict[str, int]  # the register values used, by capstone name
    read: bool
    write: bool

    def evidence(self) -> dict[str, object]:
        """These facts as phenotype evidence (addresses as ``0x…`` strings)."""
        return {
            "expression": self.expression,
            "address": None if self.address is None else f"0x{self.address:x}",
            "size_bytes": self.size_bytes,
            "registers": {k: f"0x{v:x}" for k, v in self.registers.items()},
            "access": ("r" if self.read else "") + ("w" if self.write else ""),
        }


def memory_operands(ctx: AnalysisContext, insn: capstone.CsInsn) -> list[MemoryOperand]:
    """The explicit memory operands of ``insn`` with their effective addresses."""
    out = []
    for op in insn.operands:
        if op.type != cs_x86.X86_OP_MEM:
            continue
        mem = op.mem
        parts: list[str] = []
        used: dict[str, int] = {}
        address: int | None = mem.disp
        for reg, scale in ((mem.base, 1), (mem.index, mem.scale)):
            if not reg:
                continue
            name = insn.reg_name(reg)
            value = register_value(ctx, name, insn)
            parts.append(name if scale == 1 else f"{name}*{scale}")
            if value is None:
                address = None
                continue
            used[name] = value
            if address is not None:
                address += value * scale
        if mem.segment:
            seg = insn.reg_name(mem.segment)
            base = register_value(ctx, seg)
            if seg in ("fs", "gs"):
                parts.insert(0, f"{seg}:")
                if base is None:
                    address = None
                else:
                    used[f"{seg}_base"] = base
                    if address is not None:
                        address += base
        if mem.disp or not parts:
            parts.append(f"{mem.disp:#x}" if mem.disp >= 0 else f"-{-mem.disp:#x}")
        expression = "[" + " + ".join(parts).replace(": + ", ":").replace("+ -", "- ") + "]"
        out.append(
            MemoryOperand(
                expression=expression,
                address=None if address is None else address & _U64,
                size_bytes=op.size,
                registers=used,
                read=bool(op.access & capstone.CS_AC_READ),
                write=bool(op.access & capstone.CS_AC_WRITE),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class BranchTarget:
    """Where an indirect ``call``/``jmp`` goes: ``expression`` is its operand
    (``rdx``, ``[rax + 0x8]``), ``target`` the address it would jump to,
    ``slot`` the memory word the target was read from (None for a register),
    ``registers`` the register values used (by capstone name)."""

    expression: str
    target: int
    slot: int | None
    registers: dict[str, int]


_INDIRECT_BRANCHES = frozenset({"call", "jmp"})


def branch_target(ctx: AnalysisContext, insn: capstone.CsInsn) -> BranchTarget | None:
    """The target of an indirect near ``call``/``jmp`` (through a register or a
    memory word), computed from the crashing thread's registers and memory;
    None for other instructions, direct branches, or when a register or the
    memory word is unknown."""
    if insn.mnemonic not in _INDIRECT_BRANCHES or len(insn.operands) != 1:
        return None
    op = insn.operands[0]
    if op.type == cs_x86.X86_OP_REG:
        name = insn.reg_name(op.reg)
        value = register_value(ctx, name, insn)
        if value is None:
            return None
        return BranchTarget(name, value, None, {name: value})
    if op.type != cs_x86.X86_OP_MEM or ctx.memory is None:
        return None
    (operand,) = memory_operands(ctx, insn)
    if operand.address is None:
        return None
    word = ctx.memory.read_word(operand.address)
    if word is None:
        return None
    return BranchTarget(operand.expression, word, operand.address, operand.registers)


def instruction_evidence(insn: capstone.CsInsn) -> dict[str, str]:
    """The decoded instruction as evidence: address, Intel-syntax text, bytes."""
    return {
        "instruction_address": f"0x{insn.address:x}",
        "instruction": f"{insn.mnemonic} {insn.op_str}".strip(),
        "instruction_bytes": bytes(insn.bytes).hex(),
    }
