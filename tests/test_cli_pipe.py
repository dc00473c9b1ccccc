"""Standard output closed by its reader: exit status 141 (128 + SIGPIPE), as
docs/cli.md says, also when the output is one large write (before: a
`coreepi list --json | head -c 10` exited 0, CPython's buffered writer
dropping the rest of a large write without an error). Real pipes, a real
`coreepi` process, a store of 2,000 crashes (list: ~160 KB of text, ~1 MB
of JSON, well past the pipe's 64 KiB)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreepi.model.report import AnalysisInfo, CrashReport, Signature, Source
from coreepi.store import CrashRecord, DuckDBStore

CRASHES = 2000


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("pipe") / "data"
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    with DuckDBStore(data) as store:
        store.add_crashes([CrashRecord(CrashReport(
            crash_id=f"{i:016x}", host_id=f"h-{i % 50:03}", source=Source.ELF_CORE,
            captured_at=t0 + timedelta(minutes=i),
            signature=Signature(signature=f"frame_{i % 7} | handle_request | serve_batch | main"),
            analysis=AnalysisInfo(analyzer_version="test"))) for i in range(CRASHES)])
    return data


def _closed_early(args: list[str], first: int) -> tuple[int, bytes]:
    """Run coreepi ``args`` into a pipe whose reader takes ``first`` bytes
    and closes it; (exit status, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "coreepi", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    got = proc.stdout.read(first)
    assert len(got) == first
    proc.stdout.close()
    err = proc.stderr.read()
    return proc.wait(timeout=120), err


@pytest.mark.parametrize("args", [["list", "--json"], ["list", "--no-pager"], ["list"]])
def test_a_closed_pipe_is_status_141(data_dir: Path, args: list[str]) -> None:
    status, err = _closed_early([*args, "--data-dir", str(data_dir)], 10)
    assert (status, err) == (141, b"")


def test_the_whole_output_when_the_reader_reads_it(data_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "coreepi", "list", "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == CRASHES + 1
    assert len(done.stdout) > 1 << 16
