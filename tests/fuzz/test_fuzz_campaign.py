"""Coverage-guided fuzzing of every parser target for a bounded time (slow lane).

Each target runs under atheris (libFuzzer) for ``COREEPI_FUZZ_SECONDS``
(default 60) from its seed corpus, each input bounded to ``-timeout`` 20 s
and the process to ``-rss_limit_mb`` 2048. Passing means libFuzzer found no
input on which the parser raised anything but its clear error, hung, or
blew memory. A failure prints the input it wrote (``crash-…``): copy it to
``tests/fuzz/crashes/<target>/`` as a regression input, then fix the parser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from targets import CORPUS, TARGETS

pytestmark = pytest.mark.slow
atheris = pytest.importorskip("atheris", reason="atheris (x86-64 Linux wheels) not installed")
RUNNER = Path(__file__).resolve().parent / "run_fuzz.py"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz(name: str, tmp_path: Path) -> None:
    seconds = int(os.environ.get("COREEPI_FUZZ_SECONDS", "60"))
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS / name, work)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "COREEPI_FUZZ_SCRATCH": str(scratch)}
    proc = subprocess.run(
        [sys.executable, str(RUNNER), name, str(work), f"-max_total_time={seconds}",
         "-timeout=20", "-rss_limit_mb=2048", "-max_len=65536",
         f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        capture_output=True, text=True, env=env, timeout=seconds + 300, check=False)
    found = sorted(p.name for p in tmp_path.glob("*-*") if p.is_file())
    assert proc.returncode == 0 and not found, (
        f"{name}: fuzzing found {found} (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    assert "Done" in proc.stderr or "stat::number_of_executed_units" in proc.stderr
