"""The store's contract: every interface exercised through the interface only.

Each test takes the ``store`` fixture, typed as the one interface it tests,
and runs once per backend of :data:`BACKENDS`. A new backend (PostgreSQL)
passes when it adds its factory there and every test here passes.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import zstandard

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
    AlertStore,
    ApiToken,
    BlobStore,
    CoreStatus,
    CrashRecord,
    CrashStore,
    DirectoryBlobStore,
    DuckDBStore,
    HostStore,
    JobQueue,
    JobState,
    LedgerEntry,
    LedgerStore,
    Receipt,
    Store,
    TelemetryStore,
    TokenStore,
)
from coreepi.store.alert_records import AlertRecord, DeliveryRecord, DrainRecord, SilenceRecord
from coreepi.store.base import COUNTED_TABLES
from coreepi.store.interfaces import CRASH_SUMMARY_COLUMNS, REJECTION_COLUMNS
from coreepi.store.postgres_store import PostgresStore
from coreepi.store.s3_blobs import S3BlobStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def _duckdb(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return DuckDBStore(tmp_path / "data")


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    # a new database on the session's throwaway cluster (conftest.pg_url)
    return PostgresStore(request.getfixturevalue("pg_url"), DirectoryBlobStore(tmp_path / "blobs"))


# One entry per backend: a factory that opens an empty store under tmp_path
# (fixtures it needs come from the request).
BACKENDS: list[Callable[[pytest.FixtureRequest, Path], Store]] = [_duckdb, _postgres]


def _directory(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    return DirectoryBlobStore(tmp_path / "blobs")


def _s3(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    # a new bucket on the session's S3-compatible server (conftest.s3_bucket)
    return S3BlobStore.from_url(request.getfixturevalue("s3_bucket"))


# One entry per blob backend, as BACKENDS.
BLOB_BACKENDS: list[Callable[[pytest.FixtureRequest, Path], BlobStore]] = [_directory, _s3]


@pytest.fixture(params=BLOB_BACKENDS, ids=lambda f: f.__name__.lstrip("_"))
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    return request.param(request, tmp_path)  # type: ignore[no-any-return]


@pytest.fixture(params=BACKENDS, ids=lambda f: f.__name__.lstrip("_"))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = request.param(request, tmp_path)
    yield s
    s.close()


def report(crash_id: str, host: str = "h1", at: datetime = T0 + HOUR, signature: str = "main",
           hw: bool = False) -> CrashReport:
    return CrashReport(
        crash_id=crash_id, host_id=host, captured_at=at, source=Source.ELF_CORE,
        signal=SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR"),
        phenotypes=[Phenotype(name="null-deref"),
                    *([Phenotype(name="stack-misaligned", hardware_indicative=True)] if hw else [])],
        signature=Signature(signature=signature),
        analysis=AnalysisInfo(analyzer_version="test"),
    )


# --------------------------------------------------------------------------
# CrashStore


def test_crash_writes_are_idempotent_first_report_wins(store: CrashStore) -> None:
    a = CrashRecord(report("a"), {"app_version": "1"})
    assert store.add_crashes_new_ids([a, CrashRecord(report("b")), a]) == {"a", "b"}
    rewritten = CrashRecord(report("a", signature="other"), {"app_version": "2"})
    assert store.add_crashes_new_ids([rewritten, CrashRecord(report("c"))]) == {"c"}
    assert store.add_crashes([a, rewritten]) == 0
    assert store.add_crashes([CrashRecord(report("d"))]) == 1
    assert store.add_crashes_new_ids([]) == set()
    assert store.crash_ids() == {"a", "b", "c", "d"}
    stored = store.get_report("a")
    assert stored is not None and stored.signature is not None
    assert stored.signature.signature == "main"


def test_update_crash_replaces_known_only(store: CrashStore) -> None:
    store.add_crashes([CrashRecord(report("a"), {}, CoreStatus.MISSING, "never came")])
    before = store.list_crashes()[0]
    analysed = CrashRecord(report("a", signature="analysed"), {"k": 1}, CoreStatus.STORED)
    assert store.update_crash(analysed) is True
    assert store.update_crash(CrashRecord(report("nope"))) is False
    assert store.crash_ids() == {"a"}
    after = store.list_crashes()[0]
    assert after["signature"] == "analysed" and after["core_status"] == "stored"
    assert after["core_reason"] is None
    assert after["ingested_at"] == before["ingested_at"]
    assert store.get_reports(["a"])["a"] == analysed.report
    assert store.count_crashes(core_status="missing") == 0


def test_get_reports_leaves_unknown_out(store: CrashStore) -> None:
    store.add_crashes([CrashRecord(report("a")), CrashRecord(report("b"))])
    assert set(store.get_reports(["a", "zz", "a"])) == {"a"}
    assert store.get_reports([]) == {}
    assert store.get_report("zz") is None


def test_crash_records_round_trip(store: CrashStore) -> None:
    attrs = {"app_version": "2.1", "load": 7.5, "tags": ["x"]}
    recs = [
        CrashRecord(report("in", at=T0), attrs, CoreStatus.UNREADABLE, "broken", "/f/in"),
        CrashRecord(report("edge", at=T0 + DAY)),
        CrashRecord(report("other", host="h2", at=T0)),
    ]
    store.add_crashes(recs)
    got = store.crash_records("h1", T0, T0 + DAY)  # half-open: "edge" is out
    assert got == [recs[0]]
    assert store.crash_records("h3", T0, T0 + DAY) == []


def test_crash_frame_shape_and_window(store: CrashStore) -> None:
    empty = store.crash_frame()
    assert tuple(empty.columns) == (
        "crash_id", "host_id", "captured_at", "source", "signature", "phenotypes",
        "hardware_phenotypes", "signal", "si_code_name", "exe", "app_version", "core_status")
    assert empty.empty
    store.add_crashes([
        CrashRecord(report("b", at=T0 + 2 * HOUR, hw=True), {"load": 2.5, "source": "s"}),
        CrashRecord(report("a", at=T0), {"exe": "/bin/x"}, CoreStatus.STORED),
        CrashRecord(report("c", at=T0 + 3 * HOUR)),
    ])
    df = store.crash_frame()
    assert df["crash_id"].tolist() == ["a", "b", "c"]  # by captured_at
    assert str(df["captured_at"].dtype).endswith(", UTC]")
    assert df["captured_at"][0] == pd.Timestamp(T0)
    assert df["hardware_phenotypes"].tolist() == [[], ["stack-misaligned"], []]
    assert df["exe"][0] == "/bin/x"
    assert list(df.columns[12:]) == ["load", "sidecar_source"]
    assert df["load"][1] == 2.5 and pd.isna(df["load"][0])
    window = store.crash_frame(since=T0 + 2 * HOUR, until=T0 + 3 * HOUR)
    assert window["crash_id"].tolist() == ["b"]  # since included, until excluded
    assert store.count_crashes(since=T0 + HOUR) == 2
    assert store.count_crashes(until=T0 + 2 * HOUR, core_status="stored") == 1


def test_last_crash_at_is_the_hosts_latest_before(store: CrashStore) -> None:
    store.add_crashes([CrashRecord(report(f"c{i}", host=f"h{i % 2}", at=T0 + i * HOUR))
                       for i in range(5)])
    assert store.last_crash_at("h0", T0 + DAY) == T0 + 4 * HOUR
    assert store.last_crash_at("h0", T0 + 4 * HOUR) == T0 + 2 * HOUR  # `before` excluded
    assert store.last_crash_at("h1", T0 + DAY) == T0 + 3 * HOUR
    assert store.last_crash_at("h0", T0) is None and store.last_crash_at("h9", T0 + DAY) is None
    assert store.last_crash_at("h0", T0 + DAY).tzinfo is not None


def test_list_crashes_pages(store: CrashStore) -> None:
    for i in range(5):
        store.add_crashes([CrashRecord(report(f"c{i}", host=f"h{i % 2}", at=T0 + i * HOUR,
                                              signature=f"s{i % 3}"))])
    page = store.list_crashes(limit=2)
    assert [r["crash_id"] for r in page] == ["c0", "c1"]  # ingestion order
    assert tuple(page[0]) == CRASH_SUMMARY_COLUMNS
    assert page[0]["captured_at"] == T0 and page[0]["captured_at"].utcoffset() == timedelta(0)
    assert page[0]["phenotypes"] == ["null-deref"]
    after = (page[-1]["ingested_at"], page[-1]["crash_id"])
    assert [r["crash_id"] for r in store.list_crashes(limit=10, after=after)] == ["c2", "c3", "c4"]
    assert [r["crash_id"] for r in store.list_crashes(host_id="h1")] == ["c1", "c3"]
    assert [r["crash_id"] for r in store.list_crashes(signature="s0")] == ["c0", "c3"]
    assert [r["crash_id"] for r in store.list_crashes(since=T0 + HOUR, until=T0 + 3 * HOUR)] \
        == ["c1", "c2"]


# --------------------------------------------------------------------------
# HostStore


def test_hosts_replaced_by_id(store: HostStore) -> None:
    assert list(store.hosts_frame().columns) == ["host_id"]
    assert store.add_hosts([HostRow("h2", {"cpu": "Xeon"}, 2), HostRow("h1", {"cpu": "EPYC"}, 3),
                            HostRow("h2", {"cpu": "Xeon", "bios": "1.2"}, 4)]) == 2
    assert store.add_hosts([HostRow("h1", {"cpu": "EPYC", "bios": "2.10"}, 2)]) == 1
    assert store.host_ids() == {"h1", "h2"}
    assert store.hosts_frame().to_dict("records") == [
        {"host_id": "h1", "cpu": "EPYC", "bios": "2.10"},  # text stays text
        {"host_id": "h2", "cpu": "Xeon", "bios": "1.2"},
    ]


def test_exposure_idempotent_conflicts_and_frame(store: HostStore) -> None:
    store.add_hosts([HostRow("h1", {"kernel": "6.1", "cpu": "EPYC"}, 2)])
    first = [ExposureInterval("h1", T0, T0 + DAY, {"kernel": "6.2"}, 2),
             ExposureInterval("h1", T0 + DAY, T0 + 2 * DAY, {"kernel": None}, 3)]
    r = store.add_exposure(first, "exp.csv")
    assert (r.added, r.duplicates, r.conflicts) == (2, 0, [])
    overlap = ExposureInterval("h1", T0 + 12 * HOUR, T0 + 36 * HOUR, {}, 9)
    r = store.add_exposure([first[0], overlap])
    assert (r.added, r.duplicates, r.duplicated) == (0, 1, [first[0]])
    assert [(c[0].line, c[1], c[2]) for c in r.conflicts] == [(9, T0, T0 + DAY)]
    assert store.add_exposure([]).added == 0
    df = store.exposure_frame()
    assert list(df.columns) == ["host_id", "start", "end", "seconds", "cpu", "kernel"]
    assert df["kernel"].tolist() == ["6.2", "6.1"]  # the interval's value wins, None does not
    assert df["seconds"].tolist() == [86400.0, 86400.0]
    clipped = store.exposure_frame(since=T0 + 18 * HOUR, until=T0 + 30 * HOUR)
    assert clipped["seconds"].tolist() == [6 * 3600.0, 6 * 3600.0]
    assert clipped["start"][0] == pd.Timestamp(T0 + 18 * HOUR)
    assert store.exposure_frame(since=T0 + 2 * DAY).empty  # end is exclusive


def test_crashes_outside_exposure_and_node_time(store: Store) -> None:
    store.add_hosts([HostRow("h1", {"cpu": "EPYC"}, 2), HostRow("h2", {"cpu": "Xeon"}, 3)])
    store.add_exposure([ExposureInterval("h1", T0, T0 + DAY, {}, 2),
                        ExposureInterval("h2", T0, T0 + 2 * DAY, {}, 3)])
    store.add_crashes([CrashRecord(report("in", at=T0 + HOUR)),
                       CrashRecord(report("end", at=T0 + DAY)),
                       CrashRecord(report("h2", host="h2", at=T0 + DAY))])
    outside = list(store.crashes_outside_exposure())
    assert outside == [("end", "h1", T0 + DAY, None)]
    frames = store.node_time_frames(T0, T0 + 2 * DAY)
    assert frames is not None  # both stores sum node-time in the database
    assert frames.by_host.to_dict() == {"h1": 1.0, "h2": 2.0}
    sets = dict(zip(frames.sets["cpu"], frames.sets["node_days"], strict=True))
    assert sets == {"EPYC": 1.0, "Xeon": 2.0}
    by_id = dict(zip(frames.crashes["crash_id"], frames.crashes["exposure_set"], strict=True))
    assert by_id["end"] == -1 and by_id["in"] >= 0
    assert frames.sets["cpu"][by_id["h2"]] == "Xeon"
    assert frames.host_sets is not None
    host_sets = {(h, frames.sets["cpu"][k]): d for h, k, d in frames.host_sets.itertuples(
        index=False)}
    assert host_sets == {("h1", "EPYC"): 1.0, ("h2", "Xeon"): 2.0}


def _node_time_fleet(store: Store) -> None:
    """Two hosts (one without a hosts.csv row), interval attributes that
    override the host's, crashes inside, between and outside intervals."""
    store.add_hosts([HostRow("h1", {"cpu": "EPYC", "kernel": "6.1"}, 2)])
    store.add_exposure([
        ExposureInterval("h1", T0, T0 + DAY, {"kernel": "6.2"}, 2),
        ExposureInterval("h1", T0 + DAY, T0 + 3 * DAY, {}, 3),
        ExposureInterval("h2", T0 + 6 * HOUR, T0 + 2 * DAY, {"load": 3}, 4),
        ExposureInterval("h3", T0 - 2 * DAY, T0 - DAY, {}, 5),  # before the window
    ])
    store.add_crashes([
        CrashRecord(report("a1", at=T0 + HOUR, hw=True)),
        CrashRecord(report("a2", at=T0 + DAY, signature="other")),  # the second interval
        CrashRecord(report("b1", host="h2", at=T0 + HOUR)),  # before h2's interval: none
        CrashRecord(report("b2", host="h2", at=T0 + 47 * HOUR)),
        CrashRecord(report("z9", at=T0 + 5 * DAY)),  # past the window
    ])


