"""Facts printed in a kernel crash report: who crashed, where, on what.

Reads the standard lines the kernel's ``dump_stack()`` / ``show_regs()``
print (see ``lib/dump_stack.c``, ``kernel/panic.c``, ``arch/*/kernel/
process.c`` in the Linux sources)::

    CPU: 1 UID: 0 PID: 4070 Comm: syz-executor Tainted: G    B   W  6.8.0 #33
    Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.3 04/01/2014
    Modules linked in: nvidia(POE) nf_tables
    RIP: 0010:__memset+0x24/0x30
    RAX: 0000000000000000 RBX: ffff88801d0a8000 ...
    Call Trace:
     <TASK>
     ext4_fill_super+0x1a2/0x3c0 fs/ext4/super.c:5012
     __dump_stack lib/dump_stack.c:94 [inline]
     [<ffffffff81234567>] vfs_read+0x12/0x40 [ext4]

and turns them into :class:`KernelFacts`. Taint letters follow
``Documentation/admin-guide/tainted-kernels.rst``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from coreepi.model.report import Frame, FrameTrust
from coreepi.parse.demangle import demangle_function

__all__ = ["KernelFacts", "TAINT_FLAGS", "read_facts"]

# Taint letter -> meaning (kernel/panic.c taint_flags[]).
TAINT_FLAGS: Final = {
    "P": "proprietary module loaded", "F": "module force-loaded", "S": "SMP on unsafe CPU",
    "R": "module force-unloaded", "M": "machine check exception", "B": "bad page referenced",
    "U": "user request", "D": "kernel died recently (oops)", "A": "ACPI table overridden",
    "W": "warning issued", "C": "staging driver loaded", "I": "firmware bug workaround",
    "O": "out-of-tree module loaded", "E": "unsigned module loaded", "L": "soft lockup occurred",
    "K": "kernel live-patched", "X": "auxiliary taint", "T": "built with struct randomization",
    "N": "test module loaded", "J": "fwctl used",
}
OUT_OF_TREE_TAINTS: Final = frozenset("POE")

_CPU_LINE: Final = re.compile(
    r"CPU: (\d+) (?:UID: \d+ )?PID: (\d+) Comm: (.+?) (?:Not tainted|Tainted: ((?:[A-Z] *)+))"
    r" *(\S+)?(?: (#\S+.*))?$"
)
_HARDWARE: Final = re.compile(r"Hardware name: (.+?)\s*$")
_MODULES: Final = re.compile(r"Modules linked in:(.*)$")
_FAULT_ADDR: Final = re.compile(
    r"(?:paging request at|page fault for address:|NULL pointer dereference at|"
    r"kernel paging request at virtual address|at addr|access at|address) (?:0x)?([0-9a-f]{8,16})\b"
)
_X86_REG: Final = re.compile(r"\b(R[A-Z0-9]{1,2}|EFLAGS|ORIG_RAX|E[A-Z]{2}|CR[0-4]): (?:[0-9a-f]{4}:)?([0-9a-f]{8,16})\b")
_ARM_REG: Final = re.compile(r"(?:^|\s)(x\d{1,2}|sp|pstate|lr|ra|s\d+|t\d|a\d|gp|tp): ?([0-9a-f]{8,16})\b")
_RIP: Final = re.compile(
    r"^(?:RIP|EIP|IP|NIP|pc|PC is at|epc) *:? ?(?:[0-9a-f]{4}:)?(?:\[<?([0-9a-f]+)>?\] +){0,2}"
    r"([A-Za-z_][A-Za-z0-9_.]*)\+0x([0-9a-f]+)/0x[0-9a-f]+(?: \[([A-Za-z0-9_\-]+)[^\]]*\])?"
)
_FRAME: Final = re.compile(
    r"^\s*(?:\[<?(?:0x)?([0-9a-f]+)>?\] ?){0,2}\s*\(?([A-Za-z_][A-Za-z0-9_.$]*)\+0x([0-9a-f]+)/0x[0-9a-f]+"
    r"(?: \[([A-Za-z0-9_\-]+)[^\]]*\])?\)?(?: ([A-Za-z0-9_\-./]+\.[A-Za-z]+):(\d+))?"
)
_INLINE: Final = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*) ([A-Za-z0-9_\-./]+\.[A-Za-z]+):(\d+) \[inline\]")
_TRACE_START: Final = re.compile(r"Call (?:T|t)race:|Backtrace:|^\s*backtrace(?: \(crc [0-9a-f]+\))?:")
_TRACE_MARKER: Final = re.compile(r"^\s*(?:</?(?:IRQ|TASK|NMI|EOI|SOFTIRQ)>|Exception stack.*|---\[ .* \]---)\s*$")
_ARCH_HINTS: Final = (
    ("RIP: ", "x86_64"), ("EIP: ", "i386"), ("NIP: ", "ppc64"), ("epc : ", "riscv64"),
    ("pstate: ", "aarch64"), ("PC is at ", "arm"),
)
MAX_FRAMES: Final = 256


@dataclass
class KernelFacts:
    """What one report says about the crashed task and the machine."""

    cpu: int | None = None
    pid: int | None = None
    comm: str | None = None
    tainted: bool | None = None
    taint: str = ""  # the letters, e.g. "GBW"
    kernel: str | None = None
    build: str | None = None  # "#33 SMP PREEMPT ..." after the release
    hardware_name: str | None = None
    modules: list[str] = field(default_factory=list)
    module_flags: dict[str, str] = field(default_factory=dict)
    fault_address: int | None = None
    arch: str | None = None
    registers: dict[str, int] = field(default_factory=dict)
    frames: list[Frame] = field(default_factory=list)


def _parse_modules(text: str, facts: KernelFacts) -> None:
    text = re.sub(r"\[last unloaded: [^\]]*\]", "", text)
    for token in text.split():
        match = re.fullmatch(r"([A-Za-z0-9_\-]+)(?:\(([A-Z+\-]+)\))?", token)
        if match is None:
            continue
        name = match.group(1)
        if name not in facts.modules:
            facts.modules.append(name)
        if match.group(2):
            facts.module_flags[name] = match.group(2)


def _first_facts(lines: Sequence[str], facts: KernelFacts) -> None:
    for line in lines:
        if facts.pid is None and (m := _CPU_LINE.search(line)):
            facts.cpu, facts.pid, facts.comm = int(m.group(1)), int(m.group(2)), m.group(3)
            facts.tainted = m.group(4) is not None
            facts.taint = "".join((m.group(4) or "").split())
            facts.kernel = m.group(5)
            facts.build = m.group(6)
        elif facts.hardware_name is None and (m := _HARDWARE.search(line)):
            facts.hardware_name = m.group(1)
        elif not facts.modules and (m := _MODULES.search(line)):
            _parse_modules(m.group(1), facts)
        if facts.fault_address is None and (m := _FAULT_ADDR.search(line)):
            facts.fault_address = int(m.group(1), 16)
        if facts.arch is None:
            for hint, arch in _ARCH_HINTS:
                if line.startswith(hint) or f" {hint}" in line[:12]:
                    facts.arch = arch
                    break


def _registers(lines: Sequence[str], facts: KernelFacts) -> None:
    # Only the first register dump: later ones belong to other CPUs/tasks.
    started = False
    for line in lines:
        found = _X86_REG.findall(line) or (_ARM_REG.findall(line) if ":" in line else [])
        if found:
            started = True
            for name, value in found:
                facts.registers.setdefault(name.lower(), int(value, 16))
        elif started and not line.startswith(("Code:", "FS:", "CS:", "DR", "PKRU", "Call", "pc ", "lr ")):
            if len(facts.registers) >= 3:
                break


def _frame_from(match: re.Match[str], index: int, trust: FrameTrust) -> Frame:
    pc, function, offset, module = match.group(1), match.group(2), match.group(3), match.group(4)
    file = line = None
    if match.re is _FRAME and match.group(5):
        file, line = match.group(5), int(match.group(6))
    return Frame(
        index=index, pc=int(pc, 16) if pc else None, module=module, function=demangle_function(function),
        function_offset=int(offset, 16), file=file, line=line, trust=trust,
    )


def _frames(lines: Sequence[str], facts: KernelFacts) -> None:
    """Frame 0 from the faulting-pc line, then the first call trace."""
    start = 0
    for i, line in enumerate(lines):
        if i > 0 and (m := _RIP.match(line)) and not facts.frames:
            facts.frames.append(_frame_from(m, 0, FrameTrust.CONTEXT))
        if i > 0 and _TRACE_START.search(line):
            start = i + 1
            break
    else:
        # No trace keyword (KMSAN prints frames right after the title).
        start = 1
    in_trace = False
    for line in lines[start:]:
        if len(facts.frames) >= MAX_FRAMES:
            break
        if (m := _INLINE.match(line)) is not None:
            facts.frames.append(Frame(index=len(facts.frames), pc=None, function=m.group(1), file=m.group(2),
                                      line=int(m.group(3)), inlined=True, trust=FrameTrust.CFI))
            in_trace = True
        elif (m := _FRAME.match(line)) is not None:
            facts.frames.append(_frame_from(m, len(facts.frames), FrameTrust.CFI))
            in_trace = True
        elif _TRACE_MARKER.match(line) or (not in_trace and not line.strip()):
            continue
        elif in_trace:
            break


def read_facts(lines: Sequence[str], prefix: Sequence[str] = ()) -> KernelFacts:
    """Facts from a report's lines (oops line first) and the lines before it.

    Frames carry ``pc=None`` when the kernel printed symbols only (modern
    kernels hash or omit addresses): the model requires a pc. Trust is
    ``context`` for the faulting-pc frame and ``cfi`` for call-trace frames
    (the kernel's ORC / DWARF-based unwinders; unreliable ``?`` frames are
    dropped before this point).
    """
    facts = KernelFacts()
    window = list(lines[:400])
    _first_facts(list(prefix) + window, facts)
    _registers(window, facts)
    _frames(window, facts)
    return facts
