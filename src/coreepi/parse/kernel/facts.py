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

from coreepi.model.report import Frame
from coreepi.parse.kernel.trace import read_frames

__all__ = ["KernelFacts", "read_facts", "wrap_joiner"]


# Taint letters; RHEL appends a run of dashes (its own support flags), which
# are not letters. The greedy letters stop before a lower-case release.
_TAINT: Final = r"(?:Not tainted|Tainted: ((?:[A-Z] *)+)(?:-{2,})?)"
_CPU_LINE: Final = re.compile(
    r"CPU: (\d+) (?:UID: \d+ )?PID: (\d+) Comm: (.+?)(?: Kdump: loaded)? " + _TAINT
    + r"(?: *(\S+))?(?: +(.*?))?\s*$"
)
# x86 before 2.6.26 and RHEL 6: "Pid: 10729, comm: observer Tainted: G  W  2.6.32-220.el6.x86_64 #1"
_PID_LINE: Final = re.compile(
    r"Pid: (\d+), comm: (.+?) " + _TAINT + r"(?: *(\S+))?(?: +(.*?))?\s*$"
)
_HARDWARE: Final = re.compile(r"Hardware name: (.+?)\s*$")
_MODULES: Final = re.compile(r"Modules linked in:(.*)$")
_MODULE_TOKEN: Final = re.compile(r"([A-Za-z0-9_\-]+)(?:\(([A-Z+\-]+)\))?")
_MODULE_WORD: Final = r"(?:[A-Za-z0-9_\-]+(?:\([A-Z+\-]+\))?|\[last unloaded: [^\]]*\])"
_MODULE_LINE: Final = re.compile(rf"^\s*{_MODULE_WORD}(?:\s+{_MODULE_WORD})*\s*$")
_FAULT_ADDR: Final = re.compile(
    r"(?:paging request at|page fault for address:|NULL pointer dereference at|"
    r"kernel paging request at virtual address|at addr|access at|address|Failing address:) (?:0x)?([0-9a-f]{8,16})\b"
)
_X86_REG: Final = re.compile(r"\b(R[A-Z0-9]{1,2}|EFLAGS|ORIG_RAX|E[A-Z]{2}|CR[0-4]): (?:[0-9a-f]{4}:)?([0-9a-f]{8,16})\b")
_ARM_REG: Final = re.compile(r"(?:^|\s)(x\d{1,2}|sp|pstate|lr|ra|s\d+|t\d|a\d|gp|tp): ?([0-9a-f]{8,16})\b")


def _set_task(facts: KernelFacts, m: re.Match[str]) -> None:
    facts.comm, facts.pid = m.group(1), int(m.group(2))


def _set_taint(facts: KernelFacts, taint: str | None, tainted: bool) -> None:
    if facts.tainted is None:
        facts.tainted = tainted
        facts.taint = "".join((taint or "").split())


def _set_release(facts: KernelFacts, release: str | None) -> None:
    if facts.kernel is None and release:
        facts.kernel = release


def _eip(facts: KernelFacts, m: re.Match[str]) -> None:
    _set_taint(facts, m.group(1), m.group(0).find("Not tainted") < 0)


def _regs(facts: KernelFacts, m: re.Match[str]) -> None:
    _set_taint(facts, m.group(1), "Not tainted" not in m.group(0))
    _set_release(facts, m.group(2))


def _ppc_task(facts: KernelFacts, m: re.Match[str]) -> None:
    facts.pid, facts.comm = int(m.group(1)), m.group(2)
    if facts.cpu is None and m.group(3):
        facts.cpu = int(m.group(3))


def _taint_line(facts: KernelFacts, m: re.Match[str]) -> None:
    _set_taint(facts, m.group(1), "Not tainted" not in m.group(0))
    _set_release(facts, m.group(2))


def _version_line(facts: KernelFacts, m: re.Match[str]) -> None:
    _set_release(facts, m.group(1))
    if m.group(2):
        _set_taint(facts, m.group(3), "Not tainted" not in m.group(2))


