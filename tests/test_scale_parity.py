"""Parity: the report's heavy part on Ibis gives the same node-time frames and
the same findings on DuckDB (the store, and a Parquet export), PostgreSQL and
Spark (local mode, over the export) as the DuckDB store's own SQL: counts and
verdicts exact, ratios, rates and p-values to 1e-9 relative.

The fleet is test_report's synthetic one (known diseases, a hardware-suspect
host, telemetry, intervals of many lengths, an XSS signature), copied into a
throwaway PostgreSQL and exported to Parquet by day."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scalekit import assert_same_frames, findings_differences
from test_report import fill_store

from coreepi.epi import FleetFindings
from coreepi.reporting import build_findings
from coreepi.store import open_store
from coreepi.store.analytics import EngineSource, export_parquet, parquet_tables, store_tables
from coreepi.store.copy import copy_store


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("parity") / "data"
    with open_store(data) as store:
        fill_store(store, split=True)
    return data


@pytest.fixture(scope="module")
def reference(fleet: Path) -> tuple[Any, FleetFindings]:
    """The DuckDB store's own SQL path (store/node_time.py): what every engine must match."""
    with open_store(fleet, read_only=True) as store:
        return store.node_time_frames(), build_findings(store)


@pytest.fixture(scope="module")
def parquet(fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("parity") / "parquet"
    with open_store(fleet, read_only=True) as store:
        et = store_tables(store, "duckdb")
        try:
            export_parquet(et, out)
        finally:
            et.close()
    return out


@pytest.fixture(scope="module")
def pg_store_url(fleet: Path, pg_cluster: Any) -> str:
    url = pg_cluster.create_database("parity")
    with open_store(fleet, read_only=True) as src, open_store(url) as dst:
        copy_store(src, dst)  # type: ignore[arg-type]
    return str(url)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from coreepi.store.analytics import spark_session

    session = spark_session()
    yield session
    session.stop()


def _check(source: EngineSource, reference: tuple[Any, FleetFindings]) -> None:
    frames, findings = reference
    assert_same_frames(source.node_time_frames(), frames)
    from coreepi.reporting import build_findings as build

    got = build(source)  # type: ignore[arg-type]
    assert findings_differences(got, findings) == []
    assert got.groups and got.hosts  # not an empty report that trivially matches


def test_duckdb_store_engine(fleet: Path, reference: tuple[Any, FleetFindings]) -> None:
    with open_store(fleet, read_only=True) as store:
        et = store_tables(store, "duckdb")
        try:
            _check(EngineSource(et), reference)
        finally:
            et.close()


def test_postgres_engine(pg_store_url: str, reference: tuple[Any, FleetFindings]) -> None:
    with open_store(pg_store_url, read_only=True) as store:
        et = store_tables(store, "postgres")
        try:
            _check(EngineSource(et), reference)
        finally:
            et.close()


def test_duckdb_over_parquet(parquet: Path, reference: tuple[Any, FleetFindings]) -> None:
    et = parquet_tables(parquet, "duckdb")
    try:
        _check(EngineSource(et), reference)
    finally:
        et.close()


def test_spark_local_over_parquet(parquet: Path, spark: Any,
                                  reference: tuple[Any, FleetFindings]) -> None:
    et = parquet_tables(parquet, "spark")
    _check(EngineSource(et), reference)
