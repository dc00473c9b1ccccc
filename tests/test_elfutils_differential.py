"""Differential tests: coreepi against Debian's elfutils on real cores.

The cores and executables come from elfutils' own test suite
(``../shared/testdata/elf-cores-elfutils/``, bzip2-compressed, read-only): a
multi-threaded program that raised SIGABRT in a thread, built for x86-64 and
aarch64 with and without frame pointers, a C++ program with mangled names, a
core with a shared library, and an aarch64 core without its executable.

For each core we run the peer tools on the same files and compare:

* ``eu-readelf -n``: signal, si_code, pid, every thread's tid and every
  general-purpose register, PRPSINFO (fname, psargs, uid), AUXV, NT_FILE;
* ``eu-unstrip -n --core``: modules (base, end, build-id, path);
* ``eu-stack -b -m -i -s --core --executable``: per thread, the frames' pcs,
  function names (demangled, and raw with ``-r``), modules, build-ids,
  module offsets and source lines;
* ``eu-readelf --debug-dump=frames`` / ``-s`` of the executables: which pcs
  have CFI (so which caller frames must be ``cfi`` rather than
  ``frame-pointer``) and the symbols (so function offsets are exact).

Where the tools legitimately differ the test says so next to the assertion,
with the reason, and asserts the exact difference, so any new one fails.
Where coreepi misses something that elfutils gets right, a strict xfail holds
the correct assertion.
"""

from __future__ import annotations

import bz2
import signal as pysignal
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import elfutils_peer as eu  # noqa: E402
from testdata import shared, shared_missing  # noqa: E402

from coreepi.errors import UnsupportedArchError  # noqa: E402
from coreepi.ingest.artifacts import inspect_core  # noqa: E402
from coreepi.model.report import CrashReport, Frame, FrameTrust, Module  # noqa: E402
from coreepi.parse.elf.core import parse_core  # noqa: E402
from coreepi.parse.elf.corefile import CoreFile  # noqa: E402
from coreepi.parse.elf.notes import read_notes  # noqa: E402

CORES_DIR = shared("elf-cores-elfutils")  # GPL-3.0: not vendored; None where absent


@dataclass(frozen=True)
class Case:
    core: str
    exe: str | None
    arch: str
    # drgn names shared libraries by their link-map name (what the dynamic
    # loader opened, often a symlink); elfutils and NT_FILE by the mapped file.
    link_map_names: dict[str, str] = field(default_factory=dict, hash=False)


CASES = [
    Case("backtrace.x86_64.core", "backtrace.x86_64.exec", "x86_64"),
    Case("backtrace.x86_64.fp.core", "backtrace.x86_64.fp.exec", "x86_64"),
    Case("backtrace.aarch64.core", "backtrace.aarch64.exec", "aarch64"),
    Case("backtrace.aarch64.fp.core", "backtrace.aarch64.fp.exec", "aarch64"),
    Case("test-core.core", "test-core.exec", "x86_64"),
    Case(
        "testfile-backtrace-demangle.core",
        "testfile-backtrace-demangle",
        "x86_64",
        {
            "/usr/lib64/ld-2.18.so": "/lib64/ld-linux-x86-64.so.2",
            "/usr/lib64/libc-2.18.so": "/lib64/libc.so.6",
            "/usr/lib64/libm-2.18.so": "/lib64/libm.so.6",
            "/usr/lib64/libgcc_s-4.8.2-20131212.so.1": "/lib64/libgcc_s.so.1",
            "/usr/lib64/libstdc++.so.6.0.19": "/lib64/libstdc++.so.6",
        },
    ),
    Case("testfile_aarch64_core", None, "aarch64"),
]
BY_CORE = {c.core: c for c in CASES}
CASE_PARAMS = [pytest.param(c, id=c.core) for c in CASES]

# si_code names, from include/uapi/asm-generic/siginfo.h (and sigaction(2)),
# for the (signal, si_code) pairs these cores hold.
SI_CODE_NAMES = {(6, -6): "SI_TKILL", (11, 1): "SEGV_MAPERR"}

U64 = (1 << 64) - 1