def test_node_time_frames_summed_in_the_database(store: Store) -> None:
    _node_time_fleet(store)
    frames = store.node_time_frames(T0, T0 + 2 * DAY)
    assert frames is not None
    assert frames.by_host.sort_index().to_dict() == {"h1": 2.0, "h2": 1.75}
    sets = {(r.cpu if isinstance(r.cpu, str) else None, r.kernel if isinstance(r.kernel, str)
             else None): r.node_days for r in frames.sets.itertuples()}
    assert sets == {("EPYC", "6.2"): 1.0, ("EPYC", "6.1"): 1.0, (None, None): 1.75}
    crashes = frames.crashes.set_index("crash_id")
    assert list(frames.crashes["crash_id"]) == ["a1", "b1", "a2", "b2"]  # by time, z9 left out
    kernel = {c: frames.sets["kernel"][k] if k >= 0 else "none"
              for c, k in crashes["exposure_set"].items()}
    assert kernel == {"a1": "6.2", "a2": "6.1", "b1": "none", "b2": frames.sets["kernel"][
        crashes["exposure_set"]["b2"]]}
    assert crashes["exposure_set"]["b2"] >= 0 and crashes["exposure_set"]["b1"] == -1
    assert crashes["phenotypes"]["a1"] == ["null-deref", "stack-misaligned"]
    assert crashes["hardware_phenotypes"]["a1"] == ["stack-misaligned"]
    assert crashes["hardware_phenotypes"]["a2"] == []
    assert crashes["signature"].to_dict() == {"a1": "main", "b1": "main", "a2": "other",
                                             "b2": "main"}
    assert str(crashes["captured_at"].dtype).endswith(", UTC]")
    assert frames.host_sets is not None and len(frames.host_sets) == 3
    assert frames.host_sets["node_days"].sum() == 3.75
    whole = store.node_time_frames()  # default window: exposure's span widened to every crash
    assert whole is not None
    assert (whole.since, whole.until) == (T0 - 2 * DAY, T0 + 5 * DAY + timedelta(seconds=1))
    assert list(whole.crashes["crash_id"])[-1] == "z9"
    empty = store.node_time_frames(T0 + 10 * DAY, T0 + 11 * DAY)
    assert empty is not None and empty.crashes.empty and empty.sets.empty
    assert empty.host_sets is not None and empty.host_sets.empty


