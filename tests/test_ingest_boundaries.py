"""`coreepi ingest` at the edges a fleet directory's writers control
(breaker4 #2, #3, #4, #19): symlinks leaving the fleet directory are refused
unread, distinct artifacts with identical sidecars stay distinct crashes, a
kernel log without a crash is no crash, a sidecar with a UTF-8 BOM is read.

Real inputs: syzkaller's and gpud's kernel logs (tests/data/vendored).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from testdata import vendored
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.ingest.run import ingest
from coreepi.store import DirectoryBlobStore, DuckDBStore, sha256_file

GPUD = vendored("host-telemetry-gpud")
SYZ = vendored("kernel-oops-syzkaller")


def sidecar(path: Path, host: str, when: str, **extra: object) -> None:
    path.write_text(json.dumps({"host_id": host, "captured_at": when, **extra}))


def syz_log(n: str) -> str:
    """The console log of syzkaller's case ``n`` without its header lines (a node's log)."""
    return (SYZ / n).read_text(errors="replace").split("\n\n", 1)[1]


def test_symlinks_out_of_the_fleet_directory_are_refused_unread(tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    (secret.parent / "sub").mkdir()
    (secret.parent / "sub" / "other.core").write_text("also outside\n")
    (secret.parent / "attrs.json").write_text(
        json.dumps({"host_id": "r-02", "captured_at": "2024-05-25T00:00:00Z", "key": "SECRET"}))
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    (crashes / "passwd.core").symlink_to(secret)
    sidecar(crashes / "passwd.core.json", "r-02", "2024-05-25T00:00:00Z")
    (crashes / "linked").symlink_to(secret.parent / "sub")  # a directory leaving the fleet
    (crashes / "via-dotdot.core").symlink_to(Path("..", "..", "outside", "secret.txt"))
    sidecar(crashes / "via-dotdot.core.json", "r-02", "2024-05-25T00:01:00Z")
    shutil.copy(GPUD / "pkg_pstore_testdata_7530486857247_dmesg.txt", crashes / "pstore.txt")
    (crashes / "pstore.txt.json").symlink_to(secret.parent / "attrs.json")  # a sidecar leaving
    # a symlink that stays inside is read like its target
    (tmp_path / "fleet" / "kept").mkdir()
    shutil.copy(GPUD / "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log",
                tmp_path / "fleet" / "kept" / "dmesg.log")
    (crashes / "dmesg.log").symlink_to(Path("..", "kept", "dmesg.log"))
    sidecar(crashes / "dmesg.log.json", "g-01", "2024-05-22T00:00:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, jobs=1)
        refused = {r.file.rsplit("/", 1)[-1]: r.reason for r in summary.rejections
                   if r.category == "symlink"}
        assert refused == {
            "passwd.core": f"symlink to outside the fleet directory ({secret}): not read; "
                           "its sidecar passwd.core.json is not ingested",
            "via-dotdot.core": f"symlink to outside the fleet directory ({secret}): not read; "
                               "its sidecar via-dotdot.core.json is not ingested",
            "linked": "symlink to outside the fleet directory "
                      f"({secret.parent / 'sub'}): not read",
            "pstore.txt.json": "symlink to outside the fleet directory "
                               f"({secret.parent / 'attrs.json'}): not read",
        }
        hosts = {h for (h,) in store._query("SELECT host_id FROM crashes").fetchall()}
        assert hosts == {"g-01"}  # only the inside link's crashes; pstore.txt has no sidecar now
        assert any(r.category == "no-sidecar" and r.file.endswith("pstore.txt")
                   for r in summary.rejections)
        blobs = [e for e in store.blobs.entries()]
        assert all(b"root:x:0" not in store.blobs.get(e.key) for e in blobs)
        attrs = store._query("SELECT attributes FROM crashes").fetchall()
        assert all("SECRET" not in a for (a,) in attrs)


def test_a_symlinked_crashes_directory_leaving_the_fleet_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.core").write_text("root:x:0:0\n")
    sidecar(elsewhere / "x.core.json", "h1", "2024-05-25T00:00:00Z")
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "crashes").symlink_to(elsewhere)
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, jobs=1)
        assert sorted(r.category for r in summary.rejections) == ["symlink", "symlink"]
        assert store.counts().get("crashes", 0) == 0


def test_fleet_tables_symlinked_out_of_the_fleet_directory_are_refused_unread(
        tmp_path: Path) -> None:
    """Before: hosts.csv, exposure.csv and telemetry.jsonl were opened through
    a symlink leaving the fleet directory (the file's lines came back in the
    rejections: "/etc/shadow" as a hosts table)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "hosts.csv").write_text("host_id,cpu\nSECRET-1,x\n")
    (outside / "exposure.csv").write_text(
        "host_id,start,end\nSECRET-1,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z\n")
    (outside / "telemetry.jsonl").write_text(
        '{"host_id": "SECRET-1", "ts": "2024-05-01T01:00:00Z", "kind": "mce"}\n')
    fleet = tmp_path / "fleet"
    (fleet / "tables").mkdir(parents=True)
    for name in ("hosts.csv", "exposure.csv", "telemetry.jsonl"):
        (fleet / name).symlink_to(outside / name)
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([fleet], store, jobs=1)
        assert [(r.file, r.category, r.reason) for r in summary.rejections] == [
            (str(fleet / name), "symlink",
             f"symlink to outside the fleet directory ({outside / name}): not read")
            for name in ("hosts.csv", "exposure.csv", "telemetry.jsonl")]
        assert {t: n for t, n in store.counts().items() if n} == {"ingest_rejections": 3}
    # a table linked inside the fleet directory is read like the file it names
    for name in ("hosts.csv", "exposure.csv"):
        (fleet / name).unlink()
        (fleet / "tables" / name).write_text((outside / name).read_text().replace("SECRET", "h"))
        (fleet / name).symlink_to(Path("tables", name))
    (fleet / "telemetry.jsonl").unlink()
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([fleet], store, jobs=1)
        assert (summary.hosts, summary.exposure_added, list(summary.rejections)) == (1, 1, [])