@dataclass
class Peer:
    """Everything the elfutils tools say about one core."""

    notes: eu.Notes
    modules: list[eu.UnstripModule]
    stack: eu.StackOutput
    raw_stack: eu.StackOutput  # eu-stack -r: names not demangled


@dataclass
class Env:
    dir: Path
    report: Callable[[Case], CrashReport]
    peer: Callable[[Case], Peer]
    fde: Callable[[str], eu.FdeRanges]
    symbols: Callable[[str], list[eu.Symbol]]


@pytest.fixture(scope="session")
def elfutils_env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    """The cores and executables, decompressed once into a temporary
    directory, with cached coreepi reports and peer outputs."""
    if CORES_DIR is None:
        pytest.skip(shared_missing("elf-cores-elfutils"))
    if missing := eu.missing_tools():
        pytest.skip(f"elfutils tools not installed: {', '.join(missing)} (apt install elfutils)")
    out = tmp_path_factory.mktemp("elfutils-cores")
    for src in sorted(CORES_DIR.glob("*.bz2")):
        with bz2.open(src, "rb") as fin, open(out / src.name.removesuffix(".bz2"), "wb") as fout:
            while chunk := fin.read(1 << 20):
                fout.write(chunk)

    @cache
    def report(case: Case) -> CrashReport:
        return parse_core(out / case.core, exe=out / case.exe if case.exe else None)

    @cache
    def peer(case: Case) -> Peer:
        # Relative names, run in the directory of the files, as elfutils' own
        # tests do: eu-unstrip/eu-stack then name the executable after the
        # -e argument. eu-unstrip gets -e too, as coreepi gets the exe:
        # without it elfutils 0.188 places test-core-lib.so at 0x7f67f2caf000
        # (its data mapping, which also maps file offset 0), the result
        # elfutils' own run-unstrip-n.sh calls "FAIL" (correct: 0x7f67f2aaf000).
        core, exe = Path(case.core), Path(case.exe) if case.exe else None
        return Peer(
            notes=eu.readelf_notes(out / case.core),
            modules=eu.unstrip_modules(core, exe, cwd=out),
            stack=eu.stack(core, exe, cwd=out),
            raw_stack=eu.stack(core, exe, raw=True, cwd=out),
        )

    @cache
    def fde(path: str) -> eu.FdeRanges:
        return eu.readelf_fde_ranges(Path(path))

    @cache
    def symbols(path: str) -> list[eu.Symbol]:
        return eu.readelf_symbols(Path(path))

    return Env(out, report, peer, fde, symbols)


