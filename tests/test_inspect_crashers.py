"""`coreepi inspect` on real cores of real crashes.

Each program of ``tests/crashers/`` is built with gcc/g++ and crashed; its core
is made by gdb's ``gcore`` at the fatal signal or by the kernel (see
:mod:`corefactory`). ``parse_core(core, exe=binary)`` must then report exactly
what the independent tools (``eu-readelf -n``, ``readelf``, ``addr2line``,
``objdump``) and the program's source (``CRASH-LINE`` markers) say.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from corefactory import (
    CASES,
    CORE_PATTERN,
    Crash,
    build_id_of,
    core_pattern_override,
    kernel_cores_unavailable_reason,
    read_pt_loads,
)

from coreepi.model.report import CrashReport, Frame, Module

GetCrash = Callable[[str], Crash]
GetReport = Callable[[str], CrashReport]

SIGSEGV, SIGABRT, SIGFPE, SIGILL, SIGBUS = 11, 6, 8, 4, 7
SEGV_MAPERR, SEGV_ACCERR, SI_TKILL, FPE_INTDIV, ILL_ILLOPN, BUS_ADRERR = 1, 2, -6, 1, 2, 2

#: trusts a caller frame may have (it was unwound, not scanned)
CALLER_TRUSTS = {"cfi", "frame-pointer"}


@dataclass(frozen=True)
class Expect:
    signal: int
    signal_name: str
    si_code: int
    si_code_name: str
    #: "fixed" (== fault_address), "pc" (the faulting instruction), "stack"
    #: (just below the stack), or None (no fault address: a signal sent by tgkill)
    fault: str | None
    #: frames in the executable, innermost first: (function, marker of its line or None)
    user_frames: tuple[tuple[str, str | None], ...]
    fault_address: int | None = None
    #: functions (base names) that must appear between frame 0 and the first user frame;
    #: empty means the first user frame must be frame 0
    library_functions: tuple[str, ...] = ()
    threads: int = 1


NULL_DEREF = Expect(
    SIGSEGV, "SIGSEGV", SEGV_MAPERR, "SEGV_MAPERR", "fixed",
    (("store_field", "CRASH-LINE"), ("handle_request", "CALLER-LINE"), ("main", "MAIN-LINE")),
    fault_address=0x10,
)  # fmt: skip
THREADS50 = Expect(
    SIGSEGV, "SIGSEGV", SEGV_MAPERR, "SEGV_MAPERR", "fixed",
    (("crash_in_worker", "CRASH-LINE"), ("worker", "CALLER-LINE")),
    fault_address=37 * 8, threads=51,
)  # fmt: skip

EXPECT: dict[str, Expect] = {
    "null_deref": NULL_DEREF,
    "null_deref@kernel": NULL_DEREF,
    "null_deref-O2": NULL_DEREF,
    "readonly_write": Expect(
        SIGSEGV, "SIGSEGV", SEGV_ACCERR, "SEGV_ACCERR", "fixed",
        (("poke", "CRASH-LINE"), ("main", "CALLER-LINE")),
        fault_address=0x5A5A0018,
    ),
    "abort@kernel": Expect(
        SIGABRT, "SIGABRT", SI_TKILL, "SI_TKILL", None,
        (("give_up", "CRASH-LINE"), ("main", "CALLER-LINE")),
        library_functions=("abort",),
    ),
    "assert": Expect(
        SIGABRT, "SIGABRT", SI_TKILL, "SI_TKILL", None,
        (("check_invariant", "CRASH-LINE"), ("main", "CALLER-LINE")),
        library_functions=("abort", "__assert_fail"),
    ),
    "stack_overflow": Expect(
        SIGSEGV, "SIGSEGV", SEGV_MAPERR, "SEGV_MAPERR", "stack",
        (("recurse", None), ("recurse", "CALLER-LINE"), ("recurse", "CALLER-LINE")),
    ),
    "divzero@kernel": Expect(
        SIGFPE, "SIGFPE", FPE_INTDIV, "FPE_INTDIV", "pc",
        (("divide", "CRASH-LINE"), ("main", "CALLER-LINE")),
    ),
    "ud2": Expect(
        SIGILL, "SIGILL", ILL_ILLOPN, "ILL_ILLOPN", "pc",
        (("illegal", "CRASH-LINE"), ("main", "CALLER-LINE")),
    ),
    "sigbus@kernel": Expect(
        SIGBUS, "SIGBUS", BUS_ADRERR, "BUS_ADRERR", "fixed",
        (("read_beyond_eof", "CRASH-LINE"), ("main", "CALLER-LINE")),
        fault_address=0x5B5B1020,
    ),
    "threads50": THREADS50,
    "threads50@kernel": THREADS50,
    "cxx_exception": Expect(
        SIGABRT, "SIGABRT", SI_TKILL, "SI_TKILL", None,
        (("load_config", "CRASH-LINE"), ("main", "CALLER-LINE")),
        library_functions=("abort", "std::terminate", "__cxa_throw"),
    ),
}  # fmt: skip

SYMBOLIZED = sorted(EXPECT)
ALL_CASES = sorted(CASES)
GCORE_CASES = sorted(n for n, c in CASES.items() if c.method == "gcore")


def base_name(function: str | None) -> str | None:
    """``ns::f(int) const`` -> ``ns::f``: drop a trailing parameter list.

    The report holds demangled names; DWARF gives C++ names without their
    parameters, symbol tables with them. The base name is what both agree on.
    """
    if function is None:
        return None
    name = function.strip()
    name = name.removesuffix(" const")
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            if name[i] == ")":
                depth += 1
            elif name[i] == "(":
                depth -= 1
                if depth == 0:
                    if i > 0:  # "(anonymous namespace)" alone is not a parameter list
                        name = name[:i]
                    break
    return name


def same_file(a: str | None, b: Path) -> bool:
    return a is not None and os.path.exists(a) and os.path.samefile(a, b)


def exe_frames(report: CrashReport, crash: Crash) -> list[tuple[int, Frame]]:
    """(index, frame) of the crashed thread's frames whose pc lies in the executable."""
    return [
        (i, f)
        for i, f in enumerate(report.crashed_thread.frames)
        if same_file(f.module, crash.binary)
    ]


