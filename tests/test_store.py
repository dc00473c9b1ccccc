"""The DuckDB store: migrations, idempotent writes, one writer, the frames epi reads."""

from __future__ import annotations

import ast
import gzip
import inspect
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from coreepi.errors import StoreError
from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.model.fleet import ExposureInterval, HostRow, Rejection
from coreepi.model.report import (
    AnalysisInfo,
    CrashReport,
    Phenotype,
    SignalInfo,
    Signature,
    Source,
)
from coreepi.store import (
    BlobStore,
    CoreStatus,
    CrashRecord,
    CrashStore,
    DuckDBStore,
    HostStore,
    JobQueue,
    LedgerEntry,
    LedgerStore,
    Store,
    TelemetryStore,
    TokenStore,
    open_store,
)
from coreepi.store.duckdb_store.crashes import DuckDBCrashStore
from coreepi.store.duckdb_store.hosts import DuckDBHostStore
from coreepi.store.duckdb_store.ledger import DuckDBLedgerStore
from coreepi.store.duckdb_store.queue import DuckDBJobQueue
from coreepi.store.duckdb_store.telemetry import DuckDBTelemetryStore
from coreepi.store.duckdb_store.tokens import DuckDBTokenStore
from coreepi.store.interfaces import AlertStore, Transactional
from coreepi.store.migrations import latest_version

ROOT = Path(__file__).resolve().parent.parent
STORE_SRC = ROOT / "src" / "coreepi" / "store"
INTERFACES = (Transactional, CrashStore, HostStore, TelemetryStore, LedgerStore, TokenStore,
              JobQueue, AlertStore, BlobStore, Store)

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def report(crash_id: str, host: str = "h1", hours: float = 1.0, hw: bool = False) -> CrashReport:
    return CrashReport(
        crash_id=crash_id,
        host_id=host,
        captured_at=T0 + timedelta(hours=hours),
        source=Source.ELF_CORE,
        signal=SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR"),
        phenotypes=[Phenotype(name="null-deref"),
                    *([Phenotype(name="stack-misaligned", hardware_indicative=True)] if hw else [])],
        signature=Signature(signature="main"),
        analysis=AnalysisInfo(analyzer_version="test"),
    )


@pytest.fixture
def store(tmp_path: Path) -> DuckDBStore:
    s = DuckDBStore(tmp_path / "data")
    yield s
    s.close()


def test_schema_is_migrated_once(tmp_path: Path) -> None:
    with open_store(tmp_path) as s:
        assert s.schema_version() == latest_version()
        assert s.counts() == dict.fromkeys(
            ("hosts", "exposure", "crashes", "telemetry", "ingest_rejections", "ingest_ledger"), 0)
    with open_store(tmp_path) as s:  # reopening applies nothing twice
        assert s.schema_version() == latest_version()
    con = duckdb.connect(str(tmp_path / "coreepi.duckdb"))
    assert con.execute("SELECT count(*) FROM schema_version").fetchone() == (latest_version(),)
    con.execute("INSERT INTO schema_version VALUES (999, 'from the future', now())")
    con.close()
    with pytest.raises(StoreError, match="schema version 999 is newer than this coreepi knows"):
        open_store(tmp_path)


def test_one_writer_process(tmp_path: Path) -> None:
    with open_store(tmp_path):
        code = (
            "import sys\nfrom coreepi.store import open_store\nfrom coreepi.errors import StoreError\n"
            f"try:\n    open_store({str(tmp_path)!r})\nexcept StoreError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    assert proc.returncode == 3, proc.stderr
    # the holder is this test's process, named with its pid and what to do
    assert proc.stdout.startswith(f"the store {tmp_path} is in use by "), proc.stdout
    assert f"(pid {os.getpid()}; DuckDB allows one writer): wait for it to finish or stop it" \
        in proc.stdout


def test_read_only_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="nothing ingested yet"):
        open_store(tmp_path / "none", read_only=True)


