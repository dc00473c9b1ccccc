"""Regressions from a review of the fleet side (fleet directory, ingest, serve)
as an SRE would use it: hostile or sloppy input gives a rejection naming
file:line (or a 4xx), never a traceback, and never poisons the store."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from coreepi.ingest.fleet import SidecarError, read_sidecar
from coreepi.ingest.fleet_tables import read_exposure, read_hosts, read_telemetry
from coreepi.ingest.run import ingest
from coreepi.model.fleet import Rejections, parse_utc
from coreepi.model.report import AnalysisInfo, CrashReport, Source
from coreepi.store import open_store

DEEP = "[" * 100_000 + "]" * 100_000


def test_parse_utc_out_of_range_offset_is_a_value_error() -> None:
    # 0001-01-01T00:00+01:00 is in year 0 in UTC: OverflowError escaped and
    # stopped the whole ingest with a traceback
    for text in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        with pytest.raises(ValueError, match="out of range"):
            parse_utc(text)


def test_exposure_row_with_out_of_range_time_is_rejected_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "exposure.csv"
    path.write_text("host_id,start,end\n"
                    "h1,0001-01-01T00:00:00+01:00,2024-01-02T00:00:00Z\n"
                    "h1,2024-01-01T00:00:00Z,2024-01-02T00:00:00Z\n")
    rej = Rejections()
    rows = list(read_exposure(path, rej))
    assert [r.line for r in rows] == [3]
    assert [(r.line, r.category) for r in rej] == [(2, "bad-timestamp")]


def test_one_non_utf8_byte_rejects_its_row_not_the_whole_hosts_file(tmp_path: Path) -> None:
    # the decode error used to surface on the first read: "hosts.csv:1:
    # unreadable header" and no host at all (so host ids were not checked)
    path = tmp_path / "hosts.csv"
    path.write_bytes(b"\xef\xbb\xbfhost_id,cpu\r\nh1,a\r\nh2,\xff\xfe\r\nh3,c\r\n")
    rej = Rejections()
    hosts = [h.host_id for h in read_hosts(path, rej)]
    assert hosts == ["h1", "h3"]
    assert [(r.line, r.category) for r in rej] == [(3, "malformed-row")]
    assert "UTF-8" in rej.items[0].reason


def test_unbalanced_quote_says_which_lines_it_swallowed(tmp_path: Path) -> None:
    path = tmp_path / "hosts.csv"
    # a quote left open to the end of the file: it used to become one last row
    # (host h2, its cpu "oops\nh3,c\nh4,d\n") and hosts h3 and h4 vanished;
    # now it costs only its own line (issue 15)
    path.write_text('host_id,cpu\nh1,a\nh2,"oops\nh3,c\nh4,d\n')
    rej = Rejections()
    assert [h.host_id for h in read_hosts(path, rej)] == ["h1", "h3", "h4"]
    (r,) = rej.items
    assert r.line == 3 and "opened on line 3 is not closed" in r.reason
    assert r.category == "malformed-row"
    # a quote closed a few lines later: the wrong field count names the span
    path.write_text('host_id,cpu,zone\nh1,a,z\nh2,"oops,z\nh3,c",z,extra\nh4,d,z\n')
    rej = Rejections()
    assert [h.host_id for h in read_hosts(path, rej)] == ["h1", "h4"]
    assert [(r.line, r.category) for r in rej.items] == [(3, "malformed-row"), (4, "malformed-row")]
    assert "opened on line 3 is not closed" in rej.items[0].reason


def test_deeply_nested_sidecar_and_telemetry_line_are_rejections(tmp_path: Path) -> None:
    side = tmp_path / "core.json"
    side.write_text(DEEP)
    with pytest.raises(SidecarError) as exc:
        read_sidecar(side)
    assert exc.value.category == "not-json"
    tele = tmp_path / "telemetry.jsonl"
    tele.write_text(DEEP + "\n" + json.dumps(
        {"host_id": "h1", "ts": "2024-01-01T00:00:00Z", "kind": "mce"}) + "\n")
    rej = Rejections()
    events = list(read_telemetry(tele, rej))
    assert len(events) == 1
    assert [(r.line, r.category) for r in rej] == [(1, "not-json")]


def test_ingest_survives_dangling_symlinks_loops_and_nested_json(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id\nh1\n")
    os.symlink("/nonexistent-coreepi-review", crashes / "dangling")
    os.symlink("loopB", crashes / "loopA")
    os.symlink("loopA", crashes / "loopB")
    (crashes / "nested.json").write_text(DEEP)
    (crashes / "ok.json").write_text(json.dumps(
        {"host_id": "h1", "captured_at": "2024-01-01T00:00:00Z", "core_dropped_reason": "quota"}))
    with open_store(tmp_path / "data") as store:
        summary = ingest([fleet], store, jobs=1)
        assert summary.crashes_added == 1
        counts = summary.rejections.counts()
        assert counts["unreadable-file"] == 2  # the loop
        assert counts["not-json"] == 1
        rows = {(Path(r.file).name, r.category) for r in summary.rejections}
        # a link out of the fleet directory is refused before any read, dangling or not
        assert ("dangling", "symlink") in rows and ("loopA", "unreadable-file") in rows
        # a re-run is still clean and adds nothing
        again = ingest([fleet], store, jobs=1)
        assert again.crashes_added == 0


def _report(captured_at: str) -> dict[str, object]:
    return CrashReport(crash_id="ab" * 16, source=Source.ELF_CORE,
                       analysis=AnalysisInfo(analyzer_version="t")).model_dump(mode="json") | {
        "captured_at": captured_at}


def test_crash_report_time_is_utc_and_year_zero_is_refused() -> None:
    # a report at 0001-01-01T00:00+01:00 was stored as a year-0 (BC)
    # timestamp that DuckDB hands back as a string: every later read of the
    # crash list (GET /api/v1/crashes) and `coreepi report` failed
    with pytest.raises(ValidationError, match="out of range"):
        CrashReport.model_validate(_report("0001-01-01T00:00:00+01:00"))
    r = CrashReport.model_validate(_report("2024-01-01T02:00:00+02:00"))
    assert r.captured_at == datetime(2024, 1, 1, tzinfo=UTC)
    assert r.captured_at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    naive = CrashReport.model_validate(_report("2024-01-01T00:00:00"))
    assert naive.captured_at == datetime(2024, 1, 1, tzinfo=UTC)


def test_heartbeat_out_of_range_time_is_a_validation_error_not_a_500() -> None:
    from coreepi.model.heartbeat import Heartbeat

    with pytest.raises(ValidationError, match="out of range"):
        Heartbeat.model_validate({"host_id": "h1", "start": "0001-01-01T00:00:00+01:00",
                                  "end": "2024-01-01T00:00:00Z"})