def exe_module(report: CrashReport, crash: Crash) -> Module:
    found = [m for m in report.modules if same_file(m.path, crash.binary)]
    assert len(found) == 1, (
        f"executable {crash.binary} among modules {[m.path for m in report.modules]}"
    )
    return found[0]


# --------------------------------------------------------------------------
# the corpus itself (no coreepi involved)


@pytest.mark.parametrize("name", ALL_CASES)
def test_corpus_core_is_real_and_small(name: str, get_crash: GetCrash) -> None:
    crash = get_crash(name)
    # a Rust program's gcore holds std's larger mappings (~44 MB): real, not small
    limit = 64 if CASES[name].variant == "rust_panic" else 8
    assert crash.core.stat().st_size < limit * 1024 * 1024
    notes = crash.notes
    assert notes.pid > 0 and notes.threads and notes.siginfos and notes.files
    assert notes.crashed.cursig == notes.siginfo.signo
    assert str(crash.binary) in notes.file_paths()


@pytest.mark.parametrize("name", GCORE_CASES)
def test_gcore_writes_the_live_siginfo(name: str, get_crash: GetCrash) -> None:
    """gdb's gcore records the siginfo gdb saw at the fault, in the first thread's NT_SIGINFO."""
    crash = get_crash(name)
    live, noted = crash.live_siginfo, crash.notes.siginfo
    assert live is not None
    assert (noted.signo, noted.errno, noted.code) == (live["signo"], live["errno"], live["code"])
    if noted.fault_address is not None:
        assert noted.fault_address == live["addr"]


def test_kernel_core_pattern_is_restored_even_on_error(tmp_path: Path) -> None:
    if reason := kernel_cores_unavailable_reason():
        pytest.skip(reason)
    before = CORE_PATTERN.read_bytes()
    with (
        pytest.raises(RuntimeError, match="boom"),
        core_pattern_override(f"{tmp_path}/core.%p"),
    ):
        assert CORE_PATTERN.read_bytes() == f"{tmp_path}/core.%p\n".encode()
        raise RuntimeError("boom")
    assert CORE_PATTERN.read_bytes() == before


# --------------------------------------------------------------------------
# parse_core on every crash


