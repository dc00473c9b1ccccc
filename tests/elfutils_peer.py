"""elfutils as a peer: run Debian's ``eu-readelf``, ``eu-unstrip`` and
``eu-stack`` on a core and parse what they print, so tests can compare coreepi
with an independent implementation on the same file.

Parsers follow the output of elfutils 0.188 (``src/readelf.c``,
``src/unstrip.c``, ``src/stack.c``); anything they do not recognise is left
out rather than guessed at, and the tests compare exact values.

* ``eu-readelf -n CORE``: notes. PRSTATUS registers are printed some in
  decimal (signed: ``rcx: -1``) and some in hex (``rip: 0x…``); every value is
  returned as the unsigned 64-bit integer it stands for.
* ``eu-unstrip -n --core CORE [-e EXE]``: one line per module,
  ``START+SIZE BUILDID@ADDR FILE DEBUGFILE NAME``.
* ``eu-stack -b -m -i -s --core CORE [-e EXE]``: frames per thread, with
  build-id, ``module-start+offset`` (of the *adjusted* pc: pc - 1 for a
  caller frame) and source line.
* ``eu-readelf --debug-dump=frames FILE``: the FDE address ranges
  (``.eh_frame`` and ``.debug_frame``), an independent answer to "does this pc
  have CFI?".
* ``eu-readelf -s FILE``: the symbol tables.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "TOOLS",
    "FdeRanges",
    "NoteThread",
    "Notes",
    "StackFrame",
    "StackOutput",
    "StackThread",
    "Symbol",
    "UnstripModule",
    "missing_tools",
    "readelf_fde_ranges",
    "readelf_notes",
    "readelf_symbols",
    "stack",
    "unstrip_modules",
]

TOOLS = ("eu-readelf", "eu-unstrip", "eu-stack")
U64 = (1 << 64) - 1
TIMEOUT = 60

# eu-readelf's register names -> coreepi's (kernel user_regs_struct) names.
REGISTER_NAMES = {"rflags": "eflags", "fs.base": "fs_base", "gs.base": "gs_base"}
# PRSTATUS fields that are not registers (on the lines eu-readelf prints them on).
_PRSTATUS_FIELDS = {
    "info.si_signo", "info.si_code", "info.si_errno", "cursig", "pid", "ppid", "pgrp",
    "sid", "fpvalid",
}  # fmt: skip

_INT = r"-?(?:0x[0-9a-fA-F]+|\d+)"
_PAIR = re.compile(rf"([A-Za-z_][\w.]*):\s+({_INT})(?=,|\s|$)")
_NOTE_HEADER = re.compile(r"^  (\S+)\s+(\d+)\s+(\S.*?)\s*$")


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run an elfutils tool in the C locale (stable messages)."""
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        cwd=cwd,
        timeout=TIMEOUT,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    )


def _int(text: str) -> int:
    """A value as eu-readelf prints it (hex, or signed decimal), as unsigned 64-bit."""
    value = int(text, 16) if text.lstrip("-").startswith("0x") else int(text, 10)
    return value & U64


# -- eu-readelf -n -------------------------------------------------------------


@dataclass
class NoteThread:
    """One NT_PRSTATUS as eu-readelf prints it."""

    tid: int  # printed as "pid"
    ppid: int
    pgrp: int
    sid: int
    cursig: int
    registers: dict[str, int] = field(default_factory=dict)  # coreepi's names


@dataclass
class Notes:
    threads: list[NoteThread] = field(default_factory=list)
    prpsinfo: dict[str, int | str] = field(default_factory=dict)
    siginfo: dict[str, int] = field(default_factory=dict)
    auxv: list[tuple[str, int]] = field(default_factory=list)
    # NT_FILE: (start, end, file offset in bytes, size, path)
    files: list[tuple[int, int, int, int, str]] = field(default_factory=list)
    note_types: list[tuple[str, str]] = field(default_factory=list)  # (owner, type)


def readelf_notes(core: Path) -> Notes:
    """``eu-readelf -n CORE``, parsed."""
    proc = _run(["eu-readelf", "-n", str(core)])
    if proc.returncode != 0:
        raise RuntimeError(f"eu-readelf -n {core} failed: {proc.stderr.strip()}")
    return parse_readelf_notes(proc.stdout)


