"""Python frames inside a native core: a real CPython process that crashes in
native code, its core made as the suite makes its gcore cores (gdb runs the
interpreter, ``gcore`` at the fatal signal: tests/corefactory.py).

The interpreter is the one running this suite (``sys.executable``, resolved):
pystack reads it and its libpython to find the interpreter state. Expected
values come from the script (function names, marker lines) and the core's
notes read by eu-readelf (thread ids), not from coreepi.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from corefactory import CoreFactory, CrasherUnavailable, read_core_notes

from coreepi.model.report import CrashReport

pytest.importorskip("pystack")

SCRIPT = Path(__file__).resolve().parent / "crashers_python" / "crash_ctypes.py"
PYTHON = Path(os.path.realpath(sys.executable))


def line(marker: str) -> int:
    """1-based line of SCRIPT holding the comment ``# marker`` (exactly once)."""
    found = [n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1)
             if text.rstrip().endswith(f"# {marker}")]  # fmt: skip
    assert len(found) == 1, (marker, found)
    return found[0]


@pytest.fixture(scope="module")
def python_crash(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CrashReport]:
    """(core, analysed report) of crash_ctypes.py, made once."""
    from coreepi.ingest.artifacts import inspect_core

    root = tmp_path_factory.mktemp("python-crash")
    try:
        core, _out, _rc, live = CoreFactory(root)._gcore(PYTHON, [str(SCRIPT)], root, None)
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))
    assert live["signo"] == 11 and live["addr"] == 0  # SIGSEGV at NULL
    return core, inspect_core(core)


def test_python_frames_of_every_thread(python_crash: tuple[Path, CrashReport]) -> None:
    core, report = python_crash
    notes = read_core_notes(core)
    crashed_tid, other_tid = notes.threads[0].tid, notes.threads[1].tid
    assert len(notes.threads) == 2
    assert report.runtime.kind == "python"
    assert report.runtime.version == f"{sys.version_info.major}.{sys.version_info.minor}"

    def stack(tid: int) -> list[tuple[str, str | None, int | None]]:
        return [(f.function, f.file, f.line) for f in report.runtime.frames if f.thread_id == tid]

    assert stack(crashed_tid) == [
        ("write_record", str(SCRIPT), line("CRASH-LINE")),
        ("handle_request", str(SCRIPT), line("CALLER-LINE")),
        ("main", str(SCRIPT), line("MAIN-LINE")),
        ("<module>", str(SCRIPT), line("MODULE-LINE")),
    ]
    worker = stack(other_tid)
    assert worker[0][0] == "wait"  # threading.Event.wait, then Condition.wait's caller
    assert ("idle_worker", str(SCRIPT), line("WORKER-LINE")) in worker
    assert worker[-1][0] == "_bootstrap"  # threading.Thread._bootstrap starts every thread
    assert {f.kind for f in report.runtime.frames} == {"python"}


def test_signature_names_the_python_caller(python_crash: tuple[Path, CrashReport]) -> None:
    _core, report = python_crash
    assert report.signature is not None
    parts = report.signature.signature.split(" | ")
    # The native frame that faulted (libc's memset, any CPU variant),
    # then the Python functions in place of libffi, _ctypes and the interpreter.
    assert parts[0] == "memset"  # whichever memset the CPU got (cpu-variant rule)
    assert parts[1:] == [
        "crash_ctypes.write_record",
        "crash_ctypes.handle_request",
        "crash_ctypes.main",
        "crash_ctypes.<module>",
    ]
    frames = report.crashed_thread.frames  # type: ignore[union-attr]
    entry = frames[report.signature.frames_used[-1]]
    assert entry.module is not None and "libffi" in entry.module
    assert any(s.rule == "python-frames" and s.after == "python: crash_ctypes.write_record"
               for s in report.signature.trail)  # fmt: skip


def test_native_core_has_no_python_runtime(parsed_report: Callable[[str], CrashReport]) -> None:
    report = parsed_report("null_deref")
    assert report.runtime.kind == "native" and report.runtime.frames == []
    assert not [w for w in report.analysis.warnings if "pystack" in w or "CPython" in w]


def _inspect_text(core: Path, *args: str) -> list[str]:
    """``coreepi inspect CORE ARGS`` run as a user runs it; its stdout lines."""
    import subprocess

    coreepi = Path(sys.executable).with_name("coreepi")
    proc = subprocess.run([str(coreepi), "inspect", str(core), *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_text_view_shows_the_python_stack(python_crash: tuple[Path, CrashReport]) -> None:
    core, _report = python_crash
    crashed_tid, other_tid = (t.tid for t in read_core_notes(core).threads)
    lines = _inspect_text(core)
    head = lines.index(f"Python stack of thread {crashed_tid} (most recent call first):")
    assert lines[head + 1 : head + 5] == [
        f"    write_record ({SCRIPT}:{line('CRASH-LINE')})",
        f"    handle_request ({SCRIPT}:{line('CALLER-LINE')})",
        f"    main ({SCRIPT}:{line('MAIN-LINE')})",
        f"    <module> ({SCRIPT}:{line('MODULE-LINE')})",
    ]
    assert not any(f"thread {other_tid}" in text for text in lines)  # only with --all-threads


def test_text_view_shows_every_threads_python_stack(
    python_crash: tuple[Path, CrashReport],
) -> None:
    core, _report = python_crash
    other_tid = read_core_notes(core).threads[1].tid
    lines = _inspect_text(core, "--all-threads")
    head = lines.index(f"Python stack of thread {other_tid} (most recent call first):")
    worker = lines[head + 1 :]
    assert re.fullmatch(r"    wait \(/\S+/threading\.py:\d+\)", worker[0])  # Event.wait
    assert f"    idle_worker ({SCRIPT}:{line('WORKER-LINE')})" in worker
    assert any(text.startswith("    _bootstrap (") for text in worker)