@pytest.mark.parametrize("name", SYMBOLIZED)
def test_signal(name: str, get_crash: GetCrash, parsed_report: GetReport) -> None:
    crash, report, want = get_crash(name), parsed_report(name), EXPECT[name]
    sig, noted = report.signal, crash.notes.siginfo
    assert sig is not None
    assert (sig.number, sig.name) == (want.signal, want.signal_name)
    assert (sig.si_code, sig.si_code_name) == (want.si_code, want.si_code_name)
    assert (noted.signo, noted.code) == (want.signal, want.si_code)  # the corpus is what we think
    if want.fault is None:
        assert sig.fault_address is None
        assert sig.sender_pid == crash.notes.pid  # glibc's raise: tgkill(getpid(), ...)
        assert sig.sender_uid == crash.notes.uid
        return
    assert sig.fault_address == noted.fault_address
    frame0 = report.crashed_thread.frames[0]
    if want.fault == "fixed":
        assert sig.fault_address == want.fault_address
        if crash.printed_fault_address is not None:
            assert sig.fault_address == crash.printed_fault_address
    elif want.fault == "pc":
        assert sig.fault_address == frame0.pc == crash.notes.crashed.registers["rip"]
    elif want.fault == "stack":
        rsp = crash.notes.crashed.registers["rsp"]
        assert abs(sig.fault_address - rsp) < 512
        in_core = [
            p for p in read_pt_loads(crash.core) if p.vaddr <= sig.fault_address < p.vaddr + p.memsz
        ]
        assert in_core == [], "a stack overflow faults outside every mapping"


@pytest.mark.parametrize("name", ALL_CASES)
def test_process_and_threads(name: str, get_crash: GetCrash, parsed_report: GetReport) -> None:
    crash, report = get_crash(name), parsed_report(name)
    notes = crash.notes
    want_threads = EXPECT[name].threads if name in EXPECT else 1
    assert report.source == "elf-core"
    assert report.arch == "x86_64"
    assert report.process.pid == notes.pid
    assert report.process.tid == notes.crashed.tid
    assert report.process.comm == notes.fname
    assert report.process.uid == notes.uid
    assert report.process.exe is not None and same_file(report.process.exe, crash.binary)
    assert len(notes.threads) == want_threads
    assert len(report.threads) == want_threads
    assert sorted(t.tid for t in report.threads) == sorted(t.tid for t in notes.threads)
    crashed = [t for t in report.threads if t.crashed]
    assert [t.tid for t in crashed] == [notes.crashed.tid]
    if want_threads == 1:
        assert report.process.tid == report.process.pid
    for t in report.threads:
        assert t.frames, f"thread {t.tid} has no frames ({t.unwind_error})"


@pytest.mark.parametrize("name", ALL_CASES)
def test_frame0_is_the_saved_context(
    name: str, get_crash: GetCrash, parsed_report: GetReport
) -> None:
    crash, report = get_crash(name), parsed_report(name)
    regs = crash.notes.crashed.registers
    thread = report.crashed_thread
    assert thread.registers["rip"] == regs["rip"]
    assert thread.registers["rsp"] == regs["rsp"]
    frame0 = thread.frames[0]
    assert frame0.index == 0
    assert frame0.pc == regs["rip"]
    assert frame0.sp == regs["rsp"]
    assert frame0.trust == "context"
    assert [f.index for f in thread.frames] == list(range(len(thread.frames)))


@pytest.mark.parametrize("name", SYMBOLIZED)
def test_top_frames(name: str, get_crash: GetCrash, parsed_report: GetReport) -> None:
    """Function and line of the crashed thread's frames in the executable, innermost first."""
    crash, report, want = get_crash(name), parsed_report(name), EXPECT[name]
    frames = report.crashed_thread.frames
    in_exe = exe_frames(report, crash)
    assert len(in_exe) >= len(want.user_frames), [(f.function, f.module) for f in frames]
    first_user = in_exe[0][0]
    seen = [
        (base_name(f.function), f.line if marker else None, Path(f.file).name if f.file else None)
        for (_, f), (_, marker) in zip(in_exe, want.user_frames)
    ]
    expected = [
        (fn, crash.line(marker) if marker else None, crash.source.name)
        for fn, marker in want.user_frames
    ]
    assert seen == expected
    # the user frames are consecutive physical frames: nothing (but inlines) between them
    assert [i for i, _ in in_exe[: len(want.user_frames)]] == list(
        range(first_user, first_user + len(want.user_frames))
    )
    if not want.library_functions:
        assert first_user == 0
    else:
        assert first_user > 0
        below = [base_name(f.function) for f in frames[:first_user]]
        for fn in want.library_functions:
            assert fn in below, f"{fn} not among the frames below {want.user_frames[0][0]}: {below}"
        assert all(not same_file(f.module, crash.binary) for f in frames[:first_user])


