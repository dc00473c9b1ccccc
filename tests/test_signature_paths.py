"""Signatures of crashes that report themselves: Rust panics (v0 and legacy
demangling, the panic machinery skipped), abort() in a fault handler (the
shape of a JVM's own core), and truncated cores (the signature marked, not
shortened into a new group). Real cores of tests/crashers/ programs."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from coreepi.analyze.signature import generate_signature
from coreepi.analyze.signature.rules import TRUNCATED_MARK
from coreepi.ingest.artifacts import inspect_core
from coreepi.model.report import CrashReport, Phenotype, SignalInfo
from coreepi.parse.demangle import demangle
from coreepi.reporting.crash_text import render_report
from test_signature import make_report

from corefactory import read_pt_loads

# -- demangling ------------------------------------------------------------


@pytest.mark.parametrize(
    ("mangled", "expected"),
    [
        # rustc 1.95.0's std (v0): no crate disambiguator (Cs…_) in the name
        ("_RNvNtNtNtCsjrHSEGnQ3l9_3std3sys3pal4unix14abort_internal",
         "std::sys::pal::unix::abort_internal"),
        ("_RNvCsfLfy6EI15iL_7___rustc10rust_panic", "__rustc::rust_panic"),
        # the same path from another toolchain's std demangles the same
        ("_RNvCs1234567890a_7___rustc10rust_panic", "__rustc::rust_panic"),
        ("_RNCNvNtCsjrHSEGnQ3l9_3std9panicking13panic_handler0B5_",
         "std::panicking::panic_handler::{closure:#0}"),
        # legacy: $u7b$ escapes decoded, the h<16 hex> hash dropped
        ("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h1234567890abcdefE",
         "std::rt::lang_start::{{closure}}"),
        ("_ZN4core9panicking18panic_bounds_check17h0123456789abcdefE",
         "core::panicking::panic_bounds_check"),
        # C++ and plain names are left to cxxfilt / unchanged
        ("_ZN3Foo3barEi", "Foo::bar(int)"),
        ("_Rnot_a_symbol", "_Rnot_a_symbol"),
        ("main", "main"),
    ],
)
def test_demangle_rust_and_cxx(mangled: str, expected: str) -> None:
    assert demangle(mangled) == expected


# -- Rust panics -----------------------------------------------------------


def test_rust_panic_signature_starts_at_the_users_frame(get_crash) -> None:
    """`v[i]` out of bounds in rscrash's main, panic = "abort": abort() under
    std's panic machinery (v0-mangled), signed by the user's frame, as
    Socorro's lists (core::panicking::, std::panicking:: irrelevant) do."""
    if shutil.which("rustc") is None:
        pytest.skip("rustc is not installed (needed to build the Rust crasher)")
    crash = get_crash("rust_panic")
    report = inspect_core(crash.core, exe=crash.binary)
    frames = [f.function or "" for f in report.crashed_thread.frames]
    # demangled, v0 crate hashes gone: the names no toolchain upgrade changes
    # (rustc >= 1.8x puts the runtime's hooks in `__rustc::`, older ones not)
    assert "std::process::abort" in frames
    assert "core::panicking::panic_bounds_check" in frames
    assert not any(f.startswith("_R") or "$u7b$" in f for f in frames), frames
    assert report.signature is not None
    assert report.signature.signature == "rust_panic::main | main"
    dropped = [s.before.split(" ", 1)[1] for s in report.signature.trail if s.rule == "prefix"]
    assert "std::process::abort" in dropped
    assert any(d.endswith("rust_panic") for d in dropped), dropped
    assert any(d.startswith("std::panicking::") for d in dropped), dropped
    # the panic, and its message from the payload String std formatted
    panic = next(p.evidence for p in report.phenotypes if p.name == "rust-panic")
    assert panic["panic_function"] == "core::panicking::panic_bounds_check"
    assert panic["panicking_frame"] == "rust_panic::main"
    assert panic["message"] == "index out of bounds: the len is 3 but the index is 8"


def test_rust_panic_needs_std_panicking_frames(get_crash) -> None:
    """A C++ abort (std::terminate, no std::panicking:: frame) is no Rust panic."""
    crash = get_crash("cxx_exception")
    report = inspect_core(crash.core, exe=crash.binary)
    assert "uncaught-exception" in {p.name for p in report.phenotypes}
    assert "rust-panic" not in {p.name for p in report.phenotypes}