def test_node_time_frames_same_on_both_stores(tmp_path: Path, pg_url: str) -> None:
    """The PostgreSQL path gives DuckDB's frames, value for value (rows of the
    sets may come in another order: compared through the set each row means)."""
    stores = [DuckDBStore(tmp_path / "data"),
              PostgresStore(pg_url, DirectoryBlobStore(tmp_path / "blobs"))]
    try:
        got = []
        for s in stores:
            _node_time_fleet(s)
            frames = s.node_time_frames()
            assert frames is not None and frames.host_sets is not None
            key = [tuple(row) for row in frames.sets.drop(columns="node_days").map(str)
                   .itertuples(index=False)]
            crashes = frames.crashes.assign(
                exposure_set=[key[k] if k >= 0 else None for k in frames.crashes["exposure_set"]])
            host_sets = sorted((h, key[k], d) for h, k, d in frames.host_sets.itertuples(
                index=False))
            got.append((frames.since, frames.until, sorted(zip(key, frames.sets["node_days"],
                                                               strict=True)),
                        frames.by_host.sort_index().to_dict(), host_sets,
                        crashes.map(str).to_dict("records"), list(frames.sets.columns)))
        assert got[0] == got[1]
    finally:
        for s in stores:
            s.close()


# --------------------------------------------------------------------------
# TelemetryStore