def test_distinct_logs_with_the_same_sidecar_stay_distinct_crashes(tmp_path: Path) -> None:
    """A host's pstore dump and its dmesg, both picked up at boot: two crashes."""
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    shutil.copy(GPUD / "pkg_pstore_testdata_7530486857247_dmesg.txt", crashes / "pstore.txt")
    shutil.copy(GPUD / "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log",
                crashes / "dmesg.log")
    for name in ("pstore.txt", "dmesg.log"):
        sidecar(crashes / f"{name}.json", "g-01", "2024-05-22T00:00:00Z")
    for n in ("100", "200", "300"):
        (crashes / f"kern-{n}.log").write_text(syz_log(n))
        sidecar(crashes / f"kern-{n}.log.json", "k-00", "2024-05-21T00:00:00Z")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, jobs=2, store_cores=False)
        assert summary.crashes_existing == 0  # a first ingest never finds its crashes stored
        titles = {h: sorted(t for hh, t in store._query(
            "SELECT host_id, signature FROM crashes").fetchall() if hh == h)
            for h in ("g-01", "k-00")}
        assert len(titles["g-01"]) == 2
        assert any("Test panic triggered by crash_test module" in t for t in titles["g-01"])
        assert any("bad value" in t for t in titles["g-01"])
        assert len(titles["k-00"]) == summary.crashes_added - 2 >= 3
        assert any("__alloc_skb" in t for t in titles["k-00"])
        assert any("rcu" in t.lower() for t in titles["k-00"])
        added = summary.crashes_added
        # the same artifacts again, under new names: true duplicates, nothing added
        for p in sorted(crashes.iterdir()):
            shutil.copy(p, crashes / f"again-{p.name}")
        again = ingest([tmp_path / "fleet"], store, jobs=2, store_cores=False)
        assert again.crashes_added == 0 and store.counts()["crashes"] == added


def _logs_without_and_with_a_crash(tmp_path: Path) -> Path:
    """FLEET/crashes/ with kern-2.log (gpud's kmsg: no crash) and kern-10.log
    (syzkaller's case 10: crashes), each with a sidecar; the crashes dir."""
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    shutil.copy(GPUD / "pkg_kmsg_testdata_kmsg.1.log", crashes / "kern-2.log")
    sidecar(crashes / "kern-2.log.json", "k-02", "2024-05-21T00:00:00Z")
    (crashes / "kern-10.log").write_text(syz_log("10"))
    sidecar(crashes / "kern-10.log.json", "k-02", "2024-05-21T00:00:00Z")
    return crashes


def test_a_kernel_log_without_a_crash_is_no_crash(tmp_path: Path) -> None:
    crashes = _logs_without_and_with_a_crash(tmp_path)
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, jobs=1, store_cores=False)
        lines = [str(r) for r in summary.rejections if r.category == "no-crash-found"]
        assert lines == [f"{crashes / 'kern-2.log'}: kernel log, no crash found; not ingested"]
        statuses = store._query("SELECT core_status, artifact FROM crashes").fetchall()
        assert statuses and all(s != "unreadable" and a.endswith("kern-10.log")
                                for s, a in statuses)