def parse_readelf_notes(text: str) -> Notes:
    notes = Notes()
    kind: str | None = None
    for line in text.splitlines():
        header = _NOTE_HEADER.match(line)
        if header and header.group(1) != "Owner":
            owner, kind = header.group(1), header.group(3)
            notes.note_types.append((owner, kind))
            if (owner, kind) == ("CORE", "PRSTATUS"):
                notes.threads.append(NoteThread(0, 0, 0, 0, 0))
            continue
        if not line.startswith("    ") or kind is None:
            continue
        if kind == "PRSTATUS":
            _prstatus_line(line, notes.threads[-1])
        elif kind == "PRPSINFO":
            m = re.match(r"^\s+fname: (.*?), psargs: (.*)$", line)
            if m:
                notes.prpsinfo["fname"] = m.group(1)
                notes.prpsinfo["psargs"] = m.group(2)
                continue
            for key, value in _PAIR.findall(line):
                notes.prpsinfo[key] = _int(value)
        elif kind == "SIGINFO":
            m = re.match(r"^\s+fault address: (0x[0-9a-fA-F]+|0)$", line)
            if m:
                notes.siginfo["fault_address"] = int(m.group(1), 16)
                continue
            m = re.match(r"^\s+sender PID: (-?\d+), sender UID: (-?\d+)$", line)
            if m:
                notes.siginfo["sender_pid"] = int(m.group(1))
                notes.siginfo["sender_uid"] = int(m.group(2))
                continue
            for key, value in _PAIR.findall(line):
                notes.siginfo[key] = int(value, 0)
        elif kind == "AUXV":
            m = re.match(rf"^\s+(\w+): ({_INT})(?:\s+<.*>)?$", line)
            if m:
                notes.auxv.append((m.group(1), _int(m.group(2))))
        elif kind == "FILE":
            m = re.match(r"^\s+([0-9a-f]+)-([0-9a-f]+) ([0-9a-f]+) (\d+)\s+(.*)$", line)
            if m:
                notes.files.append(
                    (
                        int(m.group(1), 16),
                        int(m.group(2), 16),
                        int(m.group(3), 16),
                        int(m.group(4)),
                        m.group(5),
                    )
                )
    return notes


def _prstatus_line(line: str, thread: NoteThread) -> None:
    for key, value in _PAIR.findall(line):
        if key == "pid":
            thread.tid = _int(value)
        elif key in ("ppid", "pgrp", "sid", "cursig"):
            setattr(thread, key, _int(value))
        elif key in _PRSTATUS_FIELDS:
            continue
        else:
            thread.registers[REGISTER_NAMES.get(key, key)] = _int(value)


# -- eu-unstrip -n -------------------------------------------------------------


@dataclass(frozen=True)
class UnstripModule:
    start: int
    size: int
    build_id: str | None
    build_id_address: int | None
    file: str | None  # the ELF file elfutils used; "." = the image in the core
    debug_file: str | None
    name: str

    @property
    def end(self) -> int:
        return self.start + self.size


_UNSTRIP = re.compile(r"^0x([0-9a-f]+)\+0x([0-9a-f]+) (\S+) (\S+) (\S+) (.+)$")


def unstrip_modules(
    core: Path, exe: Path | None = None, cwd: Path | None = None
) -> list[UnstripModule]:
    """``eu-unstrip -n --core CORE [-e EXE]``, parsed."""
    args = ["eu-unstrip", "-n", f"--core={core}"]
    if exe is not None:
        args.append(f"--executable={exe}")
    proc = _run(args, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()}")
    return parse_unstrip(proc.stdout)


def parse_unstrip(text: str) -> list[UnstripModule]:
    out = []
    for line in text.splitlines():
        m = _UNSTRIP.match(line)
        if not m:
            continue
        build_id = address = None
        if m.group(3) != "-":
            bid, _, addr = m.group(3).partition("@")
            build_id, address = bid, int(addr, 16)
        out.append(
            UnstripModule(
                start=int(m.group(1), 16),
                size=int(m.group(2), 16),
                build_id=build_id,
                build_id_address=address,
                file=None if m.group(4) == "-" else m.group(4),
                debug_file=None if m.group(5) == "-" else m.group(5),
                name=m.group(6),
            )
        )
    return out


# -- eu-stack ------------------------------------------------------------------


@dataclass
class StackFrame:
    index: int
    pc: int
    function: str | None
    module: str | None
    build_id: str | None = None
    module_start: int | None = None
    adjusted_offset: int | None = None  # pc_adjusted - module_start
    file: str | None = None
    line: int | None = None
    column: int | None = None


@dataclass
class StackThread:
    tid: int
    frames: list[StackFrame] = field(default_factory=list)


