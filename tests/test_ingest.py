"""`coreepi ingest` on a small real fleet: real cores (gcc + gdb gcore), a
hostile and a truncated core, malformed rows; exact counts, file:line
messages, idempotency, and a kill -9 in the middle of an ingest."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import zstandard
from fleetfactory import CoreSet, coreset  # noqa: F401

from coreepi.cli.main import accepted_anything
from coreepi.ingest.artifacts import inspect_file
from coreepi.ingest.run import ingest
from coreepi.store import DuckDBStore, open_store


def sidecar(path: Path, host: str, when: str, **extra: object) -> None:
    path.write_text(json.dumps({"host_id": host, "captured_at": when, **extra}))


def make_fleet(root: Path, cores: CoreSet) -> Path:
    fleet = root / "fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True)
    (fleet / "hosts.csv").write_text(
        "host_id,cpu_model,kernel\n"
        "h1,EPYC 7763,6.1\n"
        "h2,Xeon 8380,6.1\n"
        "h3,Xeon 8380,6.5\n"
        "h4,Xeon 8380\n"  # line 5: a field short
    )
    (fleet / "exposure.csv").write_text(
        "host_id,start,end,app_version\n"
        "h1,2024-01-01T00:00:00Z,2024-01-10T00:00:00Z,2.1\n"
        "h2,2024-01-01T00:00:00Z,2024-01-10T00:00:00Z,2.1\n"
        "h3,2024-01-01T00:00:00Z,2024-01-05T00:00:00Z,2.0\n"
        "h3,2024-01-04T00:00:00Z,2024-01-10T00:00:00Z,2.1\n"  # line 5: overlaps line 4
        "h2,2024-01-11T00:00:00Z,last tuesday,2.1\n"          # line 6: bad timestamp
        "h9,2024-01-01T00:00:00Z,2024-01-10T00:00:00Z,2.1\n"  # line 7: unknown host
    )
    (fleet / "telemetry.jsonl").write_text(
        json.dumps({"host_id": "h1", "ts": "2024-01-02T00:00:00Z", "kind": "mce"}) + "\n"
        + json.dumps({"host_id": "h1", "ts": "2024-01-03T00:00:00Z", "kind": "edac_ce"}) + "\n"
        + "{not json\n"  # line 3
    )
    c = cores.cores
    shutil.copy(c[0], crashes / "core.1")
    sidecar(crashes / "core.1.json", "h1", "2024-01-02T10:00:00Z", app_version="2.1",
            load_avg=12.5)
    (crashes / "core.2.zst").write_bytes(zstandard.ZstdCompressor().compress(c[1].read_bytes()))
    sidecar(crashes / "core.2.json", "h2", "2024-01-03T10:00:00Z", app_version="2.1")
    (crashes / "core.3.gz").write_bytes(gzip.compress(c[2].read_bytes()))
    sidecar(crashes / "core.3.gz.json", "h3", "2024-01-04T10:00:00Z", app_version="2.0")
    rng = random.Random(4)
    (crashes / "hostile").write_bytes(b"\x7fELF" + rng.randbytes(65536))
    sidecar(crashes / "hostile.json", "h1", "2024-01-05T10:00:00Z")
    (crashes / "truncated").write_bytes(c[3].read_bytes()[:3000])
    sidecar(crashes / "truncated.json", "h2", "2024-01-05T11:00:00Z")
    [rep] = inspect_file(c[4], exe=cores.binary)
    rep.host_id, rep.captured_at = "h3", datetime(2024, 1, 20, tzinfo=UTC)  # outside exposure
    (crashes / "report.json").write_text(rep.model_dump_json())
    sidecar(crashes / "lost.json", "h1", "2024-01-06T00:00:00Z", core_dropped_reason="rate limit")
    shutil.copy(c[5], crashes / "core.6")
    (crashes / "core.6.json").write_text('{"host_id": "h1",\n "captured_at": 2024-01-07}\n')
    shutil.copy(c[6], crashes / "core.7")
    sidecar(crashes / "core.7.json", "h9", "2024-01-07T00:00:00Z")
    shutil.copy(c[7], crashes / "core.8")  # no sidecar
    return fleet


def rows(store: DuckDBStore, sql: str) -> list[tuple[object, ...]]:
    return store._query(sql).fetchall()


def test_ingest_fleet(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    fleet = make_fleet(tmp_path, coreset)
    crashes = fleet / "crashes"
    with open_store(tmp_path / "data") as store:
        summary = ingest([fleet], store, jobs=2, timeout=120)
        assert store.counts() | {"ingest_rejections": 0} == {
            "hosts": 3, "exposure": 3, "crashes": 7, "telemetry": 2, "ingest_rejections": 0,
            "ingest_ledger": 3 + 7,
        }
        assert summary.crashes_added == 7
        assert summary.crashes_by_status == {"stored": 3, "unreadable": 2, "not-stored": 1,
                                             "missing": 1}
        assert summary.rejections.counts() == {
            "malformed-row": 1, "overlap": 1, "bad-timestamp": 1, "unknown-host": 2,
            "not-json": 2, "no-sidecar": 1,
        }
        messages = sorted(str(r) for r in summary.rejections)
        expected = sorted([
            f"{fleet}/hosts.csv:5: expected 3 fields, found 2",
            f"{fleet}/exposure.csv:5: interval of host 'h3' overlaps the one on line 4",
            f"{fleet}/exposure.csv:6: not an ISO-8601 timestamp: 'last tuesday'",
            f"{fleet}/exposure.csv:7: unknown host_id 'h9' (not in hosts)",
            f"{fleet}/telemetry.jsonl:3: not JSON: Expecting property name enclosed in double "
            "quotes (column 2)",
            f"{crashes}/core.6.json:2: sidecar is not JSON: Expecting ',' delimiter (column 21); "
            "crash not ingested",
            f"{crashes}/core.7.json: unknown host_id 'h9' (not in hosts); crash not ingested",
            f"{crashes}/core.8: no sidecar (core.8.json) giving host_id and captured_at; "
            "not ingested",
            f"{crashes}/lost.json: core missing (rate limit); crash counted",
            f"{crashes}/report.json: crash {json.loads((crashes / 'report.json').read_text())['crash_id']} "
            "of host 'h3' at 2024-01-20T00:00:00+00:00 is outside every exposure interval of its "
            "host (counted in the crash totals; left out of the rates, the per-host tests and "
            "attribute ratios, see docs/epidemiology.md)",
        ] + [m for m in messages if m.startswith((f"{crashes}/hostile:", f"{crashes}/truncated:"))])
        assert messages == expected
        unreadable = [r for r in summary.rejections if r.file.endswith(("hostile", "truncated"))]
        assert [(Path(r.file).name, r.category, r.action) for r in unreadable] == [
            ("hostile", "unreadable-core", "kept"), ("truncated", "unreadable-core", "kept")]
        assert store.rejections_frame().shape[0] == len(summary.rejections)

        df = store.crash_frame()
        by_artifact = {Path(a).name: cid for cid, a in rows(store, "SELECT crash_id, artifact FROM crashes")}
        got = df.set_index("crash_id").loc[
            [by_artifact[n] for n in ("core.1", "core.2.zst", "core.3.gz", "hostile", "truncated",
                                      "lost.json", "report.json")]]
        assert got["host_id"].tolist() == ["h1", "h2", "h3", "h1", "h2", "h1", "h3"]
        assert got["core_status"].tolist() == ["stored"] * 3 + ["unreadable"] * 2 + [
            "missing", "not-stored"]
        assert got["signature"].tolist()[:3] == ["main"] * 3
        assert got["phenotypes"].tolist()[:3] == [["null-deref"]] * 3
        assert got["signal"].tolist()[:3] == ["SIGSEGV"] * 3
        assert got["app_version"].tolist()[:3] == ["2.1", "2.1", "2.0"]
        assert got["load_avg"].tolist()[0] == 12.5
        assert str(got["captured_at"].dtype).endswith(", UTC]")
        assert got["captured_at"].tolist()[0] == datetime(2024, 1, 2, 10, tzinfo=UTC)
        # numerator honesty: the reasons are kept
        reasons = dict(rows(store, "SELECT artifact, core_reason FROM crashes"))
        assert reasons[str(crashes / "lost.json")] == "rate limit"
        assert reasons[str(crashes / "hostile")].startswith("unreadable-core: ")
        # the stored cores are blobs whose content is the file as received
        core2 = store.get_report(by_artifact["core.2.zst"])
        assert core2 is not None and core2.core.stored and core2.core.blob_key
        assert store.get_blob(core2.core.blob_key) == (crashes / "core.2.zst").read_bytes()
        assert core2.host_id == "h2" and core2.core.sha256 == core2.core.blob_key
        # exposure: hosts' attributes merged, the interval's override winning
        ex = store.exposure_frame()
        assert ex[["host_id", "cpu_model", "kernel", "app_version"]].values.tolist() == [
            ["h1", "EPYC 7763", "6.1", "2.1"], ["h2", "Xeon 8380", "6.1", "2.1"],
            ["h3", "Xeon 8380", "6.5", "2.0"]]

        # re-running adds nothing and reads no unchanged file; the 3 rejected crash
        # files are looked at again (cheaply: their sidecar), so a fix gets picked up
        again = ingest([fleet], store, jobs=2, timeout=120)
        assert (again.crashes_added, again.files_skipped, again.files_seen) == (0, 10, 13)
        # report.json's outside-exposure note was this store's first run's news, not this one's
        assert "outside-exposure" not in {r.category for r in again.rejections}
        assert "outside-exposure" in set(store.rejections_frame()["category"])
        assert store.counts()["crashes"] == 7
        # touched files (new mtime, same content): read again, still nothing added
        for p in crashes.iterdir():
            os.utime(p)
        third = ingest([fleet], store, jobs=2, timeout=120)
        assert third.crashes_added == 0 and store.counts()["crashes"] == 7
        # JSON files are re-read (2 crashes already stored); cores are recognised by sha256
        assert third.crashes_existing == 2
        # fixing a sidecar lets its crash in on the next run
        sidecar(crashes / "core.6.json", "h1", "2024-01-07T00:00:00Z")
        fourth = ingest([fleet], store, jobs=2, timeout=120)
        assert (fourth.crashes_added, store.counts()["crashes"]) == (1, 8)
        assert not [r for r in store.rejections_frame()["file"] if r.endswith("core.6.json")]


def test_worker_limits(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    files = tmp_path / "in"
    files.mkdir()
    shutil.copy(coreset.cores[0], files / "a")
    sidecar(files / "a.json", "h1", "2024-01-01T00:00:00Z")
    with open_store(tmp_path / "d1") as store:
        s = ingest([files / "a"], store, jobs=1, timeout=0.01)
        assert s.crashes_by_status == {"unreadable": 1}
        assert [r.category for r in s.rejections] == ["worker-timeout"]
        assert "analysis took longer than 0.01 s" in str(s.rejections.items[0])
    with open_store(tmp_path / "d2") as store:
        # a resource limit is no rejected input (the queue worker retries it too):
        # tried twice, counted but not judged, reported as a limit, tried by the next ingest
        s = ingest([files], store, jobs=1, timeout=120, memory_limit_mb=80)
        assert s.crashes_by_status == {"unreadable": 1} and not s.rejections
        assert store.rejections_frame().empty
        [limited] = s.resource_limited
        assert limited == f"{files / 'a'}: analysis exceeded the memory limit (80 MiB)"
        assert "resource limits: 1 artifact(s) hit an analysis limit twice" in str(s)
        (reason,) = store._query("SELECT core_reason FROM crashes").fetchone()
        assert reason == ("memory-limit: analysis exceeded the memory limit (80 MiB); "
                          "not judged: the next ingest tries again")
        again = ingest([files], store, jobs=1, timeout=120)
        assert (again.files_skipped, again.crashes_completed, again.resource_limited) == (0, 1, [])
        assert dict(store._query("SELECT core_status, count(*) FROM crashes GROUP BY 1")
                    .fetchall()) == {"stored": 1}


def _ingest_cli(fleet: Path, data: Path) -> subprocess.Popen[str]:
    # A SIGKILLed ingest cannot remove its temporary directories: keep them
    # under the test's own directory so nothing is left in /tmp.
    tmp = data.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, COREEPI_DEBUG="1", TMPDIR=str(tmp))
    return subprocess.Popen(
        [sys.executable, "-m", "coreepi", "ingest", str(fleet), "--data-dir", str(data),
         "--jobs", "1", "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def test_kill_9_mid_ingest_loses_and_duplicates_nothing(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    fleet = tmp_path / "fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id\nh1\nh2\n")
    for i, core in enumerate(coreset.cores):
        shutil.copy(core, crashes / f"core.{i}")
        sidecar(crashes / f"core.{i}.json", f"h{1 + i % 2}", f"2024-01-0{1 + i}T00:00:00Z")
    data = tmp_path / "data"
    proc = _ingest_cli(fleet, data)
    assert proc.stderr is not None
    done = 0
    deadline = time.monotonic() + 300
    while done < 3 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        done += "coreepi: ingest [" in line
    assert done == 3, f"ingest did not get going: rc={proc.poll()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with open_store(data) as store:
        first = store.counts()["crashes"]
        assert 3 <= first < len(coreset.cores), first
    proc = _ingest_cli(fleet, data)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert f"crashes: {len(coreset.cores) - first} added" in out
    with open_store(data) as store:
        assert store.counts()["crashes"] == len(coreset.cores)
        assert store.counts()["ingest_ledger"] == 1 + len(coreset.cores)
        ids = [r[0] for r in store._query("SELECT crash_id FROM crashes").fetchall()]
        assert len(ids) == len(set(ids))
        assert Counter(store.crash_frame()["core_status"]) == {"stored": len(coreset.cores)}
    # and once more: nothing
    proc = _ingest_cli(fleet, data)
    out, _ = proc.communicate(timeout=600)
    assert "crashes: 0 added" in out


def test_cli_ingest_reports_bad_rows(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "hosts.csv").write_text("host_id,zone\nh1,a\n")
    (fleet / "exposure.csv").write_text("host_id,start,end\nh1,2024-01-02,2024-01-01\n")
    proc = subprocess.run(
        [sys.executable, "-m", "coreepi", "ingest", str(fleet), "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (f"coreepi: {fleet}/exposure.csv:2: end 2024-01-01T00:00:00+00:00 is not after start "
            "2024-01-02T00:00:00+00:00") in proc.stderr
    assert "problems: 1 rejected (end-before-start 1)" in proc.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "coreepi", "ingest", str(tmp_path / "nope"), "--data-dir",
         str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr == f"coreepi: error: {tmp_path}/nope: no such file or directory\n"


def test_ready_made_reports_in_batches(tmp_path: Path, monkeypatch: object) -> None:
    """CrashReport JSON files go in by batches (one transaction each): counts
    per file stay right (a crash id in two files is added once), bad files
    are rejected, a re-run skips everything, a changed file is re-read."""
    import coreepi.ingest.crashes as ingest_mod
    from coreepi.model.report import AnalysisInfo, CrashReport, Source

    monkeypatch.setattr(ingest_mod, "REPORT_BATCH", 4)  # type: ignore[attr-defined]
    crashes = tmp_path / "reports"
    crashes.mkdir()

    def write(name: str, crash_id: str, host: str = "h1") -> None:
        rep = CrashReport(crash_id=crash_id, host_id=host,
                          captured_at=datetime(2024, 1, 2, tzinfo=UTC), source=Source.ELF_CORE,
                          analysis=AnalysisInfo(analyzer_version="t"))
        (crashes / name).write_text(rep.model_dump_json())

    for i in range(9):
        write(f"r{i}.json", f"c{i}")
    write("r9.json", "c1")  # same crash as r1.json, same batch
    write("ra.json", "c7")  # same crash as r7.json, next batch
    (crashes / "rb.json").write_text('{"crash_id": "x", "analysis": 3}')
    with open_store(tmp_path / "d") as store:
        s = ingest([crashes], store, store_cores=False)
        assert (s.crashes_added, s.crashes_existing) == (9, 2)
        assert s.crashes_by_status == {"not-stored": 9}
        assert s.rejections.summary() == "1 rejected (bad-report 1)"
        assert sorted(store.crash_ids()) == [f"c{i}" for i in range(9)]
        assert len(store.ledger_entries(str(p) for p in crashes.iterdir())) == 11
        again = ingest([crashes], store, store_cores=False)
        assert (again.files_skipped, again.crashes_added) == (11, 0)  # rb.json is re-read
        write("r3.json", "c3-new")
        os.utime(crashes / "r3.json", ns=(1, 1))
        third = ingest([crashes], store, store_cores=False)
        assert (third.files_skipped, third.crashes_added) == (10, 1)
        assert "c3-new" in store.crash_ids()


def test_same_crash_on_two_hosts_is_two_crashes(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    """One core (same build-id, pid, tid, registers: containers without ASLR)
    from two hosts is two crashes; the same crash sent again (same host and
    time, other file bytes) is still one."""
    import bz2
    import lzma

    plain = coreset.cores[0].read_bytes()
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    # three artifacts of one core, each compressed its own way (so the ledger's
    # content check does not take them for one file)
    (crashes / "a.core").write_bytes(zstandard.ZstdCompressor().compress(plain))
    sidecar(crashes / "a.core.json", "h1", "2024-01-02T10:00:00Z")
    (crashes / "b.core").write_bytes(gzip.compress(plain))
    sidecar(crashes / "b.core.json", "h2", "2024-01-02T10:00:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        first = ingest([crashes], store, symbol_dirs=[], store_cores=False)
        assert (first.crashes_added, first.crashes_existing) == (2, 0)
        assert sorted(h for (h,) in store._query("SELECT host_id FROM crashes").fetchall()) == [
            "h1", "h2"]
        again = tmp_path / "again"
        again.mkdir()
        (again / "c.core").write_bytes(lzma.compress(plain))  # h1's crash, re-sent
        sidecar(again / "c.core.json", "h1", "2024-01-02T10:00:00Z")
        (again / "d.core").write_bytes(bz2.compress(plain))  # the same core, another time
        sidecar(again / "d.core.json", "h1", "2024-01-03T10:00:00Z")
        second = ingest([again], store, store_cores=False)
        assert (second.crashes_added, second.crashes_existing) == (1, 1)
        assert store._query("SELECT count(*) FROM crashes").fetchone()[0] == 3


def test_core_after_its_sidecar_completes_one_crash(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    """A crash counted with its core missing is completed, not counted again,
    when the core arrives later; a sidecar given by path beside its ingested
    core is that crash, not a second one with its core missing."""
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    sidecar(crashes / "late.json", "h-01", "2024-05-03T10:00:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        first = ingest([crashes], store, store_cores=False)
        assert dict(first.crashes_by_status) == {"missing": 1}
        shutil.copy(coreset.cores[0], crashes / "late.core")
        second = ingest([crashes], store, store_cores=False)
        assert (second.crashes_added, second.crashes_completed) == (0, 1)
        assert accepted_anything(second)  # the CLI does not call it "nothing ingested"
        assert "1 counted earlier without their core now completed by it" in str(second)
        got = rows(store, "SELECT core_status, signal, artifact FROM crashes")
        assert got == [("not-stored", "SIGSEGV", str(crashes / "late.core"))]
        assert list(store.rejections_frame()["category"]) == []  # the core-missing row went

        other = tmp_path / "other"
        other.mkdir()
        shutil.copy(coreset.cores[1], other / "svc.core")
        sidecar(other / "svc.json", "h-01", "2024-05-04T10:00:00Z")
        ingest([other / "svc.core"], store, store_cores=False)
        by_path = ingest([other / "svc.json"], store, store_cores=False)
        assert (by_path.crashes_added, by_path.files_skipped) == (0, 1)
        assert not by_path.rejections
        # the core gone (retention), its sidecar read alone: still the one crash
        (other / "svc.core").unlink()
        alone = ingest([other], store, store_cores=False)
        assert (alone.crashes_added, alone.crashes_existing, len(alone.rejections)) == (0, 1, 0)
        assert rows(store, "SELECT count(*), count(*) FILTER (core_status = 'missing') "
                           "FROM crashes") == [(2, 0)]


def test_sidecar_attributes_over_the_limit_beside_a_core_are_counted(
        tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    """A core's sidecar with 100 keys and one 100,000-character value: the
    crash is kept with the first 64 attributes that fit, and the dropped ones
    are one attribute-limit line (summary and ingest_rejections)."""
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    shutil.copy(coreset.cores[0], crashes / "wide.core")
    sidecar(crashes / "wide.json", "h1", "2024-05-03T10:00:00Z", huge="x" * 100_000,
            **{f"k{i}": i for i in range(100)})
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([crashes], store, store_cores=False)
        assert summary.crashes_added == 1
        assert [str(r) for r in summary.rejections] == [
            f"{crashes}/wide.json: 37 of 101 attributes dropped (limit max_attribute_value_chars, "
            "see docs/limits.md); crash kept"]
        assert summary.rejections.summary() == "0 rejected; 1 kept with a problem"
        assert rows(store, "SELECT file, category, action FROM ingest_rejections") == [
            (str(crashes / "wide.json"), "attribute-limit", "kept")]
        (attrs,) = rows(store, "SELECT attributes FROM crashes")[0]
        assert sorted(json.loads(attrs)) == sorted(f"k{i}" for i in range(64))


def test_sidecar_without_captured_at_is_a_missing_value(tmp_path: Path) -> None:
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    (crashes / "a.json").write_text(json.dumps({"host_id": "h1"}))
    (crashes / "b.json").write_text(json.dumps({"host_id": "h1", "captured_at": 1714730400}))
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([crashes], store)
    assert [(Path(r.file).name, r.category) for r in summary.rejections] == [
        ("a.json", "missing-value"), ("b.json", "bad-timestamp")]
    assert str(summary.rejections.items[1]).endswith(
        "sidecar captured_at 1714730400 is not ISO-8601 UTC text; not ingested")
