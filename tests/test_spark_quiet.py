"""``coreepi report --engine spark`` (local mode) writes nothing but
coreepi's own lines to stderr: before, the JVM's start-up ("WARNING: Using
incubator modules", log4j's "Setting default log level to WARN", the
native-hadoop warning) reached the user's terminal. And its JSON is the
DuckDB engine's, over the same Parquet export. A real JVM starts (15-20 s
idle, minutes on a loaded machine): slow lane."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_report import fill_store

from coreepi.store import open_store

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17+")]


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coreepi", "report", "--format", "json", *args],
                          capture_output=True, text=True, timeout=1200)


def test_spark_report_stderr_is_quiet(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with open_store(data) as store:
        fill_store(store)
    out = tmp_path / "pq"
    exported = subprocess.run([sys.executable, "-m", "coreepi", "export", "parquet", str(out),
                               "--data-dir", str(data)], capture_output=True, text=True,
                              timeout=300)
    assert exported.returncode == 0, exported.stderr
    spark = _report("--engine", "spark", "--parquet", str(out), "--data-dir", str(data))
    assert (spark.returncode, spark.stderr) == (0, "")
    duck = _report("--engine", "duckdb", "--parquet", str(out), "--data-dir", str(data))
    assert duck.returncode == 0, duck.stderr
    assert json.loads(spark.stdout) == json.loads(duck.stdout)
