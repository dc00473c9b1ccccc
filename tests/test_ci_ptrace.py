"""The ptrace supervisor's cores are real ELF cores: coreepi, gdb and
eu-stack read the same crash from them (threads, registers, siginfo, the
stack), and the traced process still dies of its own signal."""

from __future__ import annotations

import platform
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from cikit import Suite, build_suite

from coreepi.capture.supervise.tracer import run_traced
from coreepi.ingest.artifacts import inspect_file

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="expectations are x86-64 ones")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return build_suite(tmp_path_factory.mktemp("ptrace-suite"))


def test_segv_in_a_forked_child(suite: Suite, tmp_path: Path) -> None:
    result = run_traced([str(suite.root / "segv_child")], tmp_path)
    assert result.returncode == 1  # the parent saw its child killed and said so
    (crash,) = result.crashes
    assert crash.signal == signal.SIGSEGV and crash.comm == "segv_child" and crash.error is None
    assert crash.core is not None and crash.seconds < 2.0
    (report,) = inspect_file(crash.core)
    assert report.process.pid == crash.pid
    assert report.signal is not None and report.signal.si_code_name == "SEGV_MAPERR"
    assert report.signal.fault_address == 0x10  # offsetof(struct record, value)
    assert [p.name for p in report.phenotypes] == ["null-deref"]
    frames = report.crashed_thread.frames  # type: ignore[union-attr]
    assert [f.function for f in frames[:3]] == ["poke_record", "child_work", "main"]
    if shutil.which("gdb"):
        out = subprocess.run(["gdb", "-batch", "-nx", "-ex", "bt", "-ex",
                              "p/x $_siginfo._sifields._sigfault.si_addr",
                              str(suite.root / "segv_child"), str(crash.core)],
                             capture_output=True, text=True, timeout=120).stdout
        assert re.search(r"#0 .*poke_record", out) and re.search(r"#1 .*child_work", out), out
        assert "= 0x10" in out
        assert "Program terminated with signal SIGSEGV" in out


def test_abort_in_a_thread_has_every_thread(suite: Suite, tmp_path: Path) -> None:
    result = run_traced([str(suite.root / "thread_abort")], tmp_path)
    assert result.returncode == -signal.SIGABRT  # it still died of its own signal
    (crash,) = result.crashes
    assert crash.core is not None
    (report,) = inspect_file(crash.core)
    assert len(report.threads) == 2
    crashed = report.crashed_thread
    assert crashed is not None and crashed.tid != report.process.pid  # the worker thread
    names = [(f.function or "").split("(")[0] for f in crashed.frames]  # demangled: f(int)
    assert names.index("check_invariant") + 1 == names.index("worker_loop")
    if shutil.which("eu-stack"):
        out = subprocess.run(["eu-stack", "--core", str(crash.core), "-e",
                              str(suite.root / "thread_abort")],
                             capture_output=True, text=True, timeout=120).stdout
        assert out.count("TID ") == 2
        # the main thread may still be inside clone3 (the worker aborts at once)
        assert re.search(r"check_invariant.*\n.*worker_loop", out), out


def test_caught_signal_is_not_a_crash(tmp_path: Path) -> None:
    # a shell that traps SEGV survives it: no core, and its status is its own
    result = run_traced(["sh", "-c", "trap 'exit 7' SEGV; kill -SEGV $$; exit 0"], tmp_path)
    assert result.returncode == 7
    assert result.crashes == []
    assert list(tmp_path.iterdir()) == []
