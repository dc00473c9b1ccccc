"""The report's findings pinned: a synthetic fleet's findings (the DuckDB
store's path) digested with every float rounded to 8 significant digits, and
that digest fixed in ``tests/data/report-pinned.json``.

The digest was taken from the code before the report's query and pandas
work were made cheaper (issue 18's goal): a change that moves any count,
verdict, ratio or p-value beyond rounding fails here. Regenerate it only for
an intended change of the findings (``COREEPI_PIN_WRITE=1``) and say so.
The fleet: ``benchmarks/epi_fleet.py`` at 800 hosts × 30 days (24k
intervals, about 2.7k crashes, host-level sets present)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from coreepi.reporting import build_findings, render
from coreepi.store import DuckDBStore, open_store

PINNED = Path(__file__).parent / "data" / "report-pinned.json"


def _rounded(value: Any) -> Any:
    """``value`` with every float at 8 significant digits (NaN and inf kept)."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.8g}")
    return value


def findings_digest(report_json: str) -> str:
    """sha256 of the report's JSON with floats rounded (:func:`_rounded`)."""
    text = json.dumps(_rounded(json.loads(report_json)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _report(data: Path) -> str:
    with open_store(data, read_only=True) as store:
        return render(build_findings(store), "json")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The fleet's report JSON, built twice from the same store."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from epi_fleet import FleetSize, generate

    data = tmp_path_factory.mktemp("pinned") / "data"
    store = DuckDBStore(data)
    generate(store, FleetSize(hosts=800, days=30, tail_signatures=200, bad_hosts=3))
    store.close()
    return _report(data), _report(data)


def test_findings_match_the_pinned_digest(reports: tuple[str, str]) -> None:
    got = {"digest": findings_digest(reports[0]),
           "crashes": json.loads(reports[0])["window"]["crashes"]}
    if os.environ.get("COREEPI_PIN_WRITE") == "1":
        PINNED.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(PINNED.read_text())
    assert got["crashes"] > 2000


def test_report_is_the_same_bytes_on_every_run(reports: tuple[str, str]) -> None:
    """The store sums exposure as integer microseconds and hands sets, hosts
    and host sets over in a fixed order: no float is summed in the order a
    thread happened to finish, so two runs give the same bytes."""
    assert reports[0] == reports[1]
