"""What an analysis rule sees: the crash report, its kind, the process
memory, the phenotypes fired so far, and helpers every rule needs (registers
of the crashing thread, mappings, instruction decoding with capstone)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, Literal, Protocol

import capstone

from coreepi.model.report import CrashReport, Phenotype, Source, Thread

__all__ = ["KINDS", "AnalysisContext", "Instruction", "Kind", "Memory", "RegionLike", "kind_of"]

#: The artifact kinds analysis tells apart: each has its own phenotype rules
#: and signature rule list (``native``: ELF cores, systemd-coredump, minidumps;
#: ``jvm``: hs_err logs; ``kernel``: kernel oops / panic reports).
Kind = Literal["native", "jvm", "kernel"]
KINDS: Final[frozenset[Kind]] = frozenset({"native", "jvm", "kernel"})
_KIND_OF_SOURCE: Final[dict[Source, Kind]] = {Source.HS_ERR: "jvm", Source.KERNEL_OOPS: "kernel"}

PC = {"x86_64": "rip", "aarch64": "pc"}
SP = {"x86_64": "rsp", "aarch64": "sp"}
MAX_INSN_BYTES = 16  # longest x86 instruction is 15 bytes


class RegionLike(Protocol):
    start: int
    end: int
    perms: str
    path: str | None


class Memory(Protocol):
    """Read-only process memory (``coreepi.parse.elf.memory.ProcessMemory`` is one)."""

    arch: str
    regions: list[RegionLike]

    def read(self, address: int, size: int) -> bytes | None:
        """``size`` bytes at ``address``; None when any of them is unreadable."""
        ...

    def read_word(self, address: int) -> int | None:
        """The pointer-sized little-endian word at ``address``, or None."""
        ...

    def region_for(self, address: int) -> RegionLike | None:
        """The mapping holding ``address``, or None."""
        ...

    def is_executable(self, address: int) -> bool:
        """Whether ``address`` is in an executable mapping."""
        ...


@dataclass(frozen=True, slots=True)
class Instruction:
    address: int
    size: int
    mnemonic: str
    op_str: str
    bytes: bytes
    groups: tuple[str, ...] = field(default=())


def kind_of(report: CrashReport) -> Kind:
    """The artifact kind of ``report``, from its ``source``."""
    return _KIND_OF_SOURCE.get(report.source, "native")


@dataclass
class AnalysisContext:
    """Input of every analysis rule. ``memory`` is None when the report came
    without its core (a log, an uploaded report): memory-based rules then
    do not fire. ``fired``: the phenotypes fired so far in this analysis, in
    rule order (the pipeline stores them in ``report.phenotypes`` at the
    end). ``shared``: values several rules compute from the same report,
    kept for the length of one analysis (e.g. the CEL variables)."""

    report: CrashReport
    memory: Memory | None = None
    fired: list[Phenotype] = field(default_factory=list)
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> Kind:
        """``native``, ``jvm`` or ``kernel`` (see :data:`KINDS`)."""
        return kind_of(self.report)

    @property
    def arch(self) -> str:
        """The report's arch (``x86_64``, ``aarch64`` …), "" when unknown."""
        return self.report.arch or ""

    @cached_property
    def thread(self) -> Thread | None:
        """The crashing thread."""
        return self.report.crashed_thread

    def register(self, name: str) -> int | None:
        """Register ``name`` (``rip``, ``x0`` …) of the crashing thread, or None."""
        thread = self.thread
        return None if thread is None else thread.registers.get(name)

    @property
    def pc(self) -> int | None:
        """The crashing thread's pc register (``rip`` / ``pc``), or None."""
        return self.register(PC.get(self.arch, "pc"))

    @property
    def sp(self) -> int | None:
        """The crashing thread's stack pointer (``rsp`` / ``sp``), or None."""
        return self.register(SP.get(self.arch, "sp"))

    def mapped(self, address: int) -> bool:
        """Whether ``address`` is inside any mapping of the process."""
        if self.memory is not None:
            return self.memory.region_for(address) is not None
        return any(m.start <= address < m.end for m in self.report.memory_map)

    def perms_at(self, address: int) -> str | None:
        """'r-x' etc. of the mapping holding ``address``; None if unmapped."""
        if self.memory is not None:
            region = self.memory.region_for(address)
            return region.perms if region else None
        m = next((m for m in self.report.memory_map if m.start <= address < m.end), None)
        return m.perms if m else None

    def executable(self, address: int) -> bool:
        """Whether the mapping holding ``address`` is executable."""
        perms = self.perms_at(address)
        return perms is not None and "x" in perms

    def read_c_string(self, address: int, limit: int = 4096) -> bytes | None:
        """The NUL-terminated bytes at ``address`` (without the NUL), at most
        ``limit`` bytes; None when unreadable or unterminated within ``limit``."""
        if self.memory is None:
            return None
        out = b""
        chunk = 64
        while len(out) < limit:
            data = self.memory.read(address + len(out), chunk)
            if data is None:
                if chunk == 1:
                    return None
                chunk = 1  # near the end of a mapping: go byte by byte
                continue
            nul = data.find(b"\0")
            if nul >= 0:
                out += data[:nul]
                return out if len(out) <= limit else None
            out += data
        return None

    @cached_property
    def _disassembler(self) -> capstone.Cs | None:
        if self.arch == "x86_64":
            cs = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        elif self.arch == "aarch64":
            cs = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
        else:
            return None
        cs.detail = True
        return cs

    def decode(self, address: int) -> Instruction | None:
        """The instruction at ``address``, or None when its bytes are unknown
        or do not decode."""
        if self.memory is None or self._disassembler is None:
            return None
        data = self.memory.read(address, MAX_INSN_BYTES)
        if data is None:
            # Near the end of a mapping: retry with what is readable.
            for size in (8, 4, 2, 1):
                data = self.memory.read(address, size)
                if data is not None:
                    break
        if not data:
            return None
        for insn in self._disassembler.disasm(data, address, count=1):
            groups = tuple(insn.group_name(g) for g in insn.groups)
            return Instruction(address, insn.size, insn.mnemonic, insn.op_str, bytes(insn.bytes), groups)
        return None

    def raw_instruction(self, address: int) -> capstone.CsInsn | None:
        """capstone's own instruction object (with operand details)."""
        if self.memory is None or self._disassembler is None:
            return None
        data = self.memory.read(address, MAX_INSN_BYTES) or self.memory.read(address, 4)
        if not data:
            return None
        return next(iter(self._disassembler.disasm(data, address, count=1)), None)
