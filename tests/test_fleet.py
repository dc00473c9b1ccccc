"""Reading a fleet directory: every bad row named by file:line, the rest read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fleetfactory import build_crasher, coreset, make_core, tools_missing  # noqa: F401

from coreepi.ingest.buildid import BuildIdIndex, core_main_build_id, elf_identity
from coreepi.ingest.fleet import Fleet, SidecarError, is_fleet_dir, read_sidecar, scan_crashes
from coreepi.ingest.fleet_tables import read_exposure, read_hosts, read_telemetry
from coreepi.model.events import EventKind
from coreepi.model.fleet import Rejections, parse_utc


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_parse_utc() -> None:
    assert parse_utc("2024-01-01T10:00:00Z") == datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert parse_utc("2024-01-01T12:00:00+02:00") == datetime(2024, 1, 1, 10, tzinfo=UTC)
    assert parse_utc("2024-01-01 10:00:00") == datetime(2024, 1, 1, 10, tzinfo=UTC)  # naive = UTC
    assert parse_utc("2024-01-01") == datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="not an ISO-8601 timestamp: 'soon'"):
        parse_utc("soon")


def test_hosts(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.csv", (
        "host_id,cpu_model,microcode\n"
        "h1,EPYC 7763,0xa0011d1\n"
        ",Xeon,0x1\n"            # line 3: no host id
        "h2,Xeon\n"              # line 4: a field short
        "h1,EPYC 7763,0x2\n"     # line 5: repeated
        "\n"
        "h3, Xeon ,\n"           # line 7: blanks trimmed, empty = unknown
    ))
    rej = Rejections()
    hosts = list(read_hosts(path, rej))
    assert [(h.host_id, h.attributes, h.line) for h in hosts] == [
        ("h1", {"cpu_model": "EPYC 7763", "microcode": "0xa0011d1"}, 2),
        ("h3", {"cpu_model": "Xeon", "microcode": None}, 7),
    ]
    assert [str(r) for r in rej] == [
        f"{path}:3: empty host_id",
        f"{path}:4: expected 3 fields, found 2",
        f"{path}:5: host_id 'h1' already given on line 2",
    ]
    assert rej.counts() == {"missing-value": 1, "malformed-row": 1, "duplicate-host": 1}


def test_hosts_without_host_id_column(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.csv", "host,cpu\nh1,x\n")
    rej = Rejections()
    assert list(read_hosts(path, rej)) == []
    assert [str(r) for r in rej] == [f"{path}:1: header lacks column(s) host_id (has: host, cpu)"]


def test_exposure(tmp_path: Path) -> None:
    path = write(tmp_path / "exposure.csv", (
        "host_id,start,end,app_version,kernel\n"
        "h1,2024-01-01T00:00:00Z,2024-01-02T00:00:00Z,1.0,\n"          # 2 ok
        "h1,2024-01-02T00:00:00Z,2024-01-03T00:00:00Z,1.1,6.2\n"       # 3 ok, adjacent
        "h1,2024-01-01T12:00:00Z,2024-01-01T13:00:00Z,1.0,\n"          # 4 overlaps line 2
        "h2,2024-01-01T00:00:00Z,2024-01-01T00:00:00Z,1.0,\n"          # 5 empty interval
        "h2,2024-01-03,2024-01-02,1.0,\n"                              # 6 end before start
        "h2,tomorrow,2024-01-02,1.0,\n"                                # 7 bad timestamp
        "h9,2024-01-01T00:00:00Z,2024-01-02T00:00:00Z,1.0,\n"          # 8 unknown host
        "h2,2024-01-01T00:00:00Z,2024-01-05T00:00:00Z,\n"              # 9 field short
        "h2,2023-12-31T00:00:00Z,2024-01-01T00:00:00Z,1.0,\n"          # 10 ok
        "h1,2023-12-31T00:00:00Z,2024-01-01T00:00:01Z,1.0,\n"          # 11 overlaps line 2
    ))
    rej = Rejections()
    got = list(read_exposure(path, rej, known_hosts={"h1", "h2"}))
    assert [(x.host_id, x.line, x.attributes) for x in got] == [
        ("h1", 2, {"app_version": "1.0"}),
        ("h1", 3, {"app_version": "1.1", "kernel": "6.2"}),
        ("h2", 10, {"app_version": "1.0"}),
    ]
    assert got[0].seconds == 86400.0
    assert [str(r) for r in rej] == [
        f"{path}:4: interval of host 'h1' overlaps the one on line 2",
        f"{path}:5: end 2024-01-01T00:00:00+00:00 is not after start 2024-01-01T00:00:00+00:00",
        f"{path}:6: end 2024-01-02T00:00:00+00:00 is not after start 2024-01-03T00:00:00+00:00",
        f"{path}:7: not an ISO-8601 timestamp: 'tomorrow'",
        f"{path}:8: unknown host_id 'h9' (not in hosts)",
        f"{path}:9: expected 5 fields, found 4",
        f"{path}:11: interval of host 'h1' overlaps the one on line 2",
    ]
    assert rej.counts() == {
        "overlap": 2, "end-before-start": 2, "bad-timestamp": 1, "unknown-host": 1,
        "malformed-row": 1,
    }
    assert rej.summary() == (
        "7 rejected (bad-timestamp 1, end-before-start 2, malformed-row 1, overlap 2, "
        "unknown-host 1)"
    )


def test_exposure_quoted_multiline_row_names_its_first_line(tmp_path: Path) -> None:
    path = write(tmp_path / "exposure.csv", (
        "host_id,start,end,note\n"
        'h1,2024-01-01,2024-01-02,"two\nlines"\n'
        "h1,2024-01-03,bad,x\n"  # physical line 4
    ))
    rej = Rejections()
    assert len(list(read_exposure(path, rej))) == 1
    assert [str(r) for r in rej] == [f"{path}:4: not an ISO-8601 timestamp: 'bad'"]


def test_telemetry(tmp_path: Path) -> None:
    path = write(tmp_path / "telemetry.jsonl", "\n".join([
        json.dumps({"host_id": "h1", "ts": "2024-01-01T00:00:00Z", "kind": "mce",
                    "detail": {"bank": 5}, "cpu": 3}),
        '{"host_id": "h1", "ts": ',                                     # 2 not JSON
        json.dumps({"host_id": "h1", "ts": "2024-01-01", "kind": "meteor"}),  # 3 bad kind
        json.dumps({"host_id": "h7", "ts": "2024-01-01", "kind": "xid"}),     # 4 unknown host
        json.dumps({"host_id": "h1", "kind": "xid"}),                          # 5 no ts
        json.dumps({"host_id": "h1", "ts": "2024-01-02T00:00:00Z", "kind": "edac_ce",
                    "summary": "1 CE on DIMM_A1", "hardware_indicative": True}),
        "",
    ]))
    rej = Rejections()
    events = list(read_telemetry(path, rej, known_hosts={"h1"}))
    assert [(e.kind, e.summary, e.detail) for e in events] == [
        (EventKind.MCE, "mce on h1", {"bank": 5, "cpu": 3}),
        (EventKind.EDAC_CE, "1 CE on DIMM_A1", {}),
    ]
    assert events[0].source == f"{path}:1"
    assert events[0].event_id == list(read_telemetry(path, Rejections(), None))[0].event_id
    assert [str(r) for r in rej] == [
        f"{path}:2: not JSON: Expecting value (column 25)",
        f"{path}:3: kind 'meteor' is not one of: mce, edac_ce, edac_ue, xid, aer, sigbus_mce, other",
        f"{path}:4: unknown host_id 'h7' (not in hosts)",
        f"{path}:5: no ts (ISO-8601 UTC)",
    ]


def test_sidecars(tmp_path: Path) -> None:
    good = write(tmp_path / "a.json", json.dumps(
        {"host_id": "h1", "captured_at": "2024-01-01T00:00:00Z", "app_version": "2.1",
         "load_avg": 7.5, "core_dropped_reason": "rate limit"}))
    s = read_sidecar(good)
    assert (s.host_id, s.captured_at, s.attributes, s.core_dropped_reason) == (
        "h1", datetime(2024, 1, 1, tzinfo=UTC), {"app_version": "2.1", "load_avg": 7.5},
        "rate limit")
    broken = write(tmp_path / "b.json", '{\n  "host_id": "h1",\n  captured_at\n}')
    with pytest.raises(SidecarError) as info:
        read_sidecar(broken)
    assert (info.value.category, info.value.line, str(info.value)) == (
        "not-json", 3, "sidecar is not JSON: Expecting property name enclosed in double quotes "
        "(column 3)")
    with pytest.raises(SidecarError, match="no host_id"):
        read_sidecar(write(tmp_path / "c.json", '{"captured_at": "2024-01-01"}'))
    with pytest.raises(SidecarError, match="captured_at: not an ISO-8601 timestamp: 'x'"):
        read_sidecar(write(tmp_path / "d.json", '{"host_id": "h", "captured_at": "x"}'))


def test_sidecar_with_a_repeated_key_is_refused(tmp_path: Path) -> None:
    """breaker4 #19: JSON leaves a repeated key's meaning open; it was taken
    silently with the last value. Nested objects too."""
    for name, text, key in [
            ("top.json", '{"host_id": "h-3", "host_id": "h-4", '
                         '"captured_at": "2024-01-01T00:00:00Z"}', "host_id"),
            ("nested.json", '{"host_id": "h-3", "captured_at": "2024-01-01T00:00:00Z", '
                            '"gpu": {"model": "a", "model": "b"}}', "model")]:
        with pytest.raises(SidecarError) as info:
            read_sidecar(write(tmp_path / name, text))
        assert (info.value.category, info.value.line, str(info.value)) == (
            "not-json", 1, f"sidecar: the key '{key}' appears twice in one object: "
            "not a JSON object with unique keys")


def test_lone_json_with_a_repeated_key_is_one_rejection(tmp_path: Path) -> None:
    """breaker4 #19: the sidecar of a crash whose core is missing (a .json
    alone in crashes/) is refused the same way, in one line, not counted."""
    from coreepi.ingest.run import ingest
    from coreepi.store import DuckDBStore

    crashes = tmp_path / "fleet" / "crashes"
    write(tmp_path / "fleet" / "hosts.csv", "host_id\nh-3\nh-4\n")
    write(crashes / "lost.json", '{"host_id": "h-3", "host_id": "h-4", '
                                 '"captured_at": "2024-01-01T00:00:00Z"}')
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, store_cores=False)
    assert summary.crashes_added == 0
    assert [str(r) for r in summary.rejections] == [
        f"{crashes}/lost.json:1: not JSON: the key 'host_id' appears twice in one object: "
        "not a JSON object with unique keys; not ingested"]


@pytest.mark.parametrize(("host", "why"), [
    ("../../etc", "contains '/' (a host id is one URL path segment)"),
    ("rack1/node3", "contains '/' (a host id is one URL path segment)"),
    ("..", "is a relative path part"),
    ("h-1\x1b[2J", "contains a control character"),
    ("h-1\nh-2", "contains a control character"),
])
def test_sidecar_host_id_that_cannot_name_a_host_is_refused(tmp_path: Path, host: str,
                                                          why: str) -> None:
    """breaker4 #19: a host id is a URL path segment (/hosts/ID, the drain
    API) and a cell of terminal tables: no '/', no '.'/'..', no control
    characters."""
    path = write(tmp_path / "s.json", json.dumps(
        {"host_id": host, "captured_at": "2024-01-01T00:00:00Z"}))
    with pytest.raises(SidecarError) as info:
        read_sidecar(path)
    assert (info.value.category, str(info.value)) == (
        "bad-host-id", f"sidecar host_id {host!r} {why}")
    ok = read_sidecar(write(tmp_path / "ok.json", json.dumps(
        {"host_id": "h-1.rack_2:x", "captured_at": "2024-01-01T00:00:00Z"})))
    assert ok.host_id == "h-1.rack_2:x"


def test_scan_crashes_pairs_sidecars(tmp_path: Path) -> None:
    d = tmp_path / "crashes"
    for name in ("core.1", "core.1.json", "core.2.zst", "core.2.json", "sub/core.3.gz",
                 "sub/core.3.gz.json", "report.json", "orphan.json", "nosidecar", ".hidden"):
        write(d / name, "x")
    got = [(str(c.path.relative_to(d)), c.kind, c.sidecar and c.sidecar.name)
           for c in scan_crashes(d)]
    assert got == [
        ("core.1", "artifact", "core.1.json"),
        ("core.2.zst", "artifact", "core.2.json"),
        ("nosidecar", "artifact", None),
        ("orphan.json", "json", None),
        ("report.json", "json", None),
        ("sub/core.3.gz", "artifact", "core.3.gz.json"),
    ]


def test_fleet_open(tmp_path: Path) -> None:
    assert not is_fleet_dir(tmp_path)
    write(tmp_path / "hosts.csv", "host_id\n")
    (tmp_path / "crashes").mkdir()
    fleet = Fleet.open(tmp_path)
    assert is_fleet_dir(tmp_path)
    assert (fleet.hosts, fleet.exposure, fleet.crashes, fleet.symbols) == (
        tmp_path / "hosts.csv", None, tmp_path / "crashes", None)


@pytest.mark.skipif(tools_missing() is not None, reason=str(tools_missing()))
def test_build_id_index_never_uses_a_mismatched_file(tmp_path: Path) -> None:
    right = build_crasher(tmp_path / "right")
    # same name, other code: another build-id
    wrong = build_crasher(tmp_path / "wrong", extra=("-DUNUSED=1", "-O1"))
    core = make_core(right, 3, tmp_path / "core")
    symbols = tmp_path / "symbols"
    (symbols / "a").mkdir(parents=True)
    (symbols / "b").mkdir()
    (symbols / "a" / "crasher").write_bytes(wrong.read_bytes())
    (symbols / "b" / "renamed").write_bytes(right.read_bytes())
    (symbols / "README").write_text("not ELF")
    want = elf_identity(right)
    other = elf_identity(wrong)
    assert want is not None and other is not None and want.build_id != other.build_id
    assert core_main_build_id(core) == want.build_id
    index = BuildIdIndex.build(tmp_path / "index", [symbols])
    assert len(index) == 2
    assert index.executable_for(want.build_id) == (symbols / "b" / "renamed").resolve()
    assert index.executable_for("00" * 20) is None
    link = tmp_path / "index" / ".build-id" / want.build_id[:2] / want.build_id[2:]
    assert link.resolve() == (symbols / "b" / "renamed").resolve()
    # a symbol dir in .build-id layout whose file does not have the build-id it is filed under
    fake = tmp_path / "symdir" / ".build-id" / want.build_id[:2] / want.build_id[2:]
    fake.parent.mkdir(parents=True)
    fake.write_bytes(wrong.read_bytes())
    only_dir = BuildIdIndex(tmp_path / "empty", symbol_dirs=[tmp_path / "symdir"])
    assert only_dir.executable_for(want.build_id) is None
