"""The CLI shell: version, errors as one line with exit status 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401

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


@pytest.mark.parametrize("args,message", [
    (["inspect"], "coreepi: error: coreepi inspect: Missing argument 'FILE'. "
                  "(see coreepi inspect --help)"),
    (["ingest", "-j", "0", "x"], "coreepi: error: coreepi ingest: Invalid value for '--jobs' / "
                                 "'-j': Input should be greater than or equal to 1 "
                                 "(see coreepi ingest --help)"),
    (["serve", "--port", "99999"], "coreepi: error: coreepi serve: Invalid value for '--port': "
                                   "Input should be less than or equal to 65535 "
                                   "(see coreepi serve --help)"),
    (["no-such-command"], "coreepi: error: coreepi: No such command 'no-such-command'. "
                          "(see coreepi --help)"),
])
def test_usage_error_is_one_line_exit_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert (result.stderr, result.stdout) == (message + "\n", "")


def test_help_and_bare_command_keep_clicks_help() -> None:
    helped = run("ingest", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: coreepi ingest")
    bare = run()
    assert bare.returncode == 2 and "Commands" in bare.stderr + bare.stdout


@pytest.mark.parametrize("args", [["schema"], ["inspect", "{core}"]])
def test_closed_stdout_ends_quietly_with_status_141(coreset: CoreSet, args: list[str]) -> None:  # noqa: F811
    """``coreepi … | head -1`` once the reader has gone: like coreutils, a
    status of 128 + SIGPIPE and nothing on stderr (1 would mean a bug of
    ours). Both ways in: Typer's (schema) and inspect's own."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE
    try:
        result = subprocess.run(
            [sys.executable, "-m", "coreepi", *(a.format(core=coreset.cores[0]) for a in args)],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")