# -- abort() in a fault handler (a JVM's own core) --------------------------


def test_abort_in_fault_handler_signs_the_interrupted_frames(get_crash) -> None:
    """store_field faults at 0x10; its SIGSEGV handler calls abort(). The
    core (SIGABRT) is signed from the interrupted frame and gets the
    null-deref at 0x10 from the signal frame's trap and cr2, as an hs_err
    log of the same JVM crash would say."""
    crash = get_crash("handler_abort@kernel")
    report = inspect_core(crash.core, exe=crash.binary)
    assert report.signal is not None and report.signal.name == "SIGABRT"
    assert report.signature is not None
    assert report.signature.signature == "store_field | handle_request | main"
    assert any(s.rule == "fault-handler" and "report_fatal" in s.before
               for s in report.signature.trail)
    by_name = {p.name: p.evidence for p in report.phenotypes}
    assert by_name["null-deref"]["fault_address"] == "0x10"
    assert by_name["null-deref"]["reported_by_signal_handler"] is True
    handler = by_name["signal-handler-active"]
    assert handler["interrupted_trap"] == "page fault"
    assert handler["interrupted_fault_address"] == "0x10"


def test_fault_handler_rule_needs_a_trap() -> None:
    """A handler of an asynchronous signal (no trap) keeps its frames, and so
    does a handler that itself crashed (SIGSEGV, not SIGABRT)."""
    frames = [("abort", "context"), ("on_term", "cfi"), ("__restore_rt", "cfi"),
              ("work", "cfi"), ("main", "cfi")]
    report = make_report(frames)
    pc = report.crashed_thread.frames[3].pc
    report.signal = SignalInfo(number=6, name="SIGABRT")
    report.phenotypes = [Phenotype(name="signal-handler-active",
                                   evidence={"interrupted_pc": f"0x{pc:x}"})]
    assert generate_signature(report).signature == "on_term | work | main"
    report.phenotypes[0].evidence["interrupted_trap"] = "page fault"
    assert generate_signature(report).signature == "work | main"
    report.signal = SignalInfo(number=11, name="SIGSEGV")
    assert generate_signature(report).signature == "on_term | work | main"


def test_hotspot_reporting_frames_are_prefix() -> None:
    """Without a signal frame, HotSpot's error path is still skipped:
    `os::abort | VMError::report_and_die | JVM_handle_linux_signal |
    Unsafe_PutLong` signs as Unsafe_PutLong's stack."""
    report = make_report([
        ("os::abort", "context"), ("VMError::report_and_die", "cfi"),
        ("JVM_handle_linux_signal", "cfi"), ("javaSignalHandler", "cfi"),
        ("__restore_rt", "cfi"), ("Unsafe_PutLong", "cfi"), ("JavaCalls::call", "cfi"),
    ])
    assert generate_signature(report).signature == "Unsafe_PutLong | JavaCalls::call"


# -- truncated cores -------------------------------------------------------


def _cut_at_stack(core: Path, sp: int, out: Path) -> Path:
    """``core`` cut (like ``head -c``) 64 bytes into the segment holding ``sp``."""
    seg = next(s for s in read_pt_loads(core) if s.vaddr <= sp < s.vaddr + s.memsz)
    out.write_bytes(core.read_bytes()[: seg.offset + 64])
    return out


def test_truncated_core_signature_is_marked(get_crash, tmp_path: Path) -> None:
    """The stack pages past the end of the file: the frames found end at
    store_field, and the signature says the rest is missing instead of
    opening a group `store_field`; the complete core is unchanged."""
    crash = get_crash("null_deref@kernel")
    full = inspect_core(crash.core, exe=crash.binary)
    assert full.signature.signature == "store_field | handle_request | main"
    sp = full.crashed_thread.frames[0].sp
    cut = inspect_core(_cut_at_stack(crash.core, sp, tmp_path / "core.cut"), exe=crash.binary)
    assert cut.core.truncated
    assert cut.signature.signature == f"store_field | {TRUNCATED_MARK}"
    lines = _first_screen(cut)
    assert "core truncated: the stack beyond frame 0 is missing" in lines
    assert "core truncated" not in _first_screen(full)


def _first_screen(report: CrashReport) -> str:
    """What ``coreepi inspect`` prints for ``report`` (no colour)."""
    console = Console(width=100, file=io.StringIO(), color_system=None)
    render_report(report, console)
    return console.file.getvalue()