@dataclass
class StackOutput:
    pid: int | None
    threads: list[StackThread]
    errors: list[str]  # eu-stack's messages on stderr (it exits 1 when it prints some)


_FRAME = re.compile(r"^#(\d+)\s+0x([0-9a-f]+)(?:\s+(.*))?$")
_MODINFO = re.compile(r"^\s{4}\[([0-9a-f]+)\]@0x([0-9a-f]+)\+0x([0-9a-f]+)$")
_SOURCE = re.compile(r"^\s{4}(\S.*?):(\d+)(?::(\d+))?$")


def stack(
    core: Path, exe: Path | None = None, *, raw: bool = False, cwd: Path | None = None
) -> StackOutput:
    """``eu-stack -b -m -i -s --core CORE [-e EXE]`` (``-r``: raw, not
    demangled, names), parsed."""
    args = ["eu-stack", "-b", "-m", "-i", "-s", f"--core={core}"]
    if exe is not None:
        args.append(f"--executable={exe}")
    if raw:
        args.append("-r")
    proc = _run(args, cwd=cwd)
    if proc.returncode not in (0, 1):  # 1: printed frames but also errors
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    out = parse_stack(proc.stdout)
    out.errors = [line for line in proc.stderr.splitlines() if line.strip()]
    return out


def parse_stack(text: str) -> StackOutput:
    pid = None
    threads: list[StackThread] = []
    for line in text.splitlines():
        if m := re.match(r"^PID (\d+) - ", line):
            pid = int(m.group(1))
        elif m := re.match(r"^TID (\d+):$", line):
            threads.append(StackThread(int(m.group(1))))
        elif m := _FRAME.match(line):
            rest = m.group(3) or ""
            function = module = None
            if rest.startswith("- "):
                module = rest[2:]
            elif " - " in rest:
                function, module = rest.rsplit(" - ", 1)
            elif rest:
                function = rest
            frame = StackFrame(int(m.group(1)), int(m.group(2), 16), function, module)
            threads[-1].frames.append(frame)
        elif m := _MODINFO.match(line):
            frame = threads[-1].frames[-1]
            frame.build_id = m.group(1)
            frame.module_start = int(m.group(2), 16)
            frame.adjusted_offset = int(m.group(3), 16)
        elif m := _SOURCE.match(line):
            frame = threads[-1].frames[-1]
            frame.file, frame.line = m.group(1), int(m.group(2))
            frame.column = int(m.group(3)) if m.group(3) else None
    return StackOutput(pid, threads, [])


# -- eu-readelf --debug-dump=frames, -s ------------------------------------------


class FdeRanges:
    """Link-time address ranges covered by an FDE (``.eh_frame`` or ``.debug_frame``)."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = sorted(ranges)

    def covers(self, address: int) -> bool:
        return any(lo <= address < hi for lo, hi in self.ranges)


def readelf_fde_ranges(path: Path) -> FdeRanges:
    """``eu-readelf --debug-dump=frames FILE``: every FDE's
    [initial_location, initial_location + address_range)."""
    proc = _run(["eu-readelf", "--debug-dump=frames", str(path)])
    if proc.returncode != 0:
        raise RuntimeError(f"eu-readelf --debug-dump=frames {path}: {proc.stderr.strip()}")
    ranges = []
    start: int | None = None
    for line in proc.stdout.splitlines():
        if m := re.match(r"^\s+initial_location:\s+0x([0-9a-f]+)", line):
            start = int(m.group(1), 16)
        elif (m := re.match(r"^\s+address_range:\s+0x([0-9a-f]+)", line)) and start is not None:
            ranges.append((start, start + int(m.group(1), 16)))
            start = None
    return FdeRanges(ranges)


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: str
    bind: str


def readelf_symbols(path: Path) -> list[Symbol]:
    """``eu-readelf -s FILE``: the entries of every symbol table."""
    proc = _run(["eu-readelf", "-s", str(path)])
    if proc.returncode != 0:
        raise RuntimeError(f"eu-readelf -s {path}: {proc.stderr.strip()}")
    out = []
    row = re.compile(r"^\s*\d+: ([0-9a-f]+)\s+(\d+) (\S+)\s+(\S+)\s+\S+\s+\S+ (\S+)(?:@\S*)?$")
    for line in proc.stdout.splitlines():
        if m := row.match(line):
            value, size = int(m.group(1), 16), int(m.group(2))
            out.append(Symbol(m.group(5), value, size, m.group(3), m.group(4)))
    return out