@pytest.mark.parametrize("name", SYMBOLIZED)
def test_frame_trust(name: str, get_crash: GetCrash, parsed_report: GetReport) -> None:
    crash, report, want = get_crash(name), parsed_report(name), EXPECT[name]
    frames = report.crashed_thread.frames
    in_exe = exe_frames(report, crash)
    last_checked = in_exe[len(want.user_frames) - 1][0]
    assert frames[0].trust == "context"
    for f in frames[1 : last_checked + 1]:
        if f.inlined:
            continue
        assert f.trust in CALLER_TRUSTS, f"frame {f.index} {f.function}: {f.trust}"
    if crash.case.variant == "null_deref-O2":
        # -fomit-frame-pointer: rbp is not a frame pointer, only CFI can unwind these
        for _, f in in_exe[1 : len(want.user_frames)]:
            assert f.trust == "cfi", f"frame {f.index} {f.function}: {f.trust}"


@pytest.mark.parametrize("name", ALL_CASES)
def test_module_build_ids(name: str, get_crash: GetCrash, parsed_report: GetReport) -> None:
    """Build-ids equal `readelf -n`'s, for the executable, libc and every module on disk."""
    crash, report = get_crash(name), parsed_report(name)
    exe_id = build_id_of(crash.binary)
    assert exe_id and exe_id == build_id_of(crash.unstripped)
    exe = exe_module(report, crash)
    assert exe.build_id == exe_id
    libc_paths = {p for p in crash.notes.file_paths() if Path(p).name == "libc.so.6"}
    assert len(libc_paths) == 1
    libc_path = libc_paths.pop()
    libc = [m for m in report.modules if same_file(m.path, Path(libc_path))]
    assert len(libc) == 1
    assert libc[0].build_id == build_id_of(libc_path)
    checked = 0
    for m in report.modules:
        if m.build_id is not None and os.path.isfile(m.path):
            assert m.build_id == build_id_of(m.path), m.path
            checked += 1
    assert checked >= 3  # exe, libc, ld.so at least
    # frames carry their module, its build-id and the pc's offset from its load bias
    for f in report.crashed_thread.frames:
        mod = report.module_for(f.pc)
        if mod is None:
            continue
        assert f.module == mod.path
        assert f.build_id == mod.build_id
        assert mod.load_bias is not None
        assert f.module_offset == f.pc - mod.load_bias


@pytest.mark.parametrize("name", ALL_CASES)
def test_memory_map_matches_the_core(
    name: str, get_crash: GetCrash, parsed_report: GetReport
) -> None:
    """Every file mapping of NT_FILE is a region of the memory map, and a region is
    ``in_core`` exactly when the core has bytes for it (a PT_LOAD with p_filesz > 0).

    The two core writers differ here: the kernel writes a PT_LOAD for every
    mapping (p_filesz 0 for filtered ones, e.g. text), gcore leaves filtered
    mappings out of the program headers altogether; NT_FILE lists them in both.
    """
    crash, report = get_crash(name), parsed_report(name)
    loads = {p.vaddr: p for p in read_pt_loads(crash.core)}
    by_start = {m.start: m for m in report.memory_map}
    missing = []
    for start, end, offset, path in crash.notes.files:
        m = by_start.get(start)
        if m is None:
            missing.append(f"{start:#x}-{end:#x} {offset:#x} {path}")
            continue
        assert (m.end, m.offset) == (end, offset), path
        assert same_file(m.path, Path(path)), (m.path, path)
    assert not missing, "NT_FILE mappings missing from the memory map:\n" + "\n".join(missing)
    for m in report.memory_map:
        p = loads.get(m.start)
        assert m.in_core == (p is not None and p.filesz > 0), f"{m.start:#x} {m.path}"


