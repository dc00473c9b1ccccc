"""``coreepi worker`` in-process on a real embedded store: its summary in words,
a missing --tmp-dir or data dir refused with one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.store import DuckDBStore


def test_worker_once_says_the_queue_in_words(tmp_path: Path) -> None:
    data = tmp_path / "data"
    DuckDBStore(data).close()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    r = CliRunner().invoke(app, ["worker", "--data-dir", str(data), "--tmp-dir", str(scratch),
                                 "--once"])
    assert (r.exit_code, r.stdout) == (0, "ran 0 jobs; queued 0, running 0, done 0, dead 0\n")


def test_worker_refuses_a_missing_tmp_dir_or_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    DuckDBStore(data).close()
    missing = tmp_path / "nonexist" / "x"
    r = CliRunner().invoke(app, ["worker", "--data-dir", str(data), "--tmp-dir", str(missing),
                                 "--once"])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"coreepi: error: --tmp-dir {missing}: no such directory\n"
    assert not missing.exists()
    r = CliRunner().invoke(app, ["worker", "--data-dir", str(missing), "--once"])
    assert r.exit_code == 2 and f"{missing}: no coreepi store here" in r.stderr
    assert not missing.exists()
