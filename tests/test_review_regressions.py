"""Regressions found by a review of ``coreepi inspect`` and the analyzer on
real cores made here (gcc + gdb ``gcore``; x86-64).

Each test names the bug it pins down.
"""

from __future__ import annotations

import io
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from coreepi.errors import InputError
from coreepi.ingest.artifacts import inspect_core, inspect_file
from coreepi.model.report import CrashReport, FrameTrust
from coreepi.reporting.crash_text import frame_label, render_report

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or not (shutil.which("gcc") and shutil.which("gdb")),
    reason="needs x86-64, gcc and gdb",
)


def _core(tmp_path: Path, name: str, source: str, flags: list[str], args: list[str] = ()) -> tuple[Path, Path]:
    """Build ``source`` and write a core with gdb's gcore at its fatal signal."""
    suffix = ".cpp" if "g++" in flags[:1] else ".c"
    compiler = flags[0] if flags and flags[0] in ("gcc", "g++") else "gcc"
    flags = [f for f in flags if f not in ("gcc", "g++")]
    src = tmp_path / f"{name}{suffix}"
    src.write_text(source)
    exe = tmp_path / name
    subprocess.run([compiler, *flags, "-g", "-o", str(exe), str(src)], check=True)
    core = tmp_path / f"{name}.core"
    subprocess.run(
        ["gdb", "-batch", "-nx", "-q", "-ex", "run", "-ex", f"gcore {core}", "--args", str(exe), *args],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    if not core.is_file() or core.stat().st_size == 0:
        pytest.skip(f"gdb wrote no core for {name}")
    return core, exe


# A static callee that needs no 16-byte alignment is called straight from its
# caller's entry (GCC -O2: `frameless_caller: call victim; ...`), so after the
# victim's return address is zeroed and `ret` jumps to 0, the word at sp is
# the frameless caller's own return address -- ordinary code, no off-by-8.
RETURN_TO_NULL_FRAMELESS = r"""
volatile long sink;
static __attribute__((noinline)) void victim(long v) {
    void **slot = (void **)((char *)__builtin_dwarf_cfa() - 8);
    *(void *volatile *)slot = 0;
    sink = v;
}
static __attribute__((noinline)) void frameless_caller(long v) {
    victim(v);
    sink += 1;
}
__attribute__((noinline)) long outer(long n) {
    long t = 0;
    for (long i = 0; i < n; i++) t += i;
    frameless_caller(t);
    sink += t;
    return t;
}
int main(void) { return (int)outer(5); }
"""


def _names(report: CrashReport) -> set[str]:
    return {p.name for p in report.phenotypes}


def test_return_to_null_in_O2_code_is_not_stack_misaligned(tmp_path: Path) -> None:
    """Bug: stack-misaligned (hardware-indicative, confidence 0.9) fired on an
    ordinary -O2 return-to-NULL, and its `exe` signature swallowed the crash
    into the hardware bucket."""
    core, exe = _core(tmp_path, "rz", RETURN_TO_NULL_FRAMELESS, ["gcc", "-O2"])
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(exe)], capture_output=True, text=True).stdout
    body = dis.split("<frameless_caller>:", 1)[1].split("\n\n", 1)[0]
    if "call" not in body.splitlines()[1]:
        pytest.skip("this gcc does not call victim from frameless_caller's entry")
    report = inspect_core(core, exe=exe)
    names = _names(report)
    assert "return-to-null" in names, names
    assert "stack-misaligned" not in names, report.phenotypes
    assert report.signature is not None
    assert report.signature.signature.startswith("return-to-null | frameless_caller | outer"), (
        report.signature.signature
    )


INLINED_AT = r"""
#include <vector>
namespace app {
template <class T> struct Box {
    T v;
    __attribute__((noinline)) T get(const std::vector<T>& x) { return x.at(v); }
};
}
int main() { app::Box<int> b{5}; std::vector<int> v(2); return b.get(v); }
"""


def test_physical_frame_after_inlined_frames_is_kept(tmp_path: Path) -> None:
    """Bug: stack scanning took the physical frame that follows its inlined
    frames (same pc, same sp) for an unwinding loop, dropped it and every
    CFI caller, and replaced them with scanned guesses; the signature lost
    the application frame (`_M_range_check | at`)."""
    core, exe = _core(tmp_path, "cx", INLINED_AT, ["g++", "-O2"])
    report = inspect_core(core, exe=exe)
    thread = report.crashed_thread
    assert thread is not None
    funcs = [f.function or "" for f in thread.frames]
    get = next(i for i, f in enumerate(funcs) if f.startswith("app::Box<int>::get"))
    assert funcs[get + 1] == "main", funcs
    assert all(f.trust != FrameTrust.SCAN for f in thread.frames), [
        (f.function, f.trust) for f in thread.frames
    ]
    assert report.signature is not None
    assert "app::Box" in report.signature.signature, report.signature.signature

    # Rendering: names and paths from the core are text, never Rich markup
    # (bug: "[inlined]" and "[clone .isra.0]" vanished as markup tags, and a
    # path with "[/x]" raised MarkupError); at 80 columns a frame folds
    # instead of losing its +0xoffset to an ellipsis.
    report.modules[0].path = "/srv/[/x]/[bold]evil"
    console = Console(width=80, record=True, color_system=None)
    render_report(report, console)
    text = console.export_text()
    assert "[inlined]" in text and "[clone" in text
    assert "[/x]" in text and "[bold]" in text
    assert "libstdc++.so.6+…" not in text


HANDLER_CRASH = r"""
#include <signal.h>
volatile int *gp;
void handler(int s) { *gp = s; }
int main(void) { signal(SIGUSR1, handler); raise(SIGUSR1); return 0; }
"""