def test_crashes_idempotent_and_frame(store: DuckDBStore) -> None:
    recs = [
        CrashRecord(report("a"), {"app_version": "2.1", "load_avg": 7.5, "signature": "x"},
                    CoreStatus.STORED, None, "/f/a"),
        CrashRecord(report("b", "h2", 2, hw=True), {"app_version": "2.0"}, CoreStatus.NOT_STORED),
        CrashRecord(report("c", "h2", 30), {}, CoreStatus.UNREADABLE, "broken", "/f/c"),
    ]
    assert store.add_crashes(recs) == 3
    assert store.add_crashes(recs) == 0
    assert store.add_crashes([recs[0], recs[0]]) == 0  # twice in one batch
    assert store.count_crashes() == 3
    assert store.count_crashes(core_status="unreadable") == 1
    assert store.count_crashes(since=T0, until=T0 + timedelta(hours=24)) == 2
    df = store.crash_frame()
    assert list(df.columns) == [
        "crash_id", "host_id", "captured_at", "source", "signature", "phenotypes",
        "hardware_phenotypes", "signal", "si_code_name", "exe", "app_version", "core_status",
        "load_avg", "sidecar_signature",
    ]
    assert str(df["captured_at"].dtype) in ("datetime64[us, UTC]", "datetime64[ns, UTC]")
    assert list(df["crash_id"]) == ["a", "b", "c"]
    assert df["phenotypes"].tolist() == [["null-deref"], ["null-deref", "stack-misaligned"],
                                         ["null-deref"]]
    assert df["hardware_phenotypes"].tolist() == [[], ["stack-misaligned"], []]
    assert all(isinstance(v, list) for v in df["phenotypes"])
    assert df["app_version"].tolist()[:2] == ["2.1", "2.0"] and pd.isna(df["app_version"][2])
    assert df["load_avg"].dtype == "float64"
    assert df["load_avg"][0] == 7.5 and pd.isna(df["load_avg"][1])
    assert df["sidecar_signature"][0] == "x" and df["signature"][0] == "main"
    assert df["core_status"].tolist() == ["stored", "not-stored", "unreadable"]
    window = store.crash_frame(since=T0 + timedelta(hours=1.5), until=T0 + timedelta(hours=31))
    assert window["crash_id"].tolist() == ["b", "c"]
    got = store.get_report("b")
    assert got is not None and got == recs[1].report


def test_empty_frames_have_their_columns(store: DuckDBStore) -> None:
    assert list(store.crash_frame().columns)[:6] == [
        "crash_id", "host_id", "captured_at", "source", "signature", "phenotypes"]
    assert list(store.exposure_frame().columns) == ["host_id", "start", "end", "seconds"]
    assert list(store.telemetry_frame().columns) == [
        "event_id", "host_id", "ts", "kind", "severity", "component", "hardware_indicative",
        "summary"]


