"""A crash whose core ``coreepi store prune`` deleted: ``list`` and ``info``
say pruned, ``dump`` one line, ``reanalyze`` names it and goes on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.model.report import AnalysisInfo, CoreInfo, CrashReport, Source
from coreepi.reanalysis.batch import Settings, Target, WarmAnalyzer
from coreepi.store import CoreStatus, CrashRecord, DuckDBStore
from coreepi.store.duckdb_store import BLOB_DIR

CRASH = "ab" * 16


def _pruned_store(data: Path) -> str:
    with DuckDBStore(data) as store:
        key = store.blobs.put_bytes(b"\x7fELF a core")
        report = CrashReport(crash_id=CRASH, host_id="h-002", source=Source.ELF_CORE,
                             captured_at=datetime(2024, 1, 1, tzinfo=UTC),
                             core=CoreInfo(stored=True, size_bytes=11, blob_key=key),
                             analysis=AnalysisInfo(analyzer_version="test"))
        store.add_crashes([CrashRecord(report, {}, CoreStatus.STORED)])
    done = CliRunner().invoke(app, ["store", "prune", "--data-dir", str(data),
                                    "--max-age-days", "0"])
    assert done.exit_code == 0 and done.stdout.startswith("deleted 1 blobs"), done.output
    return key


def test_list_info_dump_say_the_core_was_pruned(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _pruned_store(data)
    run = CliRunner().invoke
    listed = run(app, ["list", "--json", "--data-dir", str(data)])
    assert [r["core_status"] for r in json.loads(listed.stdout)] == ["pruned"]
    text = run(app, ["list", "--data-dir", str(data)]).stdout.splitlines()
    assert text[1].split()[5] == "pruned", text
    info = run(app, ["info", CRASH, "--data-dir", str(data)])
    core = next(line for line in info.stdout.splitlines() if line.startswith("core"))
    assert "deleted by retention" in core and "stored," not in core, core
    dump = run(app, ["dump", CRASH, "-o", str(tmp_path / "core"), "--data-dir", str(data)])
    assert (dump.exit_code, dump.stdout) == (2, "")
    assert dump.stderr.count("\n") == 1 and "its core was deleted by retention" in dump.stderr
    assert not (tmp_path / "core").exists()


def test_reanalyze_names_a_pruned_core(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = _pruned_store(data)
    analyzer = WarmAnalyzer(Settings(blobs=str(data / BLOB_DIR), warm=False))
    assert analyzer.analyse(Target(CRASH, key, None)) == (
        CRASH, None, "its core was deleted by retention")