def test_signal_trampoline_is_named_and_left_out_of_the_signature(tmp_path: Path) -> None:
    """Bug: drgn looks a caller frame's symbol up at pc - 1, which for the
    signal trampoline is the padding before ``__restore_rt``: the frame came
    back unnamed and the signature carried ``libc.so.6+0x3c050``, an offset
    that differs with every libc build (one bug, one bucket per libc)."""
    src = tmp_path / "h.c"
    src.write_text(HANDLER_CRASH)
    exe = tmp_path / "h"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(exe), str(src)], check=True)
    core = tmp_path / "h.core"
    subprocess.run(
        ["gdb", "-batch", "-nx", "-q", "-ex", "handle SIGUSR1 nostop noprint pass", "-ex", "run",
         "-ex", f"gcore {core}", "--args", str(exe)],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    if not core.is_file():
        pytest.skip("gdb wrote no core")
    report = inspect_core(core, exe=exe)
    thread = report.crashed_thread
    assert thread is not None
    assert thread.frames[0].function == "handler"
    assert thread.frames[1].function == "__restore_rt", thread.frames[1]
    assert report.signature is not None
    sig = report.signature.signature
    assert sig.startswith("handler | ") and "+0x" not in sig and "__restore_rt" not in sig, sig
    active = next(p for p in report.phenotypes if p.name == "signal-handler-active")
    assert active.evidence["restore_rt_frame"] == 1


def test_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Bug: `coreepi inspect FIFO` blocked forever in open()."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        inspect_file(fifo)


def test_truncated_zstd_core_is_a_decompression_error(tmp_path: Path) -> None:
    """Bug: zstd's stream_reader ends quietly at a cut frame, so a truncated
    .zst core was parsed short and reported as "core has no NT_PRSTATUS
    note", naming a temporary file instead of the user's."""
    zstandard = pytest.importorskip("zstandard")
    core, _ = _core(tmp_path, "rz", RETURN_TO_NULL_FRAMELESS, ["gcc", "-O2"])
    data = zstandard.ZstdCompressor().compress(core.read_bytes())
    whole = tmp_path / "c.zst"
    whole.write_bytes(data + data)  # two frames: still one valid core
    assert inspect_file(whole)[0].signal is not None
    cut = tmp_path / "cut.zst"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        inspect_file(cut)
    assert err.value.source == str(cut) and "zstd" in err.value.reason


def test_exe_that_does_not_exist_is_an_input_error(get_crash) -> None:  # type: ignore[no-untyped-def]
    crash = get_crash("null_deref")
    result = subprocess.run(
        [sys.executable, "-m", "coreepi", "inspect", str(crash.core), "--exe", "/nonexistent/x"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == "coreepi: error: /nonexistent/x: --exe: no such executable file\n"


def test_exe_with_another_build_id_is_not_used_and_says_so(get_crash) -> None:  # type: ignore[no-untyped-def]
    from coreepi.parse.elf.core import parse_core

    crash, other = get_crash("null_deref"), get_crash("ud2")
    report = parse_core(crash.core, exe=other.binary)
    main = report.modules[0]
    assert main.build_id is not None
    assert any(
        w.startswith(f"--exe {other.binary}: its build-id ") and w.endswith(
            f" is not the core's {main.build_id}; not used")
        for w in report.analysis.warnings
    ), report.analysis.warnings
    # and the right frames still come from the core's own executable
    assert report.crashed_thread is not None
    assert report.crashed_thread.frames[0].function == parse_core(crash.core).crashed_thread.frames[0].function  # type: ignore[union-attr]


LONG_NAMES = r"""
volatile int *gp;
__attribute__((noinline)) void dereference_the_upstream_balancer_slot(void) { *gp = 1; }
__attribute__((noinline)) void handle_incoming_request_from_the_balancer(void) {
    dereference_the_upstream_balancer_slot(); __asm__ volatile("");
}
int main(void) { handle_incoming_request_from_the_balancer(); return 0; }
"""


def test_narrow_console_never_splits_a_symbol_build_id_or_path(tmp_path: Path) -> None:
    """breaker4 #18: at 80 columns the frames and modules tables folded
    identifiers mid-word ("__libc_start_call_mai" / "n+0x7a") and build-ids
    and paths. Below the width a table needs, they are lists that wrap at
    spaces; wide enough, the tables stay."""
    deep = tmp_path / "srv" / "applications" / "balancer-frontend"
    deep.mkdir(parents=True)
    core, exe = _core(deep, "balancer_frontend_daemon", LONG_NAMES, ["gcc", "-O1"])
    report = inspect_core(core, exe=exe)
    thread = report.crashed_thread
    assert thread is not None
    labels = [frame_label(f) for f in thread.frames]
    assert any(label.startswith("handle_incoming_request_from_the_balancer+0x")
               for label in labels), labels
    tokens = labels + [m.path for m in report.modules[:15]]
    tokens += [m.build_id for m in report.modules[:15] if m.build_id]
    for record in (False, True):  # the fast path and Rich's own
        console = Console(width=80, record=record, color_system=None, file=io.StringIO())
        render_report(report, console)
        lines = (console.export_text() if record else console.file.getvalue()).splitlines()
        assert all(len(line) <= 80 for line in lines)
        split = [t for t in tokens if len(t) <= 80 and not any(t in line for line in lines)]
        assert split == [], "\n".join(lines)
    wide = Console(width=400, color_system=None, file=io.StringIO())
    render_report(report, wide)
    assert "┃ frame" in wide.file.getvalue() and "┃ build-id" in wide.file.getvalue()
