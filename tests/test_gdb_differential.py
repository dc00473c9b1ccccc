"""Differential test: coreepi and gdb read the same real cores.

``gdb -batch -nx -ex 'thread apply all bt' EXE CORE`` (with addresses always
printed, and past main) is run on every crasher core. gdb selects the thread of
the core's first NT_PRSTATUS (the one that took the signal) as its current
thread, which ``-ex thread`` prints; ``thread apply all bt`` lists threads in
descending order, so the crashing thread's block is found by its LWP.

Frames are matched by pc (gdb adds frames of its own, e.g. tail-call frames
built from DW_TAG_call_site, so indexes need not line up); within one pc,
inline frames are matched in order. For every matched frame that both tools
symbolize, the function names agree after normalization, and for frames in the
crasher executable the source line agrees too.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from corefactory import CASES, Crash, gdb_available

from coreepi.model.report import CrashReport, Frame

ALL_CASES = sorted(CASES)
# gdb names Rust frames from DWARF (inlined frames, `{closure#0}`, generic arguments), coreepi
# from the symbol table (`{closure:#0}`): different by design, so the name comparison is C/C++'s
NAMED_CASES = [n for n in ALL_CASES if CASES[n].variant != "rust_panic"]


@dataclass(frozen=True)
class GdbFrame:
    index: int
    pc: int
    function: str | None  # None for "??"
    file: str | None
    line: int | None


@dataclass
class GdbView:
    current_lwp: int
    threads: dict[int, list[GdbFrame]]  # LWP -> frames
    signal_name: str | None


_FRAME_RE = re.compile(
    r"^#(?P<index>\d+)\s+(?P<pc>0x[0-9a-f]+) in (?P<function>.+?) \(.*?\)"
    r"(?: at (?P<file>\S+):(?P<line>\d+)| from (?P<lib>\S+))?\s*$"
)
_THREAD_RE = re.compile(r"^Thread \d+ \((?:Thread 0x[0-9a-f]+ \()?LWP (\d+)\)?\)?:")


def gdb_backtraces(exe: Path, core: Path) -> GdbView:
    argv = [
        "gdb", "-batch", "-nx",
        "-ex", "set debuginfod enabled off",
        "-ex", "set print frame-info location-and-address",
        "-ex", "set print frame-arguments none",
        "-ex", "set backtrace past-main on",
        "-ex", "set width 0",
        "-ex", "thread",
        "-ex", "thread apply all bt",
        str(exe), str(core),
    ]  # fmt: skip
    env = dict(os.environ, DEBUGINFOD_URLS="")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    out = proc.stdout
    current = re.search(
        r"^\[Current thread is \d+ \((?:Thread 0x[0-9a-f]+ \()?LWP (\d+)", out, re.MULTILINE
    )
    assert current, f"gdb named no current thread:\n{out[-2000:]}\n{proc.stderr[-2000:]}"
    signal = re.search(r"^Program terminated with signal (\w+)", out, re.MULTILINE)
    threads: dict[int, list[GdbFrame]] = {}
    frames: list[GdbFrame] | None = None
    for line in out.splitlines():
        if m := _THREAD_RE.match(line):
            frames = threads.setdefault(int(m.group(1)), [])
        elif frames is not None and (m := _FRAME_RE.match(line)):
            fn = m.group("function")
            frames.append(
                GdbFrame(
                    int(m.group("index")),
                    int(m.group("pc"), 16),
                    None if fn == "??" else fn,
                    m.group("file"),
                    int(m.group("line")) if m.group("line") else None,
                )
            )
    return GdbView(int(current.group(1)), threads, signal.group(1) if signal else None)


def normalize(function: str) -> str:
    """Compare what both tools mean, not how they spell it.

    * drop a C++ parameter list (``std::terminate()`` from a symbol table vs
      ``std::terminate``), and a symbol version (``__libc_start_main@@GLIBC_2.34``);
    * drop glibc's internal-alias prefix ``__GI_`` (gdb prints the DWARF
      linkage name ``__GI_raise`` where others print ``raise``);
    * drop leading underscores (gdb names the assembly entry ``clone3`` from its
      DWARF, the symbol table calls it ``__clone3``).
    """
    name = function.strip()
    name = re.sub(r"@@?[\w.]+$", "", name)
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, 0, -1):
            if name[i] == ")":
                depth += 1
            elif name[i] == "(":
                depth -= 1
                if depth == 0:
                    name = name[:i]
                    break
    name = name.removeprefix("__GI_")
    return name.lstrip("_")


GetGdbView = Callable[[str], tuple[Crash, GdbView]]
GetReport = Callable[[str], CrashReport]


@pytest.fixture(scope="module")
def gdb_view(get_crash: Callable[[str], Crash]) -> GetGdbView:
    if reason := gdb_available():
        pytest.skip(reason)
    cache: dict[str, tuple[Crash, GdbView]] = {}

    def get(name: str) -> tuple[Crash, GdbView]:
        if name not in cache:
            crash = get_crash(name)
            cache[name] = (crash, gdb_backtraces(crash.binary, crash.core))
        return cache[name]

    return get


@pytest.mark.parametrize("name", ALL_CASES)
def test_gdb_and_coreepi_agree_on_the_crashing_thread(
    name: str, gdb_view: GetGdbView, parsed_report: GetReport
) -> None:
    crash, gdb = gdb_view(name)
    report = parsed_report(name)
    assert gdb.current_lwp == crash.notes.crashed.tid
    assert report.crashed_thread.tid == gdb.current_lwp
    assert report.signal.name == gdb.signal_name
    assert len(report.threads) == len(gdb.threads)


@pytest.mark.parametrize("name", NAMED_CASES)
def test_gdb_and_coreepi_agree_on_function_names(
    name: str, gdb_view: GetGdbView, parsed_report: GetReport
) -> None:
    crash, gdb = gdb_view(name)
    report = parsed_report(name)
    ours = report.crashed_thread.frames
    theirs = gdb.threads[report.crashed_thread.tid]
    assert theirs, "gdb printed no frames for the crashing thread"

    by_pc_ours: dict[int, list[Frame]] = defaultdict(list)
    for f in ours:
        by_pc_ours[f.pc].append(f)
    by_pc_theirs: dict[int, list[GdbFrame]] = defaultdict(list)
    for g in theirs:
        by_pc_theirs[g.pc].append(g)

    compared, mismatches = [], []
    for pc, gframes in by_pc_theirs.items():
        for f, g in zip(by_pc_ours.get(pc, []), gframes):
            if f.function is None or g.function is None:
                continue
            compared.append(pc)
            if normalize(f.function) != normalize(g.function):
                mismatches.append(f"{pc:#x}: coreepi {f.function!r} vs gdb {g.function!r}")
            elif (
                f.module is not None
                and os.path.exists(f.module)
                and os.path.samefile(f.module, crash.binary)
                and g.line is not None
                and f.line != g.line
            ):
                mismatches.append(
                    f"{pc:#x} {g.function}: coreepi line {f.line} vs gdb line {g.line}"
                )
    assert not mismatches, "\n".join(mismatches)

    # not vacuous: every frame of the executable that gdb symbolizes was compared
    # (when coreepi cut the stack short, and said so, only those it kept)
    exe_pcs = {
        g.pc
        for g in theirs
        if g.function is not None and g.file is not None and Path(g.file).name == crash.source.name
    }
    if report.crashed_thread.unwind_error is not None:
        exe_pcs &= set(by_pc_ours)
    assert exe_pcs <= set(compared), (
        f"gdb frames in the executable not matched: {exe_pcs - set(compared)}"
    )
    assert compared, "no frame symbolized by both tools"
