"""Fleet directories as users fill them, and artifacts coreepi cannot read
yet, told apart from garbage.

Real cores (gcc + gdb gcore, tests/fleetfactory.py) in a fleet directory
named as people name them (``X.core`` beside ``X.json``); a minidump header
(Breakpad's ``MINIDUMP_HEADER``: signature ``MDMP``, version 0xa793) with
a sidecar; a real hs_err log (krashpad's dataset41) whose error line is
rewritten to the form HotSpot prints for a pseudo-signal without a file
(vmError.cpp: ``Out of Memory Error (0xe0000002)``).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401

from coreepi.errors import InputError
from coreepi.ingest.artifacts import inspect_file
from coreepi.ingest.fleet import scan_crashes
from coreepi.ingest.run import ingest
from coreepi.store import open_store

HS_ERR = Path(__file__).resolve().parent / "data" / "vendored" / "jvm-hs_err-krashpad"


def sidecar(path: Path, host: str, when: str, **extra: object) -> None:
    path.write_text(json.dumps({"host_id": host, "captured_at": when, **extra}))


def minidump(path: Path) -> Path:
    """A minidump header and an empty stream directory (MINIDUMP_HEADER: Signature,
    Version, NumberOfStreams, StreamDirectoryRva, CheckSum, TimeDateStamp, Flags)."""
    path.write_bytes(struct.pack("<4sIIIIIQ", b"MDMP", 0xA793, 0, 32, 0, 0, 0) + bytes(64))
    return path


def test_pairing_by_stem_and_specificity(tmp_path: Path) -> None:
    d = tmp_path / "crashes"
    d.mkdir()
    for name in ("svc.core", "svc.json", "db.core", "db.core.json", "db.json",
                 "x.core.zst", "x.json", "a.core", "a.dump", "a.json", "core.7", "core.8",
                 "core.json"):
        (d / name).write_text("x")  # fmt: skip
    got = [(c.path.name, c.kind, c.sidecar and c.sidecar.name) for c in scan_crashes(d)]
    assert got == [
        ("a.core", "artifact", None),  # a.json fits a.core and a.dump alike: neither
        ("a.dump", "artifact", None),
        ("a.json", "json", None),
        ("core.7", "artifact", None),  # core.PID: never core.json
        ("core.8", "artifact", None),
        ("core.json", "json", None),
        ("db.core", "artifact", "db.core.json"),  # the most specific of two
        ("db.json", "json", None),
        ("svc.core", "artifact", "svc.json"),
        ("x.core.zst", "artifact", "x.json"),
    ]


def test_ingest_fleet_named_by_stem(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    fleet = tmp_path / "fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id,cpu_model\nh1,EPYC 7763\nh2,Xeon 8380\n")
    (fleet / "exposure.csv").write_text(
        "host_id,start,end\n"
        "h1,2024-01-01T00:00:00Z,2024-01-10T00:00:00Z\n"
        "h2,2024-01-01T00:00:00Z,2024-01-10T00:00:00Z\n"
    )
    shutil.copy(coreset.cores[0], crashes / "svc.core")
    sidecar(crashes / "svc.json", "h1", "2024-01-02T10:00:00Z", app_version="2.1")
    shutil.copy(coreset.cores[1], crashes / "db.core")
    sidecar(crashes / "db.core.json", "h2", "2024-01-03T10:00:00Z", app_version="2.2")
    sidecar(crashes / "db.json", "h1", "2024-01-03T11:00:00Z", core_dropped_reason="rate limit")
    minidump(crashes / "app.dmp")
    sidecar(crashes / "app.json", "h2", "2024-01-04T10:00:00Z")
    with open_store(tmp_path / "data") as store:
        summary = ingest([fleet], store, jobs=1, timeout=120)
        assert summary.crashes_by_status == {"stored": 2, "missing": 1, "unreadable": 1}
        assert summary.rejections.counts() == {}  # nothing rejected: both notes below are kept
        messages = sorted(str(r) for r in summary.rejections)
        assert messages == [
            f"{crashes}/app.dmp: minidump: not supported yet; crash counted with core_status "
            "unreadable",
            f"{crashes}/db.json: core missing (rate limit); crash counted",
        ]
        crash_of = dict(store._query("SELECT artifact, crash_id FROM crashes").fetchall())
        df = store.crash_frame().set_index("crash_id")
        svc = df.loc[crash_of[str(crashes / "svc.core")]]
        db = df.loc[crash_of[str(crashes / "db.core")]]
        assert (svc["host_id"], svc["app_version"], svc["signature"]) == ("h1", "2.1", "main")
        assert (db["host_id"], db["app_version"], db["signature"]) == ("h2", "2.2", "main")


def test_minidump_named_on_inspect(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        inspect_file(minidump(tmp_path / "crash.dmp"))
    assert str(info.value) == f"{tmp_path}/crash.dmp: minidump: not supported yet"


@pytest.mark.parametrize(
    ("line", "kind", "name"),
    [
        ("Out of Memory Error (0xe0000002)", "oom", "OOM_MMAP_ERROR"),
        ("Out of Memory Error (0xE0000001)", "oom", "OOM_MALLOC_ERROR"),
        # the log's "Native memory allocation … failed" still makes it an out-of-memory error
        ("Internal Error (0xe0000000)", "oom", "INTERNAL_ERROR"),
    ],
)
def test_jvm_pseudo_signal_named(tmp_path: Path, line: str, kind: str, name: str) -> None:
    text = (HS_ERR / "dataset41.txt").read_text()
    original = "#  Out of Memory Error (os_linux.cpp:2879), pid=720881, tid=720883"
    assert original in text
    log = tmp_path / "hs_err_pid720881.log"
    log.write_text(text.replace(original, f"#  {line}, pid=720881, tid=720883"))
    [report] = inspect_file(log)
    jvm = report.artifact.jvm  # type: ignore[union-attr]
    assert (jvm.error_kind, jvm.location) == (kind, name)
    assert report.signal is None
    assert "0xe000000" not in (report.signature.signature if report.signature else "").lower()
