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


class _Once:
    """The engine's frames computed once for both checks (Spark: each query costs seconds)."""

    def __init__(self, source: EngineSource) -> None:
        self.frames = source.node_time_frames()
        self.telemetry_frame = source.telemetry_frame

    def node_time_frames(self, since: Any = None, until: Any = None) -> Any:
        assert since is None and until is None
        return self.frames


def _check(source: EngineSource, reference: tuple[Any, FleetFindings]) -> None:
    frames, findings = reference
    once = _Once(source)
    assert_same_frames(once.frames, frames)
    got = build_findings(once)  # type: ignore[arg-type]
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


def test_host_sets_capped_as_the_store_caps_them(fleet: Path, reference: tuple[Any, FleetFindings],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_HOST_SETS (host, interval attributes) pairs both paths give
    no host_sets (the host-level statistics fall back, with a note); at it, both give them."""
    import coreepi.store.analytics.node_time as ibis_path
    import coreepi.store.node_time as sql_path

    pairs = len(reference[0].host_sets)
    with open_store(fleet, read_only=True) as store:
        et = store_tables(store, "duckdb")
        try:
            for cap, offered in ((pairs, True), (pairs - 1, False)):
                monkeypatch.setattr(ibis_path, "MAX_HOST_SETS", cap)
                monkeypatch.setattr(sql_path, "MAX_HOST_SETS", cap)
                got = EngineSource(et).node_time_frames().host_sets
                want = store.node_time_frames().host_sets
                assert (got is not None, want is not None) == (offered, offered)
                assert got is None or len(got) == pairs
        finally:
            et.close()


# In the default lane: Spark for real in CI (issue 18), on the module's small
# fleet: about 60 s on an idle 2-core machine, most of it the JVM's start-up
# (280 s at load 10). A stopped session was once seen to break a later Dask
# test in the same process; not reproduced since (this test, then
# test_scale_reanalyze.py's Dask test, in one process: both pass).
def test_spark_local_over_parquet(parquet: Path, spark: Any,
                                  reference: tuple[Any, FleetFindings]) -> None:
    et = parquet_tables(parquet, "spark")
    _check(EngineSource(et), reference)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the suite's 600 s ran out in the copy into PostgreSQL, at load 12
def test_parity_on_a_100k_crash_fleet(tmp_path: Path, pg_cluster: Any, spark: Any) -> None:
    """benchmarks/epi_fleet.py's fleet at 10,000 hosts × 100 days (1M intervals,
    about 100k crashes): the same findings on every engine. Minutes (Spark, the
    copy into PostgreSQL): run with -m slow."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from epi_fleet import FleetSize, generate

    from coreepi.store import DuckDBStore

    data = tmp_path / "data"
    store = DuckDBStore(data)
    made = generate(store, FleetSize(hosts=10_000, days=100, tail_signatures=2_000))
    store.close()
    assert made["crashes"] > 90_000
    with open_store(data, read_only=True) as store:
        reference = (store.node_time_frames(), build_findings(store))
        et = store_tables(store, "duckdb")
        _check(EngineSource(et), reference)
        export_parquet(et, tmp_path / "parquet")
        et.close()
        url = pg_cluster.create_database("parity100k")
        with open_store(url) as dst:
            copy_store(store, dst)  # type: ignore[arg-type]
    with open_store(url, read_only=True) as pg:
        et = store_tables(pg, "postgres")
        _check(EngineSource(et), reference)
        et.close()
    _check(EngineSource(parquet_tables(tmp_path / "parquet", "spark")), reference)