# -- notes: eu-readelf -n ------------------------------------------------------


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_arch(elfutils_env: Env, case: Case) -> None:
    assert elfutils_env.report(case).arch == case.arch


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_signal(elfutils_env: Env, case: Case) -> None:
    report, notes = elfutils_env.report(case), elfutils_env.peer(case).notes
    si = notes.siginfo
    sig = report.signal
    assert sig is not None
    assert sig.number == si["si_signo"] == notes.threads[0].cursig
    assert sig.name == pysignal.Signals(si["si_signo"]).name
    assert sig.si_code == si["si_code"]
    assert sig.si_code_name == SI_CODE_NAMES[(si["si_signo"], si["si_code"])]
    assert sig.errno == si["si_errno"]
    # eu-readelf prints the fault address exactly when si_addr is meaningful
    # (SIGILL/SIGFPE/SIGSEGV/SIGBUS with si_code > 0), as coreepi keeps it.
    assert sig.fault_address == si.get("fault_address")
    if "sender_pid" in si:  # SI_USER
        assert (sig.sender_pid, sig.sender_uid) == (si["sender_pid"], si["sender_uid"])


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_process(elfutils_env: Env, case: Case) -> None:
    report, peer = elfutils_env.report(case), elfutils_env.peer(case)
    ps = peer.notes.prpsinfo
    proc = report.process
    assert proc.pid == ps["pid"] == peer.stack.pid
    assert proc.ppid == ps["ppid"]
    assert proc.uid == ps["uid"]
    assert proc.gid == ps["gid"]
    assert proc.comm == ps["fname"]
    assert proc.tid == peer.notes.threads[0].tid
    # The kernel turns every NUL of the argument area into a space, the final
    # one included (fs/binfmt_elf.c, fill_psinfo): psargs ends with a space.
    # coreepi reads argv from the stack; joined, it is psargs (80 bytes max).
    assert not proc.cmdline_truncated
    assert " ".join(proc.cmdline) + " " == ps["psargs"]


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_threads_and_registers(elfutils_env: Env, case: Case) -> None:
    report, peer = elfutils_env.report(case), elfutils_env.peer(case)
    # Same threads in the same (note) order; the first took the signal.
    assert [t.tid for t in report.threads] == [t.tid for t in peer.notes.threads]
    assert [t.tid for t in peer.stack.threads] == [t.tid for t in peer.notes.threads]
    assert [t.crashed for t in report.threads] == [True] + [False] * (len(report.threads) - 1)
    expected_names = {
        "x86_64": {
            "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax",
            "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss",
            "fs_base", "gs_base", "ds", "es", "fs", "gs",
        },
        "aarch64": {f"x{i}" for i in range(31)} | {"sp", "pc", "pstate"},
    }[case.arch]  # fmt: skip
    for ours, theirs in zip(report.threads, peer.notes.threads, strict=True):
        assert set(theirs.registers) == expected_names
        assert ours.registers == theirs.registers, f"tid {ours.tid}"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_auxv(elfutils_env: Env, case: Case) -> None:
    report, notes = elfutils_env.report(case), elfutils_env.peer(case).notes
    assert list(report.process.auxv.items()) == notes.auxv


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_nt_file(elfutils_env: Env, case: Case) -> None:
    report, notes = elfutils_env.report(case), elfutils_env.peer(case).notes
    assert notes.files, "every core here has an NT_FILE note"
    for start, end, offset, size, _path in notes.files:
        assert size == end - start
    # The decoder itself ...
    with CoreFile(elfutils_env.dir / case.core) as core:
        ours = [(f.start, f.end, f.offset, f.path) for f in read_notes(core).files]
    assert ours == [(s, e, o, p) for s, e, o, _n, p in notes.files]
    # ... and the report: each file-backed mapping is one PT_LOAD named by the
    # NT_FILE entry that starts where it starts.
    named = [(m.start, m.end, m.offset, m.path) for m in report.memory_map if m.path is not None]
    assert sorted(named) == sorted((s, e, o, p) for s, e, o, _n, p in notes.files)


# -- modules: eu-unstrip -n --core ----------------------------------------------


def _nt_file_path_at(notes: eu.Notes, address: int) -> str | None:
    return next((p for s, e, _o, _n, p in notes.files if s <= address < e), None)


def _expected_module_path(case: Case, notes: eu.Notes, base: int, eu_name: str) -> str:
    """The path coreepi must give the module elfutils calls ``eu_name``: the
    path the kernel recorded (NT_FILE), or drgn's link-map name for a shared
    library, or, for the vDSO (not a file), elfutils' name too. elfutils
    instead names a module after the file it opened when it opened one (the
    -e argument, ./test-core-lib.so)."""
    recorded = _nt_file_path_at(notes, base)
    if recorded is None:
        return eu_name
    return case.link_map_names.get(recorded, recorded)