# Older and per-architecture places of the same facts, read only when the
# "CPU: … PID: … Comm:" / "Pid: …, comm:" header did not give them:
# (regexp, which fact it fills, how).
_FALLBACKS: Final = (
    # i386: "Process cc1 (pid: 24220, ti=…)"; arm: "Process swapper/3 (pid: 0, stack limit = …)"
    (re.compile(r"Process (.+?) \(pid: (\d+)(?:,|\))"), "pid", _set_task),
    # hung task: "INFO: task khubd:1966 blocked for more than 120 seconds."
    (re.compile(r"INFO: task (.+):(\d+) blocked"), "pid", _set_task),
    # lockdep before 2.6.3x: "umount/12641 is trying to acquire lock:", "swapper/0 [HC0[0]:SC1[1]:HE0:SE0] takes:"
    (re.compile(r"^\s*(\S+)/(\d+) (?:is trying to acquire lock:|\[HC\d+\[\d+\]:SC\d+\[\d+\]:HE\d+:SE\d+\] takes:)"),
     "pid", _set_task),
    # ppc: "TASK = c00000012d9e5a40[7601] 'aio-dio-invalid' THREAD: c0000000e8a00000 CPU: 40"
    (re.compile(r"TASK = [0-9a-f]+\[(\d+)\] '(.*?)' THREAD: [0-9a-f]+(?: CPU: (\d+))?"), "pid", _ppc_task),
    # i386: "EIP:    0060:[<c0145fa0>]    Not tainted VLI" (VLI: the instruction-length marker)
    (re.compile(r"EIP: +[0-9a-f]{4}:\[<[0-9a-f]+>\] +(?:Not tainted|Tainted: ((?:[A-Z] *)+?))\s*(?:VLI)?\s*$"),
     "tainted", _eip),
    # i386: "EFLAGS: 00010282   (2.6.19.1 #1)"
    (re.compile(r"EFLAGS: [0-9a-f]+ +\((\S+?)(?: #[^)]*)?\)"), "kernel",
     lambda facts, m: _set_release(facts, m.group(1))),
    # ppc: "REGS: c0000000e8a03570 TRAP: 0700   Tainted: GF       W     (3.9.0-rc5+)"
    (re.compile(r"REGS: [0-9a-f]+ TRAP: [0-9a-f]+ +" + _TAINT + r" +\((\S+?)\)"), "kernel", _regs),
    # hung task / RCU stall: "      Not tainted 6.12.34-v8-+ #13" on a line of its own
    (re.compile(r"^\s*" + _TAINT + r" +(\S+)(?: +#.*)?\s*$"), "tainted", _taint_line),
    # lockdep: "2.6.19-rc6-mm2 #202", "6.2.0-rc1 #1 Not tainted"
    (re.compile(r"^\s*([0-9]+\.[0-9]+[^\s]*) #\S+(?: +(Not tainted|Tainted: ((?:[A-Z] *)+)))?\s*$"), "kernel",
     _version_line),
)
# Architecture hints, strongest first: register dumps and faulting-pc lines
# name it; the shape of trace frames is a weaker hint used when no register
# line was printed (hung tasks, warnings, pastes). Each hint is a substring
# (a fast scan) and, where the substring is not enough, a regexp that must
# also match.
_ARCH_HINTS: Final[tuple[tuple[str, str, re.Pattern[str] | None], ...]] = (
    ("s390x", "Krnl PSW", None),
    ("s390x", "Krnl GPRS", None),
    ("x86_64", "RIP: ", None),
    ("i386", "EIP: ", None),
    ("i386", "EIP is at ", None),
    ("ppc64", "NIP: ", None),
    ("ppc64", "NIP [", None),
    ("ppc64", "GPR00: ", None),
    ("aarch64", "pstate: ", None),
    ("aarch64", "x29: ", None),
    ("arm", "psr: ", re.compile(r"\bpsr: [0-9a-f]{8}\b")),
    ("riscv64", "epc : ", None),
    ("ppc64", "] .", re.compile(r"\] \.[A-Za-z_][A-Za-z0-9_]*\+0x")),
    ("arm", ") from [<", None),
    ("arm", " from ", re.compile(r"(?m)^[ \t]*[A-Za-z_][A-Za-z0-9_.]*(?: \[[^\]]+\])? from [A-Za-z_][A-Za-z0-9_.]*\+0x")),
    ("x86_64", "[<ffffffff", re.compile(r"\[<ffffffff[0-9a-f]{8}>\]")),  # 64-bit kernel text
    ("x86_64", "arch/x86/", None),
    ("i386", "[<", re.compile(r"\[<[0-9a-f]{8}>\] [A-Za-z_:]")),
    ("aarch64", "Call trace:", None),
)


@dataclass(slots=True)
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


def wrap_joiner(previous_raw: str) -> str:
    """How a line broken by a terminal or mail client joins the next one:
    ``""`` when the physical line is a multiple of 80 columns long (an
    80-column terminal cut it, possibly mid-word), else ``" "`` (a word wrap
    ate the space)."""
    return "" if previous_raw and len(previous_raw) % 80 == 0 else " "


