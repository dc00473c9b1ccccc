"""`coreepi export parquet` (Hive day partitions, every row, a re-export
replaces) and `coreepi report --engine` (same JSON as the default path; an
engine that does not fit the store is one line and exit 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from scalekit import findings_differences
from test_report import fill_store
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.epi import FleetFindings
from coreepi.store import open_store
from coreepi.store.analytics.export import MARKER


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("scalecli") / "data"
    with open_store(d) as store:
        fill_store(store)
    return d


def test_export_parquet_by_day(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    runner = CliRunner()
    for _ in range(2):  # the second export replaces the first: no duplicate rows
        res = runner.invoke(app, ["export", "parquet", str(out), "--data-dir", str(data_dir)])
        assert res.exit_code == 0, res.output
    with open_store(data_dir, read_only=True) as store:
        counts = store.counts()
    assert res.output.strip() == (f"exported to {out}: hosts {counts['hosts']}, exposure "
                                  f"{counts['exposure']}, crashes {counts['crashes']}, "
                                  f"telemetry {counts['telemetry']}")
    crashes = ds.dataset(out / "crashes", format="parquet", partitioning="hive").to_table()
    assert crashes.num_rows == counts["crashes"]
    days = sorted(p.name for p in (out / "crashes").iterdir() if p.name != MARKER)
    assert days[0] == "day=2024-01-01" and all(d.startswith("day=2024-") for d in days)
    # every crash sits in the folder of its own UTC day
    for row in crashes.select(["captured_at", "day"]).to_pylist()[:50]:
        assert row["captured_at"].strftime("%Y-%m-%d") == row["day"]
    assert ds.dataset(out / "exposure", format="parquet").count_rows() == counts["exposure"]
    assert sorted((out / "hosts").iterdir()) == [out / "hosts" / MARKER,
                                                 out / "hosts" / "part-0.parquet"]


def test_export_parquet_refuses_a_folder_of_the_users(data_dir: Path, tmp_path: Path) -> None:
    """#10: DIR/crashes/ holding a file of the user's (not an export): exit 2,
    one line, the file kept; an empty folder or an earlier export is replaced."""
    out = tmp_path / "exp2"
    (out / "crashes").mkdir(parents=True)
    mine = out / "crashes" / "mine.txt"
    mine.write_text("my notes")
    res = CliRunner().invoke(app, ["export", "parquet", str(out), "--data-dir", str(data_dir)])
    assert res.exit_code == 2 and res.output == (
        f"coreepi: error: {out}/crashes: holds files that are not a coreepi export (no "
        f"{MARKER}); refusing to replace them: empty it or export to another folder than "
        f"{out}\n")
    assert mine.read_text() == "my notes" and not (out / "hosts").exists()
    mine.unlink()
    for _ in range(2):  # an empty folder, then the export made there
        res = CliRunner().invoke(app, ["export", "parquet", str(out), "--data-dir",
                                       str(data_dir)])
        assert res.exit_code == 0, res.output
    assert (out / "crashes" / MARKER).is_file()


def test_report_engine_same_json(data_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    outs = {}
    for engine in (None, "duckdb"):
        out = tmp_path / f"{engine}.json"
        args = ["report", "--data-dir", str(data_dir), "-f", "json", "-o", str(out)]
        res = runner.invoke(app, args + (["--engine", engine] if engine else []))
        assert res.exit_code == 0, res.output
        outs[engine] = FleetFindings.model_validate_json(out.read_text())
    assert findings_differences(outs["duckdb"], outs[None]) == []
    assert json.loads(outs[None].model_dump_json())["groups"]


def test_export_parquet_to_s3(data_dir: Path, s3_bucket: str, s3_server: str) -> None:
    """`export parquet s3://…` against the S3-compatible server on 127.0.0.1
    (the AWS_* environment names it), read back by an independent client."""
    bucket = s3_bucket.removeprefix("s3://").split("/")[0]
    url = f"s3://{bucket}/fleet/export"
    res = CliRunner().invoke(app, ["export", "parquet", url, "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    with open_store(data_dir, read_only=True) as store:
        counts = store.counts()
        want = store.crash_frame()
    fs = pafs.S3FileSystem(endpoint_override=s3_server, scheme="http", access_key="test",
                           secret_key="test", region="us-east-1")
    crashes = ds.dataset(f"{bucket}/fleet/export/crashes", filesystem=fs, format="parquet",
                         partitioning="hive").to_table()
    assert crashes.num_rows == counts["crashes"]
    assert sorted(crashes["crash_id"].to_pylist()) == sorted(want["crash_id"])
    for name in ("hosts", "exposure", "telemetry"):
        got = ds.dataset(f"{bucket}/fleet/export/{name}", filesystem=fs, format="parquet")
        assert got.count_rows() == counts[name], name
    days = {info.base_name for info in fs.get_file_info(
        pafs.FileSelector(f"{bucket}/fleet/export/crashes"))}
    days.discard(MARKER)
    assert "day=2024-01-01" in days and all(d.startswith("day=2024-") for d in days)


def test_export_parquet_to_a_missing_bucket_is_one_line(data_dir: Path, s3_bucket: str,
                                                        tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["export", "parquet", "s3://no-such-bucket/x",
                                   "--data-dir", str(data_dir)])
    assert res.exit_code == 2, res.output
    assert re.match(r"coreepi: error: s3://no-such-bucket/x: cannot write .*"
                    r"bucket does not exist", res.output), res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    (tmp_path / "a-file").write_text("not a folder")
    res = CliRunner().invoke(app, ["export", "parquet", str(tmp_path / "a-file" / "out"),
                                   "--data-dir", str(data_dir)])
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"coreepi: error: {tmp_path}/a-file/out: cannot write the hosts "
                                 "table: ")
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "postgres"], "--engine postgres: the store is DuckDB; this engine needs a "
                               "postgresql:// store"),
    (["--engine", "spark"], "--engine spark: the store is DuckDB; this engine needs --parquet DIR"),
    (["--engine", "oracle"], "--engine 'oracle': one of duckdb, postgres, spark"),
    (["--parquet", "/nonexistent"], "/nonexistent: not a coreepi Parquet export (no hosts/ "
                                    "folder); make one with `coreepi export parquet DIR`"),
])
def test_report_engine_errors(data_dir: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["report", "--data-dir", str(data_dir), *args])
    assert res.exit_code == 2
    assert message in res.output.replace("\n", " ")
    assert "Traceback" not in res.output


def test_export_of_a_store_without_telemetry_reads_back(tmp_path: Path) -> None:
    """A table without rows is exported as its folder with one empty file, so
    `report --parquet` reads the export; a re-export leaves no day of the
    earlier one behind."""
    from datetime import UTC, datetime, timedelta

    from coreepi.model.fleet import ExposureInterval, HostRow
    from coreepi.model.report import AnalysisInfo, CrashReport, Signature, Source
    from coreepi.store import CoreStatus, CrashRecord

    data, out = tmp_path / "data", tmp_path / "pq"
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    with open_store(data) as store:
        store.add_hosts([HostRow("h1", {"cpu": "a"}, 2), HostRow("h2", {"cpu": "b"}, 3)])
        store.add_exposure(ExposureInterval(h, t0, t0 + timedelta(days=10), {}, 2)
                           for h in ("h1", "h2"))
        store.add_crashes([CrashRecord(CrashReport(
            crash_id=f"c{i}", host_id="h1", captured_at=t0 + timedelta(days=i, hours=1),
            source=Source.ELF_CORE, signature=Signature(signature="main"),
            analysis=AnalysisInfo(analyzer_version="test")), {}, CoreStatus.NOT_STORED, None,
            None) for i in range(3)])
    runner = CliRunner()
    first = runner.invoke(app, ["export", "parquet", str(out), "--data-dir", str(data)])
    assert first.exit_code == 0, first.output
    assert first.output.strip().endswith("crashes 3, telemetry 0")
    assert sorted(p.name for p in (out / "telemetry").iterdir()) == [MARKER, "part-0.parquet"]
    report = runner.invoke(app, ["report", "--data-dir", str(data), "--parquet", str(out),
                                 "-f", "json", "-o", str(tmp_path / "r.json")])
    assert report.exit_code == 0, report.output
    findings = FleetFindings.model_validate_json((tmp_path / "r.json").read_text())
    assert (findings.window.crashes, findings.window.hosts) == (3, 2)
    with open_store(data) as store:
        store._query("DELETE FROM crashes WHERE crash_id = 'c2'")
    again = runner.invoke(app, ["export", "parquet", str(out), "--data-dir", str(data)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in (out / "crashes").iterdir()) == [
        MARKER, "day=2024-05-01", "day=2024-05-02"]


def test_report_on_a_broken_or_remote_export_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    """A corrupt part file, and an s3:// export on DuckDB without its httpfs
    extension (never downloaded: offline by default), give one line, exit 2."""
    out = tmp_path / "export"
    runner = CliRunner()
    assert runner.invoke(app, ["export", "parquet", str(out), "--data-dir",
                               str(data_dir)]).exit_code == 0
    next((out / "crashes").rglob("*.parquet")).write_bytes(b"PAR1 not really")
    res = runner.invoke(app, ["report", "--data-dir", str(data_dir), "--parquet", str(out),
                              "--engine", "duckdb"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    said = res.output.replace("\n", " ")
    assert "the duckdb engine failed:" in said and "part-0.parquet" in said
    res = runner.invoke(app, ["report", "--data-dir", str(data_dir), "--parquet",
                              "s3://no-bucket/x", "--engine", "duckdb"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "s3://no-bucket/x: cannot read the Parquet export" in res.output.replace("\n", " ")