def test_events_idempotent_and_frame(store: TelemetryStore) -> None:
    assert list(store.telemetry_frame().columns) == [
        "event_id", "host_id", "ts", "kind", "severity", "component", "hardware_indicative",
        "summary"]
    e1 = TelemetryEvent(event_id="e1", host_id="h1", ts=T0 + HOUR, kind=EventKind.MCE,
                        summary="mce", detail={"bank": 4})
    e2 = TelemetryEvent(event_id="e2", host_id="h1", ts=T0, kind=EventKind.MCE, summary="x")
    assert store.add_events([e1, e2, e1]) == 2
    assert store.add_events([e1]) == 0
    assert store.add_events([]) == 0
    df = store.telemetry_frame()
    assert df["event_id"].tolist() == ["e2", "e1"]
    assert df["hardware_indicative"].dtype == bool
    assert str(df["ts"].dtype).endswith(", UTC]")
    assert store.telemetry_frame(since=T0 + HOUR)["event_id"].tolist() == ["e1"]
    assert store.telemetry_frame(until=T0 + HOUR)["event_id"].tolist() == ["e2"]


# --------------------------------------------------------------------------
# LedgerStore


def test_ledger_last_entry_wins(store: LedgerStore) -> None:
    e1 = LedgerEntry("/x", 1, 2, "ab" * 32, "crash-json", "done")
    e1b = LedgerEntry("/x", 5, 6, "ef" * 32, "crash-json", "done")
    e2 = LedgerEntry("/y", 3, 4, "cd" * 32, "crash-artifact", "done")
    store.record_files([e1, e2, e1b])
    store.record_files([])
    assert store.ledger_entries(["/x", "/y", "/z", "/x"]) == {"/x": e1b, "/y": e2}
    store.record_file(e1)
    assert store.ledger_entry("/x") == e1 and store.ledger_entry("/z") is None
    assert store.ledger_has_sha256("cd" * 32) and not store.ledger_has_sha256("ef" * 32)