def _round_up(value: int, align: int) -> int:
    return (value + align - 1) // align * align


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_modules(elfutils_env: Env, case: Case) -> None:
    report, peer = elfutils_env.report(case), elfutils_env.peer(case)
    page = dict(peer.notes.auxv)["PAGESZ"]
    matched: set[int] = set()
    for em in peer.modules:
        start = em.start
        if case.core == "testfile_aarch64_core" and em.name == "/root/elfutils/build/a.out":
            # elfutils' error, not ours: with 64 KiB pages this small a.out's
            # data mapping (0x410000) also starts at file offset 0, and it is
            # the only one of its pages in the core, so elfutils takes the ELF
            # header it finds there for the load address. AT_PHDR = 0x400040
            # (program headers right after the 64-byte ELF header) and the
            # text mapping at 0x400000 say the executable is loaded at 0x400000.
            assert em.start == 0x410000
            assert (0x410000, 0x420000, 0, 0x10000, em.name) in peer.notes.files
            assert dict(peer.notes.auxv)["PHDR"] - 64 == 0x400000
            start = 0x400000
        ours = [m for m in report.modules if m.base == start]
        assert len(ours) == 1, f"no coreepi module at 0x{start:x} ({em.name})"
        m = ours[0]
        matched.add(m.base)
        assert m.build_id == em.build_id, em.name
        assert m.path == _expected_module_path(case, peer.notes, start, em.name)
        if start == em.start:
            # elfutils ends a module it has the file of at the last segment's
            # p_vaddr + p_memsz; coreepi (drgn) sometimes at the end of the
            # last page mapped: the same end, rounded up to the page size.
            assert m.end in (em.end, _round_up(em.end, page)), em.name
        else:
            assert m.end == 0x420000  # the end of a.out's last NT_FILE mapping
    # Modules coreepi has and elfutils does not: NT_FILE objects without a
    # build-id whose ELF header page is not in the core (elfutils finds a
    # module only from an ELF header in the core, or from the link map with
    # the file on disk); coreepi keeps them so their frames get module+offset.
    for m in report.modules:
        if m.base in matched:
            continue
        assert m.build_id is None, m.path
        mapping = next(x for x in report.memory_map if x.start == m.base)
        assert mapping.path == m.path and mapping.offset == 0 and not mapping.in_core
    # The main executable comes first.
    entry = dict(peer.notes.auxv)["ENTRY"]
    assert report.modules[0].base <= entry < report.modules[0].end


# -- frames: eu-stack --core --executable ----------------------------------------


@dataclass(frozen=True)
class StackDifference:
    """Frames one tool lists and the other does not, by pc, and why."""

    eu_only: tuple[int, ...] = ()
    coreepi_only: tuple[int, ...] = ()
    why: str = ""


STACK_DIFFERENCES = {
    ("backtrace.aarch64.fp.core", 350): StackDifference(
        coreepi_only=(0x41DC70,),
        why="coreepi goes one frame further, into __clone (+0x70: the instruction after "
        "the `blr` that calls the thread function), as it does on x86-64 and in the "
        "non-fp aarch64 core; eu-stack ends at start_thread.",
    ),
    ("backtrace.aarch64.fp.core", 349): StackDifference(
        eu_only=(0x401918,),
        why="coreepi stops at __libc_start_main. Neither main nor __libc_start_main has "
        "CFI in this executable, so both steps use the frame-pointer fallback. The last "
        "frame record, (x29=0, lr=0x401918), was pushed by __libc_start_main after "
        "_start zeroed x29: drgn's fallback (libdrgn/arch_aarch64.c) stops at a record "
        "whose saved fp is not above the current one without using its lr; "
        "eu-stack (backends/aarch64_unwind.c) uses the lr and reaches _start. "
        "See the xfail below.",
    ),
    ("testfile_aarch64_core", 16547): StackDifference(
        eu_only=(0x7FB7390B38,),
        why="No executable, so no CFI: main is unwound by frame pointer. main is a leaf "
        "(it set up no frame record: [x29+8] is _start's return address), so its caller "
        "__libc_start_main is only in the link register x30 = 0x7fb7390b38. eu-stack's "
        "aarch64 fallback uses lr for the first frame, drgn reads the frame record at "
        "x29 and skips it (its own comment: 'leaf functions may not allocate a stack "
        "frame, so this may skip the caller of a leaf function'). See the xfail below.",
    ),
}


def _eu_frames(case: Case, thread: eu.StackThread) -> list[eu.StackFrame]:
    """eu-stack's frames, without its aarch64 duplicates.

    elfutils' aarch64 fallback unwinder (backends/aarch64_unwind.c) returns
    lr for the first frame it unwinds without CFI and then, in its own words,
    "we'll come back to the same frame again in the next round": a frame
    without CFI whose callee had CFI is listed twice with the same pc
    (sigusr2 and main in the .fp core, _start in the other). The program calls
    each of them once (tests/backtrace-child.c).
    """
    frames = list(thread.frames)
    if case.arch == "aarch64":
        frames = [f for i, f in enumerate(frames) if i == 0 or f.pc != frames[i - 1].pc]
    return frames


def _physical(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if not f.inlined]


