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
from coreepi.store import CoreStatus, CrashRecord, DirectoryBlobStore, DuckDBStore
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
        CRASH, None, f"core (blob {key}) pruned: its core was deleted by retention")


def test_reanalyze_does_not_call_a_core_of_another_blob_store_pruned(tmp_path: Path) -> None:
    data, blobs = tmp_path / "data", tmp_path / "elsewhere"
    _store_with_blobs_apart(data, blobs)
    with DuckDBStore(data, blobs=DirectoryBlobStore(blobs)) as store:
        key = store.get_report(CRASH).core.blob_key
    analyzer = WarmAnalyzer(Settings(blobs=str(data / BLOB_DIR), warm=False))
    assert analyzer.analyse(Target(CRASH, key, None)) == (
        CRASH, None, f"core (blob {key}) not found in the blob store {data / BLOB_DIR} (the core "
        "is stored in another: give it with --blobs or COREEPI_BLOBS)")


def _store_with_blobs_apart(data: Path, blobs: Path) -> bytes:
    """A store whose one core lies in the blob directory ``blobs``, not in data/blobs."""
    core = b"\x7fELF a core kept apart"
    with DuckDBStore(data, blobs=DirectoryBlobStore(blobs)) as store:
        key = store.blobs.put_bytes(core)
        report = CrashReport(crash_id=CRASH, host_id="h-002", source=Source.ELF_CORE,
                             captured_at=datetime(2024, 1, 1, tzinfo=UTC),
                             core=CoreInfo(stored=True, size_bytes=len(core), blob_key=key),
                             analysis=AnalysisInfo(analyzer_version="test"))
        store.add_crashes([CrashRecord(report, {}, CoreStatus.STORED)])
    return core


def test_a_core_in_another_blob_store_is_not_called_pruned(tmp_path: Path) -> None:
    """#9: without --blobs the data dir's blobs/ lacks the core: list/info/dump
    say it is in a blob store the command was not given, never "pruned"; with
    --blobs or COREEPI_BLOBS the core is there."""
    data, blobs = tmp_path / "data", tmp_path / "elsewhere"
    core = _store_with_blobs_apart(data, blobs)
    run = CliRunner().invoke
    listed = json.loads(run(app, ["list", "--json", "--data-dir", str(data)]).stdout)
    assert [(r["core_status"], r["core_reason"]) for r in listed] == [(
        "not-found", f"not found in the blob store {data / BLOB_DIR} (the core is stored in "
        "another: give it with --blobs or COREEPI_BLOBS)")]
    text = run(app, ["list", "--data-dir", str(data)]).stdout.splitlines()
    assert "not found" in text[1] and "pruned" not in text[1], text
    info = run(app, ["info", CRASH, "--data-dir", str(data)])
    line = next(x for x in info.stdout.splitlines() if x.startswith("core"))
    assert "not found in the blob store" in line and "retention" not in line, line
    dump = run(app, ["dump", CRASH, "-o", str(tmp_path / "core"), "--data-dir", str(data)])
    assert dump.exit_code == 2 and dump.stderr.count("\n") == 1, dump.output
    assert "give it with --blobs or COREEPI_BLOBS" in dump.stderr and "retention" not in dump.stderr
    with_blobs = ["--data-dir", str(data), "--blobs", str(blobs)]
    listed = json.loads(run(app, ["list", "--json", *with_blobs]).stdout)
    assert [r["core_status"] for r in listed] == ["stored"]
    dumped = run(app, ["dump", CRASH, "-o", str(tmp_path / "core"), *with_blobs])
    assert dumped.exit_code == 0 and (tmp_path / "core").read_bytes() == core, dumped.output
    by_env = run(app, ["list", "--json", "--data-dir", str(data)],
                 env={"COREEPI_BLOBS": str(blobs)})
    assert [r["core_status"] for r in json.loads(by_env.stdout)] == ["stored"]