def test_a_kernel_log_without_a_crash_leaves_no_blob(tmp_path: Path) -> None:
    """Before: the log was stored as a blob before its analysis found no
    crash, and stayed there with no crash row naming it."""
    crashes = _logs_without_and_with_a_crash(tmp_path)
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, jobs=2)
        assert [r.category for r in summary.rejections] == ["no-crash-found"]
        named = {k for (k,) in store._query("SELECT DISTINCT blob_key FROM crashes").fetchall()}
        kept = {e.key for e in store.blobs.entries()}
        assert kept == named == {sha256_file(crashes / "kern-10.log")}
    # a blob this ingest did not write (stored before, e.g. as an API crash's
    # core of the same bytes) is not its to delete
    key = DirectoryBlobStore(tmp_path / "other" / "blobs").put_file(crashes / "kern-2.log")
    with DuckDBStore(tmp_path / "other") as store:
        ingest([tmp_path / "fleet"], store, jobs=1)
        assert {e.key for e in store.blobs.entries()} == {
            key, sha256_file(crashes / "kern-10.log")}


def test_a_sidecar_with_a_utf8_bom_is_read(tmp_path: Path) -> None:
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    (crashes / "kern-100.log").write_text(syz_log("100"))
    body = json.dumps({"host_id": "h-3", "captured_at": "2024-05-21T00:00:00Z"})
    (crashes / "kern-100.log.json").write_bytes(b"\xef\xbb\xbf" + body.encode())
    (tmp_path / "fleet" / "telemetry.jsonl").write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"host_id": "h-3", "ts": "2024-05-20T00:00:00Z",
                                      "kind": "mce"}).encode() + b"\n")
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "fleet"),
                                      "--data-dir", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert "problems: 0 rejected" in result.stdout and "telemetry events: 1 added" in result.stdout
    with DuckDBStore(tmp_path / "store") as store:
        assert {h for (h,) in store._query("SELECT host_id FROM crashes").fetchall()} == {"h-3"}


def test_the_sidecar_of_a_named_file_must_lie_beside_it(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    sidecar(tmp_path / "elsewhere" / "x.json", "h1", "2024-05-21T00:00:00Z", secret="SECRET")
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "kern-100.log").write_text(syz_log("100"))
    (drop / "kern-100.log.json").symlink_to(tmp_path / "elsewhere" / "x.json")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([drop / "kern-100.log"], store, jobs=1, store_cores=False)
        assert sorted(r.category for r in summary.rejections) == ["no-sidecar", "symlink"]
        assert store.counts().get("crashes", 0) == 0


def test_fifos_in_a_fleet_directory_are_refused_not_opened(tmp_path: Path) -> None:
    """Before: a FIFO among the crashes, as a sidecar, in symbols/ or as
    hosts.csv made ingest wait in open() forever (and SIGTERM could not stop
    it: the thread waiting in open held the pool). Each is one line now, the
    rest is ingested. Run as a child with a deadline, so a regression fails
    instead of hanging the suite."""
    import os
    import subprocess
    import sys

    fleet = tmp_path / "fleet"
    crashes = fleet / "crashes"
    (fleet / "symbols").mkdir(parents=True)
    crashes.mkdir()
    os.mkfifo(fleet / "symbols" / "libpipe.so")
    os.mkfifo(fleet / "hosts.csv")
    os.mkfifo(crashes / "core.1")
    sidecar(crashes / "core.1.json", "k-02", "2024-05-21T00:00:00Z")
    (crashes / "kern-10.log").write_text(syz_log("10"))
    os.mkfifo(crashes / "kern-10.log.json")
    (crashes / "kern-11.log").write_text(syz_log("10"))
    sidecar(crashes / "kern-11.log.json", "k-02", "2024-05-21T00:00:00Z")
    os.mkfifo(crashes / "orphan.json")
    done = subprocess.run(
        [sys.executable, "-m", "coreepi", "ingest", str(fleet), "--data-dir",
         str(tmp_path / "data")], capture_output=True, text=True, timeout=240, check=False)
    refused = sorted(line for line in done.stderr.splitlines() if "regular file" in line)
    assert refused == sorted([
        f"coreepi: {fleet / 'hosts.csv'}: not a regular file (a FIFO, socket or device): not read",
        f"coreepi: {crashes / 'core.1'}: not a regular file (a FIFO, socket or device): not read",
        f"coreepi: {crashes / 'kern-10.log.json'}: sidecar is not a regular file (a FIFO, socket "
        "or device): not read; crash not ingested",
        f"coreepi: {crashes / 'orphan.json'}: not a regular file (a FIFO, socket or device): "
        "not read"]), done.stderr
    assert done.returncode == 0, done.stderr
    with DuckDBStore(tmp_path / "data", read_only=True) as store:
        artifacts = {a for (a,) in store._query("SELECT artifact FROM crashes").fetchall()}
    assert artifacts == {str(crashes / "kern-11.log")}
    named = subprocess.run(
        [sys.executable, "-m", "coreepi", "ingest", str(crashes / "core.1"), "--data-dir",
         str(tmp_path / "data")], capture_output=True, text=True, timeout=240, check=False)
    assert (named.returncode, named.stderr) == (2, (
        f"coreepi: error: {crashes / 'core.1'}: not a regular file (a FIFO, socket or device): "
        "not read\n"))