def _paired(case: Case, ours: list[Frame], theirs: list[eu.StackFrame], tid: int):
    diff = STACK_DIFFERENCES.get((case.core, tid), StackDifference())
    ours_kept = [f for f in ours if f.pc not in diff.coreepi_only]
    theirs_kept = [f for f in theirs if f.pc not in diff.eu_only]
    assert [f.pc for f in ours if f.pc in diff.coreepi_only] == list(diff.coreepi_only)
    assert [f.pc for f in theirs if f.pc in diff.eu_only] == list(diff.eu_only)
    assert [hex(f.pc) for f in ours_kept] == [hex(f.pc) for f in theirs_kept]
    return list(zip(ours_kept, theirs_kept, strict=True))


def _module_of(report: CrashReport, frame: Frame) -> Module:
    module = report.module_for(frame.pc)
    assert module is not None and module.path == frame.module
    return module


def _symbol_at(env: Env, path: str, pc: int) -> eu.Symbol:
    """The FUNC symbol holding pc: sized ones first, else the closest
    zero-sized one below (assembly entry points such as _start)."""
    funcs = [s for s in env.symbols(path) if s.type == "FUNC" and s.value <= pc]
    sized = [s for s in funcs if pc < s.value + s.size]
    if sized:
        return sized[0]
    return max((s for s in funcs if s.size == 0), key=lambda s: s.value)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_frames(elfutils_env: Env, case: Case) -> None:
    env = elfutils_env
    report, peer = env.report(case), env.peer(case)
    raw_by_tid = {t.tid: t for t in peer.raw_stack.threads}
    for thread, eu_thread in zip(report.threads, peer.stack.threads, strict=True):
        assert thread.tid == eu_thread.tid
        ours = _physical(thread.frames)
        assert all(a.pc != b.pc for a, b in zip(ours, ours[1:])), "coreepi repeats a frame"
        theirs = _eu_frames(case, eu_thread)
        raw = {f.pc: f for f in _eu_frames(case, raw_by_tid[thread.tid])}
        for f, e in _paired(case, ours, theirs, thread.tid):
            where = f"tid {thread.tid} #{f.index} 0x{f.pc:x}"
            # -- function name (demangled; eu-stack demangles by default)
            if e.function == "$x":
                # elfutils 0.188 names the pc after the aarch64 mapping symbol
                # "$x" (AAELF64: start of A64 code) that sits at _start's
                # address; the function is the FUNC symbol there.
                module = _module_of(report, f)
                assert module.debug_file is not None
                sym = _symbol_at(env, module.debug_file, f.pc)
                assert (f.function, f.function_offset) == (sym.name, f.pc - sym.value), where
            elif case.core == "test-core.core" and f.pc == 0x7F67F2AAF619:
                # eu-stack opened ./test-core-lib.so from its working
                # directory (the DT_NEEDED entry is literally that relative
                # path) and names libfunc. coreepi uses a file only when its
                # build-id matches the core's and this library has none, so
                # it gives module + offset and says so in a warning.
                assert e.function == "libfunc"
                assert f.function is None and f.module_offset == 0x619
                assert any("test-core-lib.so" in w for w in report.analysis.warnings)
            else:
                assert f.function == e.function, where
                if f.function is not None:
                    # The offset is pc - the symbol's value (symbol looked up
                    # by eu-stack -r's raw, not demangled, name).
                    module = _module_of(report, f)
                    assert module.debug_file is not None
                    raw_name = raw[f.pc].function
                    values = {s.value for s in env.symbols(module.debug_file) if s.name == raw_name}
                    assert f.pc - f.function_offset in values, where
            # -- module, build-id, module offset
            if e.module is None:
                # eu-stack put this pc in no module: a module elfutils does
                # not find (an NT_FILE library whose ELF header is not in the
                # core, see test_modules), or a.out of the no-executable core
                # that elfutils placed at the wrong address. coreepi still
                # gives module + offset.
                module = _module_of(report, f)
                assert module.base not in {m.start for m in peer.modules}, where
                assert f.module_offset == f.pc - module.base, where
            else:
                module = _module_of(report, f)
                assert f.module == _expected_module_path(case, peer.notes, module.base, e.module)
            if e.build_id is not None:
                assert f.build_id == e.build_id, where
                # eu-stack prints module start + offset of the *adjusted* pc
                # (pc - 1 for a caller, so it lies in the call instruction);
                # coreepi's module_offset is pc - module base.
                assert e.module_start == _module_of(report, f).base, where
                adjust = 0 if f.index == 0 else 1
                assert f.module_offset - adjust == e.adjusted_offset, where
            elif e.module is not None:
                assert f.build_id is None, where
            # -- source line (both look it up at the adjusted pc)
            assert (f.file, f.line) == (e.file, e.line), where


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_frame_trust(elfutils_env: Env, case: Case) -> None:
    """Frame 0 is ``context``; a caller is ``cfi`` exactly when its callee's
    pc (pc - 1 for a return address) has an FDE in the callee module's file,
    per eu-readelf --debug-dump=frames; ``frame-pointer`` otherwise."""
    env = elfutils_env
    report = env.report(case)
    for thread in report.threads:
        frames = _physical(thread.frames)
        assert frames and frames[0].trust == FrameTrust.CONTEXT
        for callee, caller in zip(frames, frames[1:]):
            lookup = callee.pc if callee.index == 0 else callee.pc - 1
            module = report.module_for(lookup)
            has_cfi = False
            if module is not None and module.debug_file and Path(module.debug_file).is_file():
                has_cfi = env.fde(module.debug_file).covers(lookup - (module.load_bias or 0))
            expected = FrameTrust.CFI if has_cfi else FrameTrust.FRAME_POINTER
            assert caller.trust == expected, f"tid {thread.tid} #{caller.index} 0x{caller.pc:x}"