def test_rejections_replaced_per_file_and_category(store: LedgerStore) -> None:
    assert list(store.rejections_frame().columns) == list(REJECTION_COLUMNS)
    assert store.add_rejections([Rejection("/a", 3, "overlap", "x"),
                                 Rejection("/b", None, "bad-file", "y"),
                                 Rejection("/c", 1, "outside", "z")]) == 3
    assert store.add_rejections([Rejection("/a", 4, "bad-timestamp", "w", "kept")],
                                replace_files=["/a", "/nothing"]) == 1
    assert store.replace_rejections("outside", [Rejection("/d", 2, "outside", "v")]) == 1
    df = store.rejections_frame()
    assert df[["file", "category", "action"]].values.tolist() == [
        ["/a", "bad-timestamp", "kept"], ["/b", "bad-file", "rejected"], ["/d", "outside", "rejected"]]
    assert df["line"][0] == 4 and pd.isna(df["line"][1])
    assert store.replace_rejections("outside", []) == 0
    assert store.rejections_frame()["file"].tolist() == ["/a", "/b"]


def test_receipts_replace_keeps_first_time(store: LedgerStore) -> None:
    r1 = Receipt("a", "11" * 32, None, T0)
    store.add_receipts([r1, Receipt("b", "22" * 32, "k" * 64, T0)])
    store.add_receipt(Receipt("a", "33" * 32, "c" * 64, T0 + DAY))
    assert store.receipt("a") == Receipt("a", "33" * 32, "c" * 64, T0)
    assert set(store.receipts(["a", "b", "zz"])) == {"a", "b"}
    assert store.receipts([]) == {} and store.receipt("zz") is None


# --------------------------------------------------------------------------
# TokenStore


def test_tokens_add_list_revoke(store: TokenStore) -> None:
    t1 = ApiToken("t1", "ci", ("ingest",), "aa" * 32, T0)
    t2 = ApiToken("t2", "ci", ("read", "admin"), "bb" * 32, T0 + HOUR)
    t3 = ApiToken("t3", "ops", ("read",), "cc" * 32, T0 + DAY)
    for t in (t3, t1, t2):
        store.add_api_token(t)
    assert store.api_tokens() == [t1, t2, t3]
    with pytest.raises(ValueError, match="'t1'"):
        store.add_api_token(ApiToken("t1", "again", ("read",), "dd" * 32, T0))
    with pytest.raises(ValueError, match="'t4'"):
        store.add_api_token(ApiToken("t4", "same hash", ("read",), "aa" * 32, T0))
    assert store.api_tokens() == [t1, t2, t3]  # the refused ones left nothing
    assert store.revoke_api_token("ci") == 2
    assert store.revoke_api_token("ci") == 0 and store.revoke_api_token("nobody") == 0
    assert store.api_tokens() == [t3]
    revoked = store.api_tokens(include_revoked=True)
    assert [t.token_id for t in revoked] == ["t1", "t2", "t3"]
    assert revoked[0].revoked_at is not None and revoked[0].revoked_at.utcoffset() == timedelta(0)
    assert store.revoke_api_token("t3") == 1


