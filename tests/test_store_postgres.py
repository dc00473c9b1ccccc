"""What only the PostgreSQL store does (the shared contract is in
test_store_contract.py): standing parts, errors naming the database without
its password, read-only opening, concurrent workers on one queue, the
``--store`` option, and ``coreepi store copy`` from a data dir."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreepi.errors import StoreError
from coreepi.model.report import AnalysisInfo, CrashReport, Source
from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.model.fleet import ExposureInterval, HostRow, Rejection
from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord
from coreepi.store.migrations import latest_version, schema_tables
from coreepi.store.regroup_sql import RegroupRow
from coreepi.store import (
    ApiToken,
    CrashRecord,
    CrashStore,
    DirectoryBlobStore,
    DuckDBStore,
    HostStore,
    JobQueue,
    LedgerEntry,
    LedgerStore,
    PostgresStore,
    Receipt,
    TelemetryStore,
    TokenStore,
    open_store,
)
from coreepi.store.postgres_store.crashes import PostgresCrashStore
from coreepi.store.postgres_store.hosts import PostgresHostStore
from coreepi.store.postgres_store.ledger import PostgresLedgerStore
from coreepi.store.postgres_store.queue import PostgresJobQueue
from coreepi.store.postgres_store.telemetry import PostgresTelemetryStore
from coreepi.store.postgres_store.tokens import PostgresTokenStore


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "coreepi"), *args], check=False,
                          capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("part, interface", [
    (PostgresCrashStore, CrashStore), (PostgresHostStore, HostStore),
    (PostgresTelemetryStore, TelemetryStore), (PostgresLedgerStore, LedgerStore),
    (PostgresTokenStore, TokenStore), (PostgresJobQueue, JobQueue),
])
def test_each_postgres_part_stands_alone(pg_url: str, part: type, interface: type) -> None:
    assert not part.__abstractmethods__
    with part(pg_url) as s:
        assert isinstance(s, interface) and s.counts()["crashes"] == 0


def test_unreachable_database_is_one_line_without_password(pg_cluster: object) -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:{pg_cluster.port}/nosuchdb"  # type: ignore[attr-defined]
    with pytest.raises(StoreError) as info:
        open_store(url)
    text = str(info.value)
    assert text.startswith("postgresql://postgres:***@127.0.0.1:") and "nosuchdb" in text
    assert "s3cret" not in text and "\n" not in text
    done = _cli("token", "list", "--store", url)
    assert done.returncode == 2 and "s3cret" not in done.stderr
    assert done.stderr.startswith("coreepi: error: postgresql://postgres:***@")


def test_read_only_refuses_writes_and_migrations_run_once(pg_url: str, tmp_path: Path) -> None:
    blobs = DirectoryBlobStore(tmp_path / "b")
    with PostgresStore(pg_url, blobs) as first, PostgresStore(pg_url, blobs) as second:
        assert first.schema_version() == second.schema_version() == latest_version()
    with PostgresStore(pg_url, blobs, read_only=True) as ro:
        with pytest.raises(StoreError, match="read-only"):
            ro.add_crashes([CrashRecord(_report("ab" * 8))])
        assert ro.crash_ids() == set()


def test_concurrent_workers_never_take_one_job_twice(pg_url: str, tmp_path: Path) -> None:
    with PostgresStore(pg_url, DirectoryBlobStore(tmp_path / "b"), pool_size=8) as store:
        for i in range(60):
            store.enqueue_analysis(f"c{i:02}", "k" * 64)
        taken: list[str] = []
        lock = threading.Lock()

        def work(name: str) -> None:
            while jobs := store.take_jobs(name, limit=3):
                for job in jobs:
                    assert store.finish_job(job.job_id, name)
                with lock:
                    taken.extend(j.crash_id for j in jobs)

        threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(taken) == [f"c{i:02}" for i in range(60)]  # each exactly once
        assert store.job_counts()["done"] == 60


def _report(crash_id: str) -> CrashReport:
    return CrashReport(crash_id=crash_id, host_id="h1", source=Source.ELF_CORE,
                       captured_at=datetime(2024, 1, 1, tzinfo=UTC),
                       analysis=AnalysisInfo(analyzer_version="test"))


def test_store_option_and_environment(pg_url: str) -> None:
    made = _cli("token", "create", "--scope", "read", "--name", "ci", "--store", pg_url)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("cep_")
    listed = _cli("token", "list", env={"COREEPI_STORE": pg_url})
    assert listed.returncode == 0 and "\tci\tread\t" in listed.stdout


def test_store_copy_is_idempotent(pg_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with DuckDBStore(data) as src:
        key = src.blobs.put_bytes(b"\x7fELF core bytes")
        src.add_crashes([CrashRecord(_report("aa" * 8), {"app_version": "1.2"})])
        src.add_rejections([])
        src.enqueue_analysis("aa" * 8, key)
        # a blob written long ago: its age drives retention (before: the copy reset it)
        written = datetime(2024, 3, 1, 12, 30, tzinfo=UTC)
        os.utime(src.blobs.path(key), (written.timestamp(), written.timestamp()))
    blobs = tmp_path / "central-blobs"
    first = _cli("store", "copy", "--from", str(data), "--to", pg_url, "--blobs", str(blobs))
    assert first.returncode == 0, first.stderr
    assert "copied blobs 1 " in first.stdout and "crashes 1 (+0 there)" in first.stdout
    assert first.stderr == ""  # the counts once, on stdout (the per-table progress was repeated)
    assert "dated by the copy" not in first.stdout
    copied = DirectoryBlobStore(blobs)
    assert [(b.key, b.modified) for b in copied.entries()] == [(key, written)]
    assert copied.prune(max_age=timedelta(days=30)).deleted_for_age == 1  # as old as it was
    first = _cli("store", "copy", "--from", str(data), "--to", pg_url, "--blobs", str(blobs))
    assert "copied blobs 1 " in first.stdout and copied.has(key)  # copied back
    again = _cli("store", "copy", "--from", str(data), "--to", pg_url, "--blobs", str(blobs))
    assert again.returncode == 0, again.stderr
    assert "copied blobs 0 " in again.stdout and "crashes 0 (+1 there)" in again.stdout
    with open_store(pg_url, blobs=str(blobs)) as dst:
        assert dst.get_report("aa" * 8) == _report("aa" * 8)
        window = (datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC))
        assert dst.crash_records("h1", *window)[0].attributes == {"app_version": "1.2"}
        assert dst.blobs.get(key) == b"\x7fELF core bytes"
        assert dst.job_counts()["queued"] == 1
    bad = _cli("store", "copy", "--from", str(tmp_path / "nothing"), "--to", pg_url)
    assert bad.returncode == 2 and "no coreepi store here" in bad.stderr


def _fill_every_table(src: DuckDBStore) -> None:
    """At least one row in every table of the schema (alert deliveries, a
    keyless log, twice)."""
    at = datetime(2024, 1, 1, tzinfo=UTC)
    key = src.blobs.put_bytes(b"\x7fELF core")
    src.add_hosts([HostRow("h1", {"cpu": "EPYC"}, 2)])
    src.add_exposure([ExposureInterval("h1", at, at + timedelta(days=1), {}, 2)])
    src.add_crashes([CrashRecord(_report("bb" * 8), {})])
    src.add_events([TelemetryEvent(event_id="e1", host_id="h1", ts=at, kind=EventKind.MCE,
                                   summary="mce")])
    src.add_rejections([Rejection("/a.csv", 3, "overlap", "x")])
    src.record_files([LedgerEntry("/f", 10, 123, "ab" * 32, "crash-artifact", "done")])
    src.add_api_token(ApiToken("t1", "ci", ("read",), "cd" * 32, at))
    src.add_receipts([Receipt("bb" * 8, "ef" * 32, key, at)])
    src.enqueue_analysis("bb" * 8, key)
    src.put_alert(AlertRecord("k1", "hardware-suspect", {"host": "h1"}, "h1 suspect", {}, "firing",
                              at, at))
    src.add_silence(SilenceRecord("s1", {"host": "h1"}, at, at + timedelta(days=1), "me"))
    for attempt in (1, 2):
        src.add_delivery(DeliveryRecord("k1", "hook", "firing", attempt, at, 500, False, "boom"))
    src.drain_host(DrainRecord("h0", at, "me", "bad DIMM"))
    src.undrain_host("h0", at + timedelta(days=1), "me")  # drain_history
    src.drain_host(DrainRecord("h1", at, "me", "bad DIMM"))
    src.record_regroup([RegroupRow("run1", "A", "B", 1, "rename", "1.0", "abc", at)])


def test_store_copy_copies_every_table_of_the_schema(pg_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with DuckDBStore(data) as src:
        _fill_every_table(src)
        want = {t: src._query(f"SELECT count(*) FROM {t}").fetchone()[0] for t in schema_tables()}
    # a table added to the migrations must get a row above, so the copy of it is checked
    assert all(want.values()), [t for t, n in want.items() if not n]
    for _ in range(2):  # idempotent: the second copy adds nothing, keyless logs included
        done = _cli("store", "copy", "--from", str(data), "--to", pg_url,
                    "--blobs", str(tmp_path / "blobs"))
        assert done.returncode == 0, done.stderr
        with open_store(pg_url, blobs=str(tmp_path / "blobs")) as dst:
            got = {t: dst._query(f"SELECT count(*) FROM {t}")[0][0] for t in schema_tables()}
        assert got == want
    assert "alert_deliveries 0 (+2 there)" in done.stdout
    listed = _cli("alerts", "list", "--store", pg_url)
    assert listed.returncode == 0 and "h1 suspect" in listed.stdout