# The exact trust sequences of the backtrace cores: the .fp executables'
# own functions (sigusr2, stdarg, backtracegen, start, main) have no CFI, so
# their callers are found by frame pointer; most of glibc's have CFI
# (not __libc_start_main in the aarch64 .fp build: its caller _start is lost,
# see STACK_DIFFERENCES).
C, CFI, FP = FrameTrust.CONTEXT, FrameTrust.CFI, FrameTrust.FRAME_POINTER
EXPECTED_TRUST = {
    "backtrace.x86_64.core": [[C, CFI, CFI, CFI, CFI, CFI, CFI], [C, CFI, CFI, CFI]],
    "backtrace.x86_64.fp.core": [[C, CFI, FP, FP, FP, FP, CFI], [C, CFI, FP, CFI]],
    "backtrace.aarch64.core": [[C, CFI, CFI, CFI, CFI, CFI, CFI], [C, CFI, CFI, CFI]],
    "backtrace.aarch64.fp.core": [[C, CFI, FP, FP, FP, FP, CFI], [C, CFI, FP]],
    "test-core.core": [[C, FP, CFI]],  # test-core-lib.so is not used: no CFI for libfunc
    "testfile-backtrace-demangle.core": [[C, CFI, CFI, CFI]],
    "testfile_aarch64_core": [[C, FP]],  # no executable: no CFI at all
}


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_frame_trust_exact(elfutils_env: Env, case: Case) -> None:
    report = elfutils_env.report(case)
    assert [[f.trust for f in t.frames] for t in report.threads] == EXPECTED_TRUST[case.core]


def test_extra_clone_frame_is_real(elfutils_env: Env) -> None:
    """The frame coreepi has beyond eu-stack in the aarch64 .fp core is the
    return address of __clone's call of the thread function."""
    case = BY_CORE["backtrace.aarch64.fp.core"]
    report = elfutils_env.report(case)
    last = report.threads[0].frames[-1]
    sym = _symbol_at(elfutils_env, str(elfutils_env.dir / case.exe), last.pc)
    assert (last.pc, last.function, last.function_offset) == (0x41DC70, "__clone", 0x70)
    assert sym.name == "__clone" and sym.value + sym.size == last.pc + 4  # its last instruction


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="drgn's frame-pointer fallback drops the lr of the outermost frame record "
    "(saved fp 0), so coreepi stops at __libc_start_main; eu-stack reaches _start",
)
def test_aarch64_fp_main_thread_reaches_start(elfutils_env: Env) -> None:
    case = BY_CORE["backtrace.aarch64.fp.core"]
    report, peer = elfutils_env.report(case), elfutils_env.peer(case)
    theirs = _eu_frames(case, peer.stack.threads[1])
    assert [f.pc for f in report.threads[1].frames] == [f.pc for f in theirs]


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="without CFI drgn's aarch64 frame-pointer unwinder reads the frame record "
    "at x29 even for frame 0, so the caller of a leaf function (only in x30) is lost",
)
def test_aarch64_leaf_caller_from_link_register(elfutils_env: Env) -> None:
    case = BY_CORE["testfile_aarch64_core"]
    report, peer = elfutils_env.report(case), elfutils_env.peer(case)
    assert [f.pc for f in report.threads[0].frames] == [f.pc for f in peer.stack.threads[0].frames]