# --------------------------------------------------------------------------
# BlobStore


def test_store_keeps_blobs(store: Store, tmp_path: Path) -> None:
    f = tmp_path / "core"
    f.write_bytes(b"\x7fELF" + bytes(10_000))
    key = store.put_blob(f)
    assert store.blobs.has(key) and store.get_blob(key) == f.read_bytes()


def test_blobs_content_addressed(blobs: BlobStore, tmp_path: Path) -> None:
    f = tmp_path / "core"
    f.write_bytes(b"\x7fELF" + bytes(10_000))
    key = blobs.put_file(f)
    assert len(key) == 64 and blobs.put_file(f) == key == blobs.put_file(f, key)
    assert blobs.get(key) == f.read_bytes()
    zst = tmp_path / "core.zst"
    zst.write_bytes(zstandard.compress(f.read_bytes()))
    assert blobs.get(blobs.put_file(zst)) == zst.read_bytes()  # kept as received
    assert blobs.has(key) and (blobs.size(key) or 0) > 0
    assert blobs.put_bytes(b"hello") == "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    missing = "0" * 64
    assert not blobs.has(missing) and blobs.size(missing) is None
    with pytest.raises(KeyError):
        blobs.get(missing)
    with pytest.raises(ValueError, match="not a blob key"):
        blobs.get("../etc/passwd")
    with pytest.raises(ValueError, match="content changed"):
        blobs.put_file(f, "1" * 64)
    assert not blobs.has("1" * 64)


def test_blobs_stored_form_streams_without_inflating(blobs: BlobStore, tmp_path: Path) -> None:
    """A download hands out the stored form: zstd made by the store for a
    plain core, the received bytes for a core that arrived compressed."""
    plain = bytes(range(256)) * 12_000  # 3 MB: more than one chunk once stored
    key = blobs.put_bytes(plain)
    stored = b"".join(blobs.stored_chunks(key))
    assert stored[:4] == b"\x28\xb5\x2f\xfd" and len(stored) == blobs.size(key) < len(plain)
    assert zstandard.ZstdDecompressor().decompress(stored, max_output_size=len(plain)) == plain
    assert blobs.stored_head(key) == stored[:8]
    gz = gzip.compress(b"\x7fELF" + bytes(5000))
    gz_key = blobs.put_bytes(gz)
    assert b"".join(blobs.stored_chunks(gz_key)) == gz and blobs.stored_head(gz_key, 2) == b"\x1f\x8b"
    with pytest.raises(KeyError):
        next(iter(blobs.stored_chunks("0" * 64)))
    with pytest.raises(KeyError):
        blobs.stored_head("0" * 64)


def test_blobs_stream_list_delete_and_prune(blobs: BlobStore) -> None:
    old = blobs.put_bytes(b"old" * 1000)
    big = blobs.put_bytes(bytes(range(256)) * 4000)
    out = io.BytesIO()
    assert blobs.write_to(big, out) == 1_024_000 and out.getvalue() == bytes(range(256)) * 4000
    listed = {b.key: b for b in blobs.entries()}
    assert set(listed) == {old, big}
    assert listed[big].size == blobs.size(big) and listed[big].modified.utcoffset() == timedelta(0)
    now = max(b.modified for b in listed.values())
    # nothing is older than a day, and both fit under the cap
    result = blobs.prune(max_age=DAY, max_total_bytes=listed[big].size + listed[old].size, now=now)
    assert (result.deleted, result.kept) == (0, 2)
    result = blobs.prune(max_age=None, max_total_bytes=max(b.size for b in listed.values()),
                         now=now)
    assert (result.deleted_for_age, result.deleted_for_size, result.kept) == (0, 1, 1)
    assert result.kept_bytes == sum(b.size for b in blobs.entries())
    assert result.deleted_bytes + result.kept_bytes == listed[big].size + listed[old].size
    result = blobs.prune(max_age=timedelta(0), now=now + HOUR)
    assert (result.deleted_for_age, result.kept, result.kept_bytes) == (1, 0, 0)
    assert list(blobs.entries()) == [] and not blobs.has(big)
    # the tombstones retention left (what a copy of the store carries)
    assert sorted(blobs.pruned_keys()) == sorted([old, big])
    assert blobs.was_pruned(old) and blobs.was_pruned(big) and not blobs.was_pruned("0" * 64)
    blobs.delete(big)  # absent: nothing happens
    with pytest.raises(KeyError):
        blobs.write_to(big, io.BytesIO())


# --------------------------------------------------------------------------
# JobQueue


