"""`coreepi reanalyze` on a real Dask LocalCluster (2 worker processes) over
real cores stored by ingest: results written in place with the analyzer and
rules versions, a second run does nothing, the regroup history names the
split; and the regroup summary on known mappings."""

from __future__ import annotations

import json
import re
import socket
import warnings
from pathlib import Path
from typing import Any

import duckdb
from fleetfactory import CoreSet, coreset  # noqa: F401
from test_ingest import make_fleet
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.reanalysis.batch import marker, rules_version
from coreepi.reanalysis.regroup import regroup_history
from coreepi.store import open_store


def signatures(store: Any) -> dict[str, str | None]:
    frame = store.crash_frame()
    return {c: s if isinstance(s, str) else None for c, s in zip(frame["crash_id"],
                                                                 frame["signature"], strict=True)}


def test_regroup_split_merge_rename() -> None:
    h = regroup_history([
        ("c1", "A", "A1"), ("c2", "A", "A2"), ("c3", "A", "A2"),   # A split in A1, A2
        ("c4", "B", "M"), ("c5", "C", "M"),                        # B and C merged in M
        ("c6", "D", "E"),                                          # D renamed E
        ("c7", "F", "F"), ("c7", "F", "F"),                        # unchanged, counted once
        ("c8", None, "G"),                                         # a signature where none was
    ])
    assert (h.crashes, h.moved) == (8, 7)
    assert [(c.group, c.others) for c in h.splits] == [("A", {"A2": 2, "A1": 1})]
    assert [(c.group, c.others) for c in h.merges] == [("M", {"B": 1, "C": 1})]
    assert h.renames == [("D", "E"), (None, "G")]
    assert h.lines()[0] == ("8 crashes re-analysed, 7 moved to another group; 1 groups split, "
                            "1 merged, 2 renamed")
    assert "split: 'A' -> 'A2' (2), 'A1' (1)" in h.lines()
    assert {"old_signature": "B", "new_signature": "M", "crashes": 1} in h.as_rows()


def test_reanalyze_on_dask(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    data = tmp_path / "data"
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(make_fleet(tmp_path, coreset)), "--data-dir",
                              str(data)])
    assert res.exit_code == 0, res.output
    with open_store(data, read_only=True) as store:
        truth = signatures(store)
    # the rules of "last year": each crash of today's 'main' group in a group of its own
    with duckdb.connect(str(data / "coreepi.duckdb")) as con:
        con.execute("UPDATE crashes SET signature = 'old-' || crash_id WHERE signature = 'main' "
                    "AND blob_key IS NOT NULL")
        n_main, n_stored = con.execute(
            "SELECT count(*) FILTER (WHERE signature LIKE 'old-%'), count(*) "
            "FROM crashes WHERE blob_key IS NOT NULL").fetchone() or (0, 0)
    assert n_main >= 2 and n_stored > n_main  # some stored cores are not cores at all
    hist = tmp_path / "history.json"
    # Dask's default dashboard port, taken: no "Port 8787 is already in use" warning
    with socket.socket() as taken, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            taken.bind(("127.0.0.1", 8787))
            taken.listen()
        except OSError:
            pass  # taken already
        res = runner.invoke(app, ["reanalyze", "--data-dir", str(data), "--workers", "2",
                                  "--history", str(hist)])
    assert res.exit_code == 0, res.output
    assert not [w for w in caught if "8787" in str(w.message)]
    failed = n_stored - n_main
    assert f"{n_main} written, {failed} failed" in res.output
    assert (f"{n_main} crashes re-analysed, {n_main} moved to another group; 0 groups split, "
            "1 merged") in res.output
    assert re.search(r"merge: ('old-\S+' \(1\)(, )?){%d} -> 'main'" % n_main, res.output)
    assert res.output.count("unreadable-core") == failed  # named, never dropped
    rows = json.loads(hist.read_text())
    assert {r["new_signature"] for r in rows} == {"main"} and len(rows) == n_main
    run_id = re.search(r"regroup history stored as run (\S+) ", res.output)
    assert run_id is not None
    with open_store(data, read_only=True) as store:
        after = signatures(store)
        reports = store.get_reports(list(after))
        lineage = store.group_lineage("main")
    assert after == truth  # today's rules give today's signatures back
    assert {(r.run_id, r.new_signature, r.crashes, r.change, r.rules_version)
            for r in lineage} == {(run_id.group(1), "main", 1, "merge", rules_version())}
    assert len(lineage) == n_main
    note = marker(rules_version())
    assert sum(note in r.analysis.warnings for r in reports.values()) == n_main
    # idempotent: under the same rules only the unreadable cores are tried again
    # (by cold children this time: the same failures, named the same way)
    res = runner.invoke(app, ["reanalyze", "--data-dir", str(data), "--workers", "1", "--cold"])
    assert res.exit_code == 0, res.output
    assert f"0 written, {failed} failed" in res.output and "0 crashes re-analysed" in res.output
    assert res.output.count("unreadable-core") == failed and "stored as run" not in res.output


def test_reanalyze_bad_where(tmp_path: Path) -> None:
    open_store(tmp_path / "d").close()
    res = CliRunner().invoke(app, ["reanalyze", "--data-dir", str(tmp_path / "d"),
                                   "--where", "report=x"])
    assert res.exit_code == 2
    assert "--where 'report=x': expected COLUMN=VALUE" in res.output


def test_reanalyze_bad_scheduler_and_history_path(tmp_path: Path) -> None:
    """One line, exit 2, before any work: a scheduler address Dask cannot use,
    a --history file in a directory that does not exist."""
    open_store(tmp_path / "d").close()
    res = CliRunner().invoke(app, ["reanalyze", "--data-dir", str(tmp_path / "d"),
                                   "--scheduler", "http://x"])
    assert res.exit_code == 2, res.output
    assert "--scheduler http://x: cannot connect (unknown address scheme" in res.output
    res = CliRunner().invoke(app, ["reanalyze", "--data-dir", str(tmp_path / "d"),
                                   "--history", str(tmp_path / "no" / "h.json")])
    assert res.exit_code == 2
    assert f"--history {tmp_path / 'no' / 'h.json'}: no such directory" in res.output