# -- C++ names -----------------------------------------------------------------


def test_demangled_names(elfutils_env: Env) -> None:
    case = BY_CORE["testfile-backtrace-demangle.core"]
    report, peer = elfutils_env.report(case), elfutils_env.peer(case)
    ours = [(f.function, f.function_offset) for f in report.threads[0].frames]
    theirs = [f.function for f in peer.stack.threads[0].frames]
    raw = [f.function for f in peer.raw_stack.threads[0].frames]
    assert theirs == ["cxxfunc(int)", "f", "main", None]
    assert raw == ["_Z7cxxfunci", "f", "main", None]
    assert ours == [("cxxfunc(int)", 0xC), ("f", 0xE), ("main", 0x9), (None, None)]
    symbols = elfutils_env.symbols(str(elfutils_env.dir / case.exe))
    cxxfunc = next(s for s in symbols if s.name == "_Z7cxxfunci")
    top = report.threads[0].frames[0]
    assert top.pc - cxxfunc.value == 0xC
    source = "/home/mark/src/elfutils/tests/testfile-backtrace-demangle.cc"
    assert (top.file, top.line) == (source, 27)


# -- a core without its executable -----------------------------------------------


def test_core_without_executable(elfutils_env: Env) -> None:
    """testfile_aarch64_core: no a.out, no libraries. Threads, registers and
    the signal come from the notes; frames get module + offset; what is
    missing is said in warnings, not raised."""
    case = BY_CORE["testfile_aarch64_core"]
    report = elfutils_env.report(case)
    assert report.signal is not None
    assert (report.signal.name, report.signal.si_code_name, report.signal.fault_address) == (
        "SIGSEGV",
        "SEGV_MAPERR",
        0x12345678,
    )
    (thread,) = report.threads
    assert thread.registers["pc"] == 0x400548 and thread.registers["x0"] == 0x12345678
    aout = report.modules[0]
    # The build-id is read from the ELF header the core holds (in the data
    # mapping), as eu-unstrip does.
    assert (aout.path, aout.base, aout.end, aout.build_id) == (
        "/root/elfutils/build/a.out",
        0x400000,
        0x420000,
        "c0b04d1be94584a0f4f971796782099962d3e9d1",
    )
    assert [(f.module, f.build_id, f.module_offset, f.function) for f in thread.frames] == [
        (aout.path, aout.build_id, 0x548, None),
        (aout.path, aout.build_id, 0x40C, None),
    ]
    warnings = "\n".join(report.analysis.warnings)
    assert "/root/elfutils/build/a.out" in warnings
    assert "/usr/lib64/libc-2.17.so" in warnings


@pytest.mark.parametrize("core", ["backtrace.x86_64.core", "backtrace.x86_64.fp.core"])
def test_without_executable_frame_pointers_as_far_as_eu_stack(elfutils_env: Env, core: str) -> None:
    """Without the executable the code is in neither the core (only the ELF
    header page of the text) nor a file, so no caller can be checked for a
    call before its return address: the frame-pointer chain is all there
    is. eu-stack follows it; coreepi once cut the stack after frame 0
    ("does not return after a call", from bytes it could not read)."""
    report = inspect_core(elfutils_env.dir / core)
    peer = eu.stack(Path(core), None, cwd=elfutils_env.dir)
    crashed = report.crashed_thread
    assert crashed is not None
    theirs = next(t for t in peer.threads if t.tid == crashed.tid)
    assert [f.pc for f in crashed.frames] == [f.pc for f in theirs.frames]
    assert len(crashed.frames) == 5
    trusts = [f.trust for f in crashed.frames]
    assert trusts == [FrameTrust.CONTEXT] + [FrameTrust.FRAME_POINTER] * 4