def test_hosts_and_exposure_frame(store: DuckDBStore) -> None:
    assert store.add_hosts([HostRow("h1", {"cpu_model": "EPYC", "kernel": "6.1"}, 2),
                            HostRow("h2", {"cpu_model": "Xeon", "kernel": None}, 3)]) == 2
    assert store.add_hosts([HostRow("h2", {"cpu_model": "Xeon", "kernel": "6.5"}, 3)]) == 1
    assert store.host_ids() == {"h1", "h2"}
    day = timedelta(days=1)
    intervals = [
        ExposureInterval("h1", T0, T0 + day, {"app_version": "1.0"}, 2),
        ExposureInterval("h1", T0 + day, T0 + 2 * day, {"app_version": "1.1", "kernel": "6.2"}, 3),
        ExposureInterval("h2", T0, T0 + 2 * day, {}, 4),
    ]
    r = store.add_exposure(intervals, "exposure.csv")
    assert (r.added, r.duplicates, r.conflicts) == (3, 0, [])
    clash = ExposureInterval("h2", T0 + day, T0 + 3 * day, {}, 9)
    r = store.add_exposure([*intervals, clash], "exposure.csv")
    assert (r.added, r.duplicates) == (0, 3)
    assert [(c[0].line, c[1], c[2]) for c in r.conflicts] == [(9, T0, T0 + 2 * day)]
    assert store.counts()["exposure"] == 3
    df = store.exposure_frame()
    assert list(df.columns) == ["host_id", "start", "end", "seconds", "cpu_model", "kernel",
                                "app_version"]
    assert df[["host_id", "cpu_model", "kernel"]].values.tolist() == [
        ["h1", "EPYC", "6.1"], ["h1", "EPYC", "6.2"], ["h2", "Xeon", "6.5"]]  # override wins
    assert df["app_version"][0] == "1.0" and pd.isna(df["app_version"][2])
    assert df["seconds"].tolist() == [86400.0, 86400.0, 172800.0]
    assert str(df["start"].dtype).endswith(", UTC]")
    clipped = store.exposure_frame(since=T0 + timedelta(hours=12), until=T0 + day)
    assert clipped["host_id"].tolist() == ["h1", "h2"]
    assert clipped["seconds"].tolist() == [43200.0, 43200.0]
    hosts = store.hosts_frame()
    assert hosts.to_dict("records") == [
        {"host_id": "h1", "cpu_model": "EPYC", "kernel": "6.1"},
        {"host_id": "h2", "cpu_model": "Xeon", "kernel": "6.5"},
    ]


def test_events_and_coverage(store: DuckDBStore) -> None:
    ev = TelemetryEvent(event_id="e1", host_id="h1", ts=T0, kind=EventKind.MCE, summary="mce")
    assert store.add_events([ev, ev]) == 1
    assert store.add_events([ev]) == 0
    df = store.telemetry_frame()
    assert df[["event_id", "host_id", "kind", "hardware_indicative", "summary"]].values.tolist() == [
        ["e1", "h1", "mce", True, "mce"]]
    assert store.telemetry_frame(since=T0 + timedelta(seconds=1)).empty
    store.add_exposure([ExposureInterval("h1", T0, T0 + timedelta(hours=2), {}, 2)])
    store.add_crashes([CrashRecord(report("in", hours=1)), CrashRecord(report("out", hours=5))])
    assert [c[0] for c in store.crashes_outside_exposure()] == ["out"]


def test_rejections_and_ledger(store: DuckDBStore) -> None:
    store.add_rejections([Rejection("/a.csv", 3, "overlap", "x"), Rejection("/b", None, "c", "y")])
    store.add_rejections([Rejection("/a.csv", 4, "bad-timestamp", "z")], replace_files=["/a.csv"])
    df = store.rejections_frame()
    assert df[["file", "category"]].values.tolist() == [["/a.csv", "bad-timestamp"], ["/b", "c"]]
    assert df["line"].tolist()[0] == 4 and pd.isna(df["line"].tolist()[1])
    entry = LedgerEntry("/f", 10, 123, "ab" * 32, "crash-artifact", "done")
    store.record_file(entry)
    store.record_file(entry)
    assert store.ledger_entry("/f") == entry
    assert store.ledger_has_sha256("ab" * 32) and not store.ledger_has_sha256("cd" * 32)


def test_transaction_rolls_back(store: DuckDBStore) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.add_crashes([CrashRecord(report("x"))])
        raise RuntimeError("boom")
    assert store.count_crashes() == 0


def test_blobs_content_addressed(store: DuckDBStore, tmp_path: Path) -> None:
    plain = tmp_path / "core"
    plain.write_bytes(b"\x7fELF" + bytes(100_000))
    key = store.put_blob(plain)
    assert store.put_blob(plain) == key
    assert store.get_blob(key) == plain.read_bytes()
    on_disk = store.blobs.path(key)
    assert on_disk is not None and on_disk.name == key + ".zst"
    assert on_disk.stat().st_size < 1000  # compressed
    gz = tmp_path / "core.gz"
    gz.write_bytes(gzip.compress(b"hello"))
    gkey = store.put_blob(gz)
    assert store.blobs.path(gkey).name == gkey  # already compressed: stored as is
    assert store.get_blob(gkey) == gz.read_bytes()
    with pytest.raises(KeyError):
        store.get_blob("0" * 64)
    with pytest.raises(ValueError, match="content changed"):
        store.blobs.put_file(plain, "1" * 64)


