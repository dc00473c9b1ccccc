"""`coreepi export parquet` (Hive day partitions, every row, a re-export
replaces) and `coreepi report --engine` (same JSON as the default path; an
engine that does not fit the store is one line and exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from scalekit import findings_differences
from test_report import fill_store
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.epi import FleetFindings
from coreepi.store import open_store


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
    days = sorted(p.name for p in (out / "crashes").iterdir())
    assert days[0] == "day=2024-01-01" and all(d.startswith("day=2024-") for d in days)
    # every crash sits in the folder of its own UTC day
    for row in crashes.select(["captured_at", "day"]).to_pylist()[:50]:
        assert row["captured_at"].strftime("%Y-%m-%d") == row["day"]
    assert ds.dataset(out / "exposure", format="parquet").count_rows() == counts["exposure"]
    assert list((out / "hosts").iterdir()) == [out / "hosts" / "part-0.parquet"]


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