def test_queue_take_finish_idempotent(store: JobQueue) -> None:
    assert store.enqueue_analysis("c1", "k" * 64) is True
    assert store.enqueue_analysis("c1", "k" * 64) is False  # one job per crash
    assert store.enqueue_analysis("c2", "j" * 64) is True
    assert store.job_counts() == {"queued": 2, "running": 0, "done": 0, "dead": 0}
    taken = store.take_jobs("w1", limit=1)
    assert [(j.crash_id, j.state, j.attempts, j.worker) for j in taken] == [
        ("c1", JobState.RUNNING, 1, "w1")]
    assert [j.crash_id for j in store.take_jobs("w2", limit=5)] == ["c2"]
    assert store.take_jobs("w3") == []  # both taken, both alive
    assert store.heartbeat_jobs("w1", ["core:c1", "core:c2"]) == 1  # c2 is w2's
    assert store.finish_job("core:c1", "w2") is False  # not its job
    assert store.finish_job("core:c1", "w1") is True
    assert store.finish_job("core:c1", "w1") is False  # already done
    assert store.job_counts() == {"queued": 0, "running": 1, "done": 1, "dead": 0}
    done = store.jobs(JobState.DONE)
    assert [j.job_id for j in done] == ["core:c1"] and done[0].finished_at is not None
    assert store.enqueue_analysis("c1", "k" * 64) is False  # done stays done


def test_queue_retries_with_backoff_then_dead(store: JobQueue) -> None:
    store.enqueue_analysis("c1", "k" * 64, max_attempts=2)
    (job,) = store.take_jobs("w1")
    assert store.fail_job(job.job_id, "w2", "not mine") is None
    assert store.fail_job(job.job_id, "w1", "boom", backoff_seconds=3600) is JobState.QUEUED
    (queued,) = store.jobs(JobState.QUEUED)
    assert queued.last_error == "boom" and queued.run_after - job.heartbeat_at >= timedelta(
        seconds=3599)  # type: ignore[operator]
    assert store.take_jobs("w1") == []  # backing off
    assert store.fail_job(job.job_id, "w1", "again") is None  # not running now
    store.retry_job(job.job_id)  # only dead jobs are retried
    assert store.jobs(JobState.QUEUED)[0].run_after == queued.run_after


def test_queue_dead_workers_lose_their_jobs(store: JobQueue) -> None:
    store.enqueue_analysis("c1", "k" * 64, max_attempts=2)
    store.enqueue_analysis("c2", "j" * 64, max_attempts=1)
    assert len(store.take_jobs("w1", limit=2)) == 2
    # w1 died: no heartbeat within stale_after; c1 is taken over, c2 was
    # on its last attempt and is dead
    taken = store.take_jobs("w2", limit=2, stale_after=0)
    assert [(j.crash_id, j.attempts, j.worker) for j in taken] == [("c1", 2, "w2")]
    assert store.finish_job("core:c1", "w1") is False  # the late old worker is refused
    (dead,) = store.jobs(JobState.DEAD)
    assert dead.crash_id == "c2" and "worker lost" in (dead.last_error or "")
    assert store.fail_job("core:c1", "w2", "broken core") is JobState.DEAD
    assert store.job_counts()["dead"] == 2
    assert store.retry_job("core:c2") is True and store.retry_job("core:c2") is False
    (again,) = store.take_jobs("w3")
    assert (again.crash_id, again.attempts) == ("c2", 1)


def test_queue_jobs_of_a_worker_known_dead_are_taken_at_once(store: JobQueue) -> None:
    """expire_workers: the jobs of a worker whose process is gone go to the
    next take whatever ``stale_after`` says (before: 60 s of waiting)."""
    for c in ("c1", "c2", "c3"):
        store.enqueue_analysis(c, "k" * 64)
    assert len(store.take_jobs("gone", limit=2)) == 2
    assert len(store.take_jobs("alive", limit=1)) == 1
    assert store.take_jobs("w2", limit=3, stale_after=3600) == []  # fresh heartbeats
    assert store.expire_workers(["gone", "never-ran"]) == 2
    taken = store.take_jobs("w2", limit=3, stale_after=3600)
    assert [(j.crash_id, j.attempts, j.worker) for j in taken] == [("c1", 2, "w2"),
                                                                   ("c2", 2, "w2")]
    assert store.expire_workers([]) == 0


# --------------------------------------------------------------------------
# transactions and the whole store