def test_batch_writes_and_ledger_lookup(store: DuckDBStore) -> None:
    """The batched forms ingest uses: one statement per batch, same results."""
    recs = [CrashRecord(report("a")), CrashRecord(report("b")), CrashRecord(report("a"))]
    assert store.add_crashes_new_ids(recs) == {"a", "b"}
    assert store.add_crashes_new_ids([CrashRecord(report("b")), CrashRecord(report("c"))]) == {"c"}
    assert store.add_crashes_new_ids([]) == set()
    assert store.count_crashes() == 3
    e1 = LedgerEntry("/x", 1, 2, "ab" * 32, "crash-json", "done")
    e2 = LedgerEntry("/y", 3, 4, "cd" * 32, "crash-json", "done")
    store.record_files([e1, e2])
    e1b = LedgerEntry("/x", 5, 6, "ef" * 32, "crash-json", "done")
    store.record_files([e1b])
    assert store.ledger_entries(["/x", "/y", "/z", "/x"]) == {"/x": e1b, "/y": e2}
    assert store.ledger_entries([]) == {}
    with store.transaction():  # reads inside a transaction see its rows
        store.record_files([LedgerEntry("/z", 7, 8, "00" * 32, "crash-json", "done")])
        assert set(store.ledger_entries(["/z"])) == {"/z"}
    store.add_rejections([Rejection("/p", 1, "c", "x"), Rejection("/q", 2, "c", "y"),
                          Rejection("/r", 3, "c", "z")])
    store.add_rejections([Rejection("/p", 9, "c", "new")], replace_files=["/p", "/q"])
    assert sorted(store.rejections_frame()["file"] + ":" + store.rejections_frame()["reason"]) \
        == ["/p:new", "/r:z"]


@pytest.mark.parametrize("part, interface", [
    (DuckDBCrashStore, CrashStore), (DuckDBHostStore, HostStore),
    (DuckDBTelemetryStore, TelemetryStore), (DuckDBLedgerStore, LedgerStore),
    (DuckDBTokenStore, TokenStore), (DuckDBJobQueue, JobQueue),
])
def test_each_duckdb_part_stands_alone(tmp_path: Path, part: type, interface: type) -> None:
    """A part implements its whole interface on its own connection."""
    assert not part.__abstractmethods__
    with part(tmp_path) as s:
        assert isinstance(s, interface) and not isinstance(s, Store)
        assert s.counts()["crashes"] == 0


def test_every_interface_method_documented() -> None:
    undocumented = [
        f"{iface.__name__}.{name}"
        for iface in INTERFACES for name, member in vars(iface).items()
        if not name.startswith("_") and callable(getattr(member, "fget", member))
        and not inspect.getdoc(member)
    ]
    assert undocumented == []


def test_docs_name_what_a_backend_implements() -> None:
    """docs/store.md lists every abstract method of every interface."""
    text = (ROOT / "docs" / "store.md").read_text()
    missing = [f"{iface.__name__}.{name}" for iface in INTERFACES
               for name in sorted(iface.__abstractmethods__) if f"`{name}(" not in text
               and f"`{name}`" not in text]
    assert missing == []
    assert all(f"`{iface.__name__}`" in text for iface in INTERFACES)


def test_store_imports_only_the_model() -> None:
    """store sits below ingest and epi: it imports model/ and errors, nothing else of coreepi."""
    found = set()
    for path in STORE_SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("coreepi"):
                found.add(".".join(node.module.split(".")[:2]))
            elif isinstance(node, ast.Import):
                found.update(".".join(a.name.split(".")[:2]) for a in node.names
                             if a.name.startswith("coreepi"))
    assert found <= {"coreepi.model", "coreepi.errors", "coreepi.store"}, found
