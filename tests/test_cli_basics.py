"""The CLI shell: version, errors as one line with exit status 2."""

import subprocess
import sys
from pathlib import Path

import coreepi


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coreepi", *args], capture_output=True, text=True, timeout=120
    )


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"coreepi {coreepi.__version__}"


def test_missing_file_is_one_line_exit_2(tmp_path: Path) -> None:
    result = run("inspect", str(tmp_path / "nope.core"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "nope.core: no such file" in result.stderr
    assert "Traceback" not in result.stderr