def test_frame_pointer_loop_is_cut(elfutils_env: Env) -> None:
    """backtrace.x86_64.core's main thread: its saved rbp points at itself,
    and drgn's frame-pointer fallback followed it 512 times (one frame
    repeated to the frame limit). The repeat ends the unwinding."""
    report = parse_core(elfutils_env.dir / "backtrace.x86_64.core")
    main = next(t for t in report.threads if t.tid == 23096)
    assert [(f.pc, f.sp) for f in main.frames] == [
        (0x404880, 0x7FFF1BC88540), (0x6DEFD0, 0x128F890)]
    assert main.unwind_error == "frame #2 repeats an earlier frame (pc and sp): unwinding loop; cut"


@pytest.mark.parametrize(("exe", "reason"), [
    ("backtrace.x86_64.exec", "its PT_LOAD segments do not match the core's mapping 0x601000-0x602000"),
    ("backtrace.aarch64.exec", "built for aarch64, the core is x86_64"),
    ("test-core.core", "ELF type 4 is not an executable"),
])
def test_wrong_exe_is_refused_without_a_build_id(elfutils_env: Env, exe: str, reason: str) -> None:
    """test-core.core states no build-id for its executable, so drgn would
    take any --exe: the wrong program's build-id, size and debug file once
    became the module's. What the core records is checked instead."""
    core = elfutils_env.dir / "test-core.core"
    main = "/home/jkratoch/redhat/elfutils-libregr/test-core-main"
    report = parse_core(core, exe=elfutils_env.dir / exe)
    module = report.modules[0]
    assert (module.path, module.build_id, module.end, module.debug_file) == (main, None, 0x603000, None)
    assert f"--exe {elfutils_env.dir / exe}: {reason}" in "\n".join(report.analysis.warnings)
    assert f"so it is not the core's {main}; not used" in "\n".join(report.analysis.warnings)
    right = elfutils_env.report(BY_CORE["test-core.core"])
    assert right.modules[0].debug_file == str(elfutils_env.dir / "test-core.exec")
    assert right.modules[0].build_id is None
    assert not any("--exe" in w for w in right.analysis.warnings)


def test_missing_file_is_not_called_missing_debug_info(elfutils_env: Env) -> None:
    """A module whose file was never found has no symbol table either: its
    frames are module + offset. The warning says the file was not found
    (it once said "no debug info (names from symbol tables only …)")."""
    exe = "/home/jkratoch/redhat/elfutils/tests/backtrace.x86_64.exec"
    alone = parse_core(elfutils_env.dir / "backtrace.x86_64.core")
    assert f"file not found (frames get module + offset only, no names) for: {exe}" in alone.analysis.warnings
    assert not any(w.startswith("no debug info") for w in alone.analysis.warnings)
    with_exe = elfutils_env.report(BY_CORE["backtrace.x86_64.core"])
    assert f"no debug info (names from symbol tables only, no file:line) for: {exe}" in with_exe.analysis.warnings
    assert not any(w.startswith("file not found") for w in with_exe.analysis.warnings)


# -- other architectures -----------------------------------------------------------


def _patched_core(env: Env, tmp_path: Path, offset: int, value: bytes) -> Path:
    data = bytearray((env.dir / "backtrace.x86_64.core").read_bytes())
    data[offset : offset + len(value)] = value
    out = tmp_path / "patched.core"
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize(
    ("offset", "value", "words"),
    [
        pytest.param(18, struct.pack("<H", 20), ("ppc", "64-bit"), id="e_machine=ppc"),
        pytest.param(18, struct.pack("<H", 3), ("i386",), id="e_machine=i386"),
        pytest.param(4, b"\x01", ("32-bit",), id="ei_class=32"),
    ],
)
def test_other_architecture_fails_cleanly(
    elfutils_env: Env, tmp_path: Path, offset: int, value: bytes, words: tuple[str, ...]
) -> None:
    core = _patched_core(elfutils_env, tmp_path, offset, value)
    with pytest.raises(UnsupportedArchError) as info:
        parse_core(core)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(core))
    for word in words:
        assert word in message
    result = subprocess.run(
        [sys.executable, "-m", "coreepi", "inspect", str(core)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"coreepi: error: {message}\n"
