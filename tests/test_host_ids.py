"""A host id must be able to name a host everywhere it enters: hosts.csv,
exposure.csv and telemetry.jsonl rows, ready-made CrashReport files,
``--telemetry LOG --host H`` and the HTTP API (heartbeats, crash reports),
as for sidecars (breaker4 #19: no '/', no '.'/'..', no control characters).
One line per bad row naming file:line and the reason, the rest ingested,
``coreepi ingest`` exits 2 at the end. Before, only sidecars were checked:
``rack1/node3`` became a host whose page /hosts/rack1/node3 did not exist.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.model.report import AnalysisInfo, CrashReport, Source
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.store import DuckDBStore

SLASH = "contains '/' (a host id is one URL path segment)"


def _fleet(root: Path) -> Path:
    (root / "crashes").mkdir(parents=True)
    (root / "hosts.csv").write_text("host_id,cpu\nh-1,EPYC\nrack1/node3,EPYC\n..,x\nh-2,EPYC\n")
    (root / "exposure.csv").write_text(
        "host_id,start,end\n"
        "h-1,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z\n"
        "\"h-2\x1b[2J\",2024-05-01T00:00:00Z,2024-05-02T00:00:00Z\n"
        "h-2,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z\n")
    (root / "telemetry.jsonl").write_text(
        json.dumps({"host_id": "h-1", "ts": "2024-05-01T01:00:00Z", "kind": "mce"}) + "\n"
        + json.dumps({"host_id": "../h-1", "ts": "2024-05-01T01:00:00Z", "kind": "mce"}) + "\n")
    for crash_id, host in (("aa" * 16, "h-1"), ("bb" * 16, "h-1/x")):
        report = CrashReport(crash_id=crash_id, host_id=host, source=Source.ELF_CORE,
                             captured_at=datetime(2024, 5, 1, 2, tzinfo=UTC),
                             analysis=AnalysisInfo(analyzer_version="test"))
        (root / "crashes" / f"{crash_id[:4]}.json").write_text(report.model_dump_json())
    return root


def test_bad_host_ids_in_fleet_tables_and_reports_are_one_line_each(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path / "fleet")
    data = tmp_path / "data"
    done = CliRunner().invoke(app, ["ingest", str(fleet), "--data-dir", str(data)])
    assert done.exit_code == 2, done.output
    lines = [line for line in done.stderr.splitlines() if "host_id '" in line]
    assert lines == [
        f"coreepi: {fleet}/hosts.csv:3: host_id 'rack1/node3' {SLASH}; row not ingested",
        f"coreepi: {fleet}/hosts.csv:4: host_id '..' is a relative path part; row not ingested",
        f"coreepi: {fleet}/exposure.csv:3: host_id 'h-2\\x1b[2J' contains a control character; "
        "row not ingested",
        f"coreepi: {fleet}/telemetry.jsonl:2: host_id '../h-1' {SLASH}; row not ingested",
        f"coreepi: {fleet}/crashes/bbbb.json: CrashReport host_id 'h-1/x' {SLASH}; "
        "not ingested"]
    # the rest is in
    with DuckDBStore(data, read_only=True) as store:
        assert sorted(store.host_ids()) == ["h-1", "h-2"]
        q = store._query
        assert q("SELECT host_id, count(*) FROM exposure GROUP BY 1 ORDER BY 1").fetchall() == [
            ("h-1", 1), ("h-2", 1)]
        assert q("SELECT host_id FROM telemetry").fetchall() == [("h-1",)]
        assert q("SELECT crash_id FROM crashes").fetchall() == [("aa" * 16,)]
        assert {c for (c,) in q("SELECT DISTINCT category FROM ingest_rejections").fetchall()} == {
            "bad-host-id"}


def test_a_bad_host_for_a_telemetry_log_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.1.0\n")
    done = CliRunner().invoke(app, ["ingest", "--telemetry", str(log), "--host", "a/b",
                                    "--data-dir", str(tmp_path / "data")])
    assert (done.exit_code, done.stdout) == (2, "")
    assert done.stderr == f"coreepi: error: --host 'a/b': a host id that {SLASH}\n"
    assert not (tmp_path / "data").exists()


def test_the_api_refuses_a_heartbeat_or_report_whose_host_id_cannot_name_a_host(
        tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    store = DuckDBStore(tmp_path / "data")
    try:
        token = create_token(store, ["ingest"], "t")[1]
        auth = {"authorization": f"Bearer {token}"}
        now = datetime.now(UTC)
        with TestClient(create_app(store, ServeConfig(analysis_jobs=0))) as client:
            for host, why in (("rack1/node3", SLASH), ("..", "is a relative path part"),
                              ("h\x07", "contains a control character")):
                hb = {"host_id": host, "start": now.isoformat(),
                      "end": (now + timedelta(minutes=5)).isoformat()}
                r = client.post("/api/v1/heartbeats", json=hb, headers=auth)
                assert (r.status_code, r.json()["detail"]) == (422, f"host_id {host!r} {why}")
                report = CrashReport(crash_id="cc" * 16, host_id=host, source=Source.ELF_CORE,
                                     captured_at=now, analysis=AnalysisInfo(analyzer_version="t"))
                r = client.post("/api/v1/crashes", content=report.model_dump_json(),
                                headers={**auth, "content-type": "application/json"})
                assert (r.status_code, r.json()["detail"]) == (422, f"host_id {host!r} {why}")
            ok = {"host_id": "rack1.node3", "start": now.isoformat(),
                  "end": (now + timedelta(minutes=5)).isoformat()}
            assert client.post("/api/v1/heartbeats", json=ok, headers=auth).status_code == 201
        assert store._query("SELECT host_id FROM exposure").fetchall() == [("rack1.node3",)]
        assert store.counts().get("crashes", 0) == 0
    finally:
        store.close()
