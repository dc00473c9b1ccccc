"""Programs that ptrace themselves run under ``ci run --capture ptrace`` as
they do without coreepi: an AddressSanitizer test keeps its LeakSanitizer
check (a clean one stays green, a leaking one keeps its leak report) and gdb
can run its inferior. The supervisor lets them go at exec and says so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cikit import Suite, build_suite, coreepi

OK = '#include <stdio.h>\nint main(void) { puts("fine"); return 0; }\n'
LEAK = ('#include <stdlib.h>\n#include <stdio.h>\n'
        'int main(void) { void *p = malloc(77); printf("%p\\n", p); p = 0; return 0; }\n')


def _asan(tmp: Path, name: str, source: str, *flags: str) -> Path:
    (tmp / f"{name}.c").write_text(source)
    r = subprocess.run(["gcc", "-fsanitize=address", *flags, "-g", "-O0", "-o", str(tmp / name),
                        str(tmp / f"{name}.c")], capture_output=True, text=True, timeout=120,
                       check=False)
    if r.returncode != 0:
        pytest.skip(f"gcc cannot build AddressSanitizer programs here: {r.stderr[-200:]}")
    return tmp / name


@pytest.mark.parametrize("flags", [(), ("-static-libasan",)], ids=["libasan.so", "static"])
def test_clean_asan_program_stays_green(tmp_path: Path, flags: tuple[str, ...]) -> None:
    program = _asan(tmp_path, "okasan", OK, *flags)
    r = coreepi("ci", "run", "--capture", "ptrace", "--", str(program), cwd=tmp_path)
    assert "LeakSanitizer has encountered a fatal error" not in r.stderr, r.stderr
    assert r.returncode == 0 and r.stdout == "fine\n", r.stderr
    assert "okasan) runs untraced" in r.stderr and "AddressSanitizer" in r.stderr


def test_leaking_asan_program_keeps_its_leak_report(tmp_path: Path) -> None:
    program = _asan(tmp_path, "leak", LEAK)
    alone = subprocess.run([str(program)], capture_output=True, text=True, timeout=60,
                           check=False)
    r = coreepi("ci", "run", "--capture", "ptrace", "--", str(program), cwd=tmp_path)
    assert "detected memory leaks" in r.stderr and "leak.c:3" in r.stderr, r.stderr
    assert "Direct leak of 77 byte(s) in 1 object(s)" in r.stderr
    assert r.returncode == alone.returncode == 1  # ASan's exitcode, as without coreepi


@pytest.mark.skipif(shutil.which("gdb") is None, reason="no gdb")
def test_gdb_can_run_its_inferior(tmp_path: Path) -> None:
    suite: Suite = build_suite(tmp_path / "suite")
    r = coreepi("ci", "run", "--capture", "ptrace", "--", "gdb", "-batch", "-nx", "-ex", "run",
                "-ex", "bt", "--args", str(suite.root / "thread_abort"), cwd=tmp_path)
    assert "ptrace: Operation not permitted" not in r.stdout + r.stderr
    assert "received signal SIGABRT" in r.stdout, r.stdout + r.stderr
    assert "check_invariant" in r.stdout and "worker_loop" in r.stdout
    assert "(gdb) runs untraced" in r.stderr and "gdb uses ptrace itself" in r.stderr