def test_transaction_spans_interfaces_and_rolls_back(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        store.add_crashes([CrashRecord(report("x"))])
        with store.transaction():  # nested: joins the outer one
            store.record_files([LedgerEntry("/x", 1, 2, "ab" * 32, "crash-json", "done")])
        assert store.ledger_entry("/x") is not None  # a read sees its own transaction
        raise RuntimeError("boom")
    assert store.counts() == dict.fromkeys(COUNTED_TABLES, 0)
    with store.transaction():
        store.add_crashes([CrashRecord(report("x"))])
        store.add_events([TelemetryEvent(event_id="e", host_id="h1", ts=T0, kind=EventKind.MCE,
                                         summary="s")])
    assert store.counts() == {**dict.fromkeys(COUNTED_TABLES, 0), "crashes": 1, "telemetry": 1}
    assert store.schema_version() >= 1


# --------------------------------------------------------------------------
# AlertStore (surveillance)

def test_alerts_upsert_by_key_and_filter_by_state(store: AlertStore) -> None:
    firing = AlertRecord("rising|signature=s", "rising", {"kind": "rising", "signature": "s"},
                         "s is rising", {"ratio": 3.5, "crashes": 7}, "firing", T0, T0)
    other = AlertRecord("new-group|signature=n", "new-group", {"kind": "new-group"}, "new",
                        {}, "firing", T0 + HOUR, T0 + HOUR)
    store.put_alert(firing)
    store.put_alert(other)
    resolved = AlertRecord(firing.key, "rising", firing.labels, "s is rising",
                           {"ratio": 3.5, "crashes": 7}, "resolved", T0, T0 + DAY, T0 + DAY)
    store.put_alert(resolved)  # same key: one row, replaced
    assert store.alerts() == [resolved, other]
    assert store.alerts("firing") == [other]
    assert store.alerts("resolved") == [resolved]


def test_silences_expire_and_match(store: AlertStore) -> None:
    s = SilenceRecord("s1", {"kind": "rising"}, T0, T0 + DAY, "me", "known")
    store.add_silence(s)
    with pytest.raises(ValueError, match="'s1'"):
        store.add_silence(s)
    assert store.silences(active_at=T0 + HOUR) == [s]
    assert store.silences(active_at=T0 + 2 * DAY) == []
    assert s.matches({"kind": "rising", "signature": "x"}, T0 + HOUR)
    assert not s.matches({"kind": "new-group"}, T0 + HOUR)
    assert store.expire_silence("s1", T0 + 2 * HOUR) is True
    assert store.expire_silence("s1", T0 + 3 * HOUR) is False  # already over
    assert store.silences(active_at=T0 + 3 * HOUR) == []
    assert store.silences()[0].expires_at == T0 + 2 * HOUR


def test_delivery_log_and_drains(store: AlertStore) -> None:
    d1 = DeliveryRecord("k", "ops", "firing", 1, T0, 503, False, "HTTP 503")
    d2 = DeliveryRecord("k", "ops", "firing", 2, T0 + HOUR, 200, True)
    d3 = DeliveryRecord("j", "ops", "firing", 1, T0 + HOUR, 0, False, "ConnectError: refused")
    for d in (d1, d2, d3):
        store.add_delivery(d)
    assert store.deliveries("k") == [d1, d2]
    assert store.deliveries() == [d1, d3, d2]  # by time, then attempt
    drain = DrainRecord("h7", T0, "cli", "mce storm")
    assert store.drain_host(drain) is True
    assert store.drain_host(DrainRecord("h7", T0 + DAY)) is False  # the first drain stays
    assert store.drained_hosts() == [drain]


def test_undrain_keeps_the_drained_span(store: AlertStore) -> None:
    drain = DrainRecord("h7", T0, "cli", "mce storm")
    assert store.undrain_host("h7", T0 + DAY, "cli") is None  # not drained: nothing changes
    store.drain_host(drain)
    ended = store.undrain_host("h7", T0 + 3 * DAY, "token:ops")
    assert ended == DrainRecord("h7", T0, "cli", "mce storm", {}, T0 + 3 * DAY, "token:ops")
    assert store.drained_hosts() == [] and store.drain_history() == [ended]
    # drained again after the repair: a second span, the first kept
    assert store.drain_host(DrainRecord("h7", T0 + 5 * DAY, "cli", "again")) is True
    second = store.undrain_host("h7", T0 + 6 * DAY, "cli")
    assert second is not None and store.drain_history() == [ended, second]
    assert store.undrain_host("h7", T0 + 7 * DAY, "cli") is None


def test_signatures_before(store: Store) -> None:
    store.add_crashes([CrashRecord(report("a", at=T0, signature="old")),
                       CrashRecord(report("b", at=T0 + DAY, signature="new"))])
    assert store.signatures_before(T0 + HOUR) == {"old"}
    assert store.signatures_before(T0 + 2 * DAY) == {"old", "new"}