@pytest.mark.parametrize(("name", "mnemonic"), [("divzero@kernel", "idiv"), ("ud2", "ud2")])
def test_fault_instruction(
    name: str, mnemonic: str, get_crash: GetCrash, parsed_report: GetReport
) -> None:
    """Frame 0's module_offset is the faulting instruction's link-time address (objdump)."""
    crash, report = get_crash(name), parsed_report(name)
    frame0 = report.crashed_thread.frames[0]
    assert frame0.module_offset is not None
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--start-address={frame0.module_offset:#x}",
         f"--stop-address={frame0.module_offset + 16:#x}", str(crash.binary)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    insns = re.findall(rf"^\s*{frame0.module_offset:x}:\s+(\S+)", out, re.MULTILINE)
    assert insns and insns[0].startswith(mnemonic), out


# --------------------------------------------------------------------------
# crash-specific checks


def test_threads50_crashes_in_a_non_main_thread(
    get_crash: GetCrash, parsed_report: GetReport
) -> None:
    for name in ("threads50", "threads50@kernel"):
        crash, report = get_crash(name), parsed_report(name)
        assert len(report.threads) == 51
        crashed = report.crashed_thread
        assert crashed.tid == crash.notes.crashed.tid != crash.notes.pid
        main = [t for t in report.threads if t.tid == report.process.pid]
        assert len(main) == 1 and not main[0].crashed
        names = {t.tid: {base_name(f.function) for f in t.frames} for t in report.threads}
        assert "main" in names[report.process.pid]
        # every worker, blocked or crashed, unwinds through worker()
        assert sum("worker" in fns for fns in names.values()) == 50
        assert base_name(crashed.frames[0].function) == "crash_in_worker"


def test_stack_overflow_unwinds_deep(get_crash: GetCrash, parsed_report: GetReport) -> None:
    crash, report = get_crash("stack_overflow"), parsed_report("stack_overflow")
    frames = report.crashed_thread.frames
    # 1 MiB of ~300-byte frames: thousands of recurse() frames; at least 100 must be unwound
    assert len(frames) >= 100
    assert all(base_name(f.function) == "recurse" for f in frames[:100])
    assert all(f.line == crash.line("CALLER-LINE") for f in frames[1:100])


def test_stripped_frames_keep_module_and_offset(get_crash: GetCrash) -> None:
    """No symbols: frames still name their module, and module_offset (pc - load bias)
    is a link-time address that addr2line resolves in the unstripped twin."""
    from coreepi.parse.elf.core import parse_core

    crash = get_crash("null_deref-stripped")
    report = parse_core(crash.core, exe=crash.binary)
    exe = exe_module(report, crash)
    assert exe.build_id == build_id_of(crash.binary)
    frames = report.crashed_thread.frames
    want = [("store_field", "CRASH-LINE"), ("handle_request", "CALLER-LINE"), ("main", "MAIN-LINE")]
    assert len(frames) >= len(want)
    for frame, (function, marker) in zip(frames, want):
        assert same_file(frame.module, crash.binary)
        assert frame.build_id == exe.build_id
        assert exe.load_bias is not None
        assert frame.module_offset == frame.pc - exe.load_bias
        # callers' pcs are return addresses: look up the call instruction (pc - 1)
        lookup = frame.module_offset - (1 if frame.index else 0)
        out = subprocess.run(
            ["addr2line", "-f", "-e", str(crash.unstripped), f"{lookup:#x}"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        file, _, line = out[1].rpartition(":")
        assert (out[0], Path(file).name, int(line)) == (
            function,
            crash.source.name,
            crash.line(marker),
        )
        # no symbols to be had: a name would be a wrong guess
        assert base_name(frame.function) in (None, function)
        assert frame.trust in ({"context"} if frame.index == 0 else CALLER_TRUSTS)


def test_stripped_binary_symbolized_from_debug_dir(get_crash: GetCrash) -> None:
    """With its debug file in a .build-id tree, the stripped crash reads like the -O0 one."""
    from coreepi.parse.elf.core import parse_core

    crash = get_crash("null_deref-stripped")
    assert crash.debug_dir is not None
    report = parse_core(crash.core, exe=crash.binary, debug_dirs=[crash.debug_dir])
    frames = report.crashed_thread.frames
    got = [(base_name(f.function), f.line) for f in frames[:3]]
    assert got == [
        ("store_field", crash.line("CRASH-LINE")),
        ("handle_request", crash.line("CALLER-LINE")),
        ("main", crash.line("MAIN-LINE")),
    ]


# --------------------------------------------------------------------------
# the CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1", TERM="dumb")
    return subprocess.run(
        [sys.executable, "-m", "coreepi", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_cli_inspect_json_roundtrips(get_crash: GetCrash, parsed_report: GetReport) -> None:
    from coreepi.model.report import CrashReport

    crash, in_process = get_crash("threads50@kernel"), parsed_report("threads50@kernel")
    proc = _cli("inspect", "--json", "--exe", str(crash.binary), str(crash.core))
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # plain JSON
    report = CrashReport.model_validate_json(proc.stdout)
    assert report.crash_id == in_process.crash_id
    assert report.signal == in_process.signal
    assert report.signal.fault_address == 0x128
    assert report.process.tid == crash.notes.crashed.tid
    assert len(report.threads) == 51
    assert [(f.pc, f.function, f.line) for f in report.crashed_thread.frames] == [
        (f.pc, f.function, f.line) for f in in_process.crashed_thread.frames
    ]


def test_cli_inspect_human_output(get_crash: GetCrash) -> None:
    crash = get_crash("null_deref")
    proc = _cli("inspect", "--exe", str(crash.binary), str(crash.core))
    assert proc.returncode == 0, proc.stderr
    assert "SIGSEGV" in proc.stdout
    assert "store_field" in proc.stdout
