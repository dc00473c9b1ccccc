"""An operator's rule change without editing the package: ``--siglists DIR``
(or ``COREEPI_SIGLISTS``) reaches the analysis of ``inspect`` and of
``reanalyze``'s Dask workers, moves stored crashes to the new signature, is
part of the rules version (dropping it re-analyses again), and a successful
``reanalyze`` leaves no Dask traceback on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
from fleetfactory import CoreSet, coreset  # noqa: F401
from test_ingest import make_fleet
from test_scale_reanalyze import signatures
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.store import open_store

COREEPI = str(Path(sys.executable).with_name("coreepi"))


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COREEPI, *argv], capture_output=True, text=True, timeout=600,
                          check=False, env=env)


def test_siglists_change_stored_signatures(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    data = tmp_path / "data"
    res = CliRunner().invoke(app, ["ingest", str(make_fleet(tmp_path, coreset)), "--data-dir",
                                   str(data)])
    assert res.exit_code == 0, res.output
    with open_store(data, read_only=True) as store:
        before = signatures(store)
    with duckdb.connect(str(data / "coreepi.duckdb"), read_only=True) as con:
        mains = sorted(r[0] for r in con.execute(
            "SELECT crash_id FROM crashes WHERE signature = 'main' AND blob_key IS NOT NULL"
        ).fetchall())  # the crashes with a stored core: reanalyze's
    assert len(mains) >= 2
    lists = tmp_path / "siglists"
    lists.mkdir()
    (lists / "irrelevant.txt").write_text("# ours: main says nothing of the bug\nmain\n")

    # what the new rules give one of these cores, from inspect (option and variable)
    core = str(coreset.cores[0])
    plain = json.loads(run("inspect", core, "--json").stdout)["signature"]["signature"]
    ours = json.loads(run("inspect", core, "--json", "--siglists", str(lists)).stdout)
    by_env = json.loads(run("inspect", core, "--json",
                            env={**os.environ, "COREEPI_SIGLISTS": str(lists)}).stdout)
    assert plain == "main"
    new = ours["signature"]["signature"]
    assert new != "main" and by_env["signature"]["signature"] == new

    proc = run("reanalyze", "--data-dir", str(data), "--workers", "2", "--siglists", str(lists))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr
    assert (f"{len(mains)} crashes re-analysed, {len(mains)} moved to another group; "
            "0 groups split, 0 merged, 1 renamed") in proc.stdout
    assert f"rename: 'main' -> '{new}'" in proc.stdout
    with open_store(data, read_only=True) as store:
        after = signatures(store)
    assert {after[c] for c in mains} == {new}
    assert {c: s for c, s in after.items() if c not in mains} == {
        c: s for c, s in before.items() if c not in mains}

    # without the lists the rules differ again: every crash is selected, back to 'main'
    proc = run("reanalyze", "--data-dir", str(data), "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    assert f"{len(mains)} moved to another group" in proc.stdout
    with open_store(data, read_only=True) as store:
        assert signatures(store) == before


def test_ingest_with_siglists(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    """New cores land under the operator's rules too (a subprocess: the
    option sets the environment of the process that reads it). A report
    made on the node (report.json) keeps the signature the node gave it."""
    lists = tmp_path / "siglists"
    lists.mkdir()
    (lists / "irrelevant.txt").write_text("main\n")
    core = str(coreset.cores[0])
    new = json.loads(run("inspect", core, "--json", "--siglists", str(lists)).stdout)
    proc = run("ingest", str(make_fleet(tmp_path, coreset)), "--data-dir", str(tmp_path / "d"),
               "--siglists", str(lists))
    assert proc.returncode == 0, proc.stderr
    with duckdb.connect(str(tmp_path / "d" / "coreepi.duckdb"), read_only=True) as con:
        got = dict(con.execute("SELECT artifact, signature FROM crashes WHERE core_status = "
                               "'stored'").fetchall())  # the cores ingest analysed
    assert {Path(a).name: s for a, s in got.items()} == {
        name: new["signature"]["signature"] for name in ("core.1", "core.2.zst", "core.3.gz")}


def test_bad_siglists_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "prefix.txt").write_text("ok_frame\n(unclosed\n")
    for args, want in (
        (["--siglists", str(tmp_path / "none")], "no such directory"),
        (["--siglists", str(tmp_path / "empty")], "holds none of prefix.txt, irrelevant.txt"),
        (["--siglists", str(bad)], "bad regular expression in prefix.txt: '(unclosed'"),
    ):
        proc = run("reanalyze", "--data-dir", str(tmp_path / "d"), *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"coreepi: error: --siglists (COREEPI_SIGLISTS) {args[1]}: "
                                      f"{want}"), proc.stderr
        assert len(proc.stderr.splitlines()) == 1
    proc = run("inspect", "/etc/hostname", env={**os.environ, "COREEPI_SIGLISTS": str(bad)})
    assert proc.returncode == 2 and "bad regular expression in prefix.txt" in proc.stderr