def _splits_name(previous: str, following: str) -> bool:
    """Whether a line break inside ``Modules linked in:`` cut one module
    name in two (untimestamped pastes re-wrapped by a mailer): the first
    part ends or the second starts with ``_``/``-``, the second starts with
    a digit, or the first is a lone fragment on a line of its own."""
    if not previous or previous[-1].isspace() or following[:1].isspace():
        return False
    if wrap_joiner(previous) == "":
        return True
    if previous.endswith(("_", "-")) or following.startswith(("_", "-")) or following[:1].isdigit():
        return True
    return len(previous.split()) == 1 and len(previous) < 40


def _modules(lines: Sequence[str], index: int, first: str, facts: KernelFacts) -> None:
    """``Modules linked in:`` and its continuation lines (a long list is
    continued on lines holding only module names)."""
    text, previous = first, lines[index]
    for line in lines[index + 1: index + 64]:
        if not _MODULE_LINE.match(line):
            break
        text += ("" if _splits_name(previous, line) else " ") + line.strip()
        previous = line
    text = re.sub(r"\[last unloaded: [^\]]*\]", "", text)
    for token in text.split():
        match = _MODULE_TOKEN.fullmatch(token)
        if match is None:
            continue
        name = match.group(1)
        if name not in facts.modules:
            facts.modules.append(name)
        if match.group(2):
            facts.module_flags[name] = match.group(2)


def _header(facts: KernelFacts, m: re.Match[str], cpu: bool) -> None:
    groups = m.groups() if cpu else (None, *m.groups())
    facts.cpu = int(groups[0]) if groups[0] is not None else None
    facts.pid, facts.comm = int(groups[1]), groups[2]
    facts.tainted = groups[3] is not None
    facts.taint = "".join((groups[3] or "").split())
    facts.kernel, facts.build = groups[4], groups[5] or None


def _first_facts(lines: Sequence[str], facts: KernelFacts) -> None:
    header = False
    for i, line in enumerate(lines):
        # substring tests first: a regexp call costs more than most of these lines
        if not header and (m := ("PID: " in line and _CPU_LINE.search(line))
                           or ("Pid: " in line and _PID_LINE.search(line))):
            _header(facts, m, m.re is _CPU_LINE)
            header = True
        elif facts.hardware_name is None and "Hardware name: " in line and (m := _HARDWARE.search(line)):
            facts.hardware_name = m.group(1)
        elif not facts.modules and "Modules linked in:" in line and (m := _MODULES.search(line)):
            _modules(lines, i, m.group(1), facts)
        # every _FAULT_ADDR keyword holds "addr" or " at ": a substring test
        # spares the alternation's scan on most lines
        if facts.fault_address is None and ("addr" in line or " at " in line) and (
                m := _FAULT_ADDR.search(line)):
            facts.fault_address = int(m.group(1), 16)
    if header:
        return
    for line in lines:
        for regexp, fact, fill in _FALLBACKS:
            if getattr(facts, fact) is None and (m := regexp.search(line)) is not None:
                fill(facts, m)


def _arch(text: str) -> str | None:
    for arch, substring, regexp in _ARCH_HINTS:
        if substring in text and (regexp is None or regexp.search(text)):
            return arch
    return None


def _registers(lines: Sequence[str], facts: KernelFacts) -> None:
    # Only the first register dump: later ones belong to other CPUs/tasks.
    started = False
    for line in lines:
        # both need a colon (x86 ": "): most lines are spared the scan
        found = ((": " in line and _X86_REG.findall(line))
                 or (_ARM_REG.findall(line) if ":" in line else []))
        if found:
            started = True
            for name, value in found:
                facts.registers.setdefault(name.lower(), int(value, 16))
        elif started and not line.lstrip().startswith(("Code:", "FS:", "CS:", "DR", "PKRU", "Call", "pc ", "lr ")):
            if len(facts.registers) >= 3:
                break


def read_facts(lines: Sequence[str], prefix: Sequence[str] = ()) -> KernelFacts:
    """Facts from a report's lines (oops line first) and the lines before it.

    Frames carry ``pc=None`` when the kernel printed symbols only (modern
    kernels hash or omit addresses). Trust is ``context`` for the
    faulting-pc frame and ``cfi`` for call-trace frames (the kernel's ORC /
    DWARF-based unwinders; unreliable ``?`` frames are dropped), see
    :mod:`coreepi.parse.kernel.trace`.
    """
    facts = KernelFacts()
    window = list(lines[:400])
    _first_facts(list(prefix) + window, facts)
    facts.arch = _arch("\n".join(window))
    _registers(window, facts)
    facts.frames = read_frames(window)
    return facts
