"""Hostile or odd input beyond the limits of docs/limits.md (issue 15, holes 1, 2 and 8):
year-0001 times, thousands of attribute keys, odd sidecars. Each test reproduces a
hole found by the fault campaign and failed before its fix."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from coreepi.ingest.run import ingest
from coreepi.model import limits
from coreepi.model.report import AnalysisInfo, CrashReport
from coreepi.reporting.build import build_findings
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.store import CrashRecord, DuckDBStore

REPO = Path(__file__).resolve().parents[1]


def report(crash_id: str, when: datetime, **attributes: object) -> CrashReport:
    return CrashReport(crash_id=crash_id, captured_at=when, host_id="h1", source="elf-core",
                       attributes=attributes, analysis=AnalysisInfo(analyzer_version="test"))


def small_fleet(root: Path) -> Path:
    (root / "crashes").mkdir(parents=True)
    (root / "hosts.csv").write_text("host_id,zone\nh1,a\n42,b\n")
    (root / "exposure.csv").write_text(
        "host_id,start,end\nh1,2024-01-01,2024-01-08\n42,2024-01-01,2024-01-08\n"
        "h1,0001-01-01,0001-01-02\n")
    return root


def test_year_0001_rows_are_rejected_by_ingest_and_report_runs(tmp_path: Path) -> None:
    fleet = small_fleet(tmp_path / "fleet")
    crashes = fleet / "crashes"
    (crashes / "old.json").write_text(json.dumps(
        {"host_id": "h1", "captured_at": "0001-01-01T00:00:00Z"}))
    (crashes / "good.json").write_text(json.dumps(
        {"host_id": "h1", "captured_at": "2024-01-03T00:00:00Z"}))
    (crashes / "old-report.json").write_text(
        report("ab" * 16, datetime(1, 1, 1, tzinfo=UTC)).model_dump_json())
    with DuckDBStore(tmp_path / "data") as store:
        summary = ingest([fleet], store, jobs=1)
        reasons = [str(r) for r in summary.rejections.rejected]
        assert summary.crashes_added == 1
        assert any("old.json" in r and "earliest_time=2000-01-01" in r for r in reasons), reasons
        assert any("old-report.json" in r and "earliest_time" in r for r in reasons), reasons
        assert any("exposure.csv:4" in r and "earliest_time" in r for r in reasons), reasons
        findings = build_findings(store)
        assert findings is not None


def test_a_year_0001_row_stored_before_the_limits_does_not_break_the_report(
        tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        store.add_crashes([CrashRecord(report("cd" * 16, datetime(1, 1, 1, tzinfo=UTC)))])
        build_findings(store)  # OverflowError: date value out of range, before


def test_future_and_past_times_name_their_limit() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(limits.TimeRangeError, match="max_clock_skew_seconds=86400"):
        limits.check_time(datetime(2026, 1, 3, tzinfo=UTC), "end", now=now)
    with pytest.raises(limits.TimeRangeError, match=r"start 1999-12-31.*earliest_time"):
        limits.check_time(datetime(1999, 12, 31, tzinfo=UTC), "start", now=now)
    assert limits.check_time(datetime(2026, 1, 1, 12, tzinfo=UTC), "t", now=now).hour == 12


class Api:
    def __init__(self, tmp: Path) -> None:
        self.store = DuckDBStore(tmp / "data")
        self.tokens = {s: create_token(self.store, [s], f"t-{s}")[1] for s in ("ingest", "read")}
        self.client = TestClient(create_app(self.store, ServeConfig(
            analysis_jobs=1, token_cache_seconds=0)))

    def h(self, scope: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.tokens[scope]}",
                "content-type": "application/json"}

    def post(self, path: str, body: str):  # noqa: ANN201
        return self.client.post(path, content=body, headers=self.h("ingest"))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    a = Api(tmp_path)
    with a.client:
        yield a
    a.store.close()


def test_api_refuses_year_0001_crashes_and_heartbeats(api: Api) -> None:
    r = api.post("/api/v1/crashes", report("ef" * 16, datetime(1, 1, 1, tzinfo=UTC))
                 .model_dump_json())
    assert r.status_code == 422, r.text
    assert "captured_at 0001-01-01T00:00:00+00:00 is before 2000" in r.json()["detail"]
    r = api.post("/api/v1/heartbeats", json.dumps(
        {"host_id": "h1", "start": "0001-01-01T00:00:00", "end": "0001-01-01T00:05:00"}))
    assert r.status_code == 422, r.text
    assert "earliest_time" in r.json()["detail"]
    assert api.store.counts()["crashes"] == 0


def _timed_groups(api: Api) -> float:
    t0 = time.monotonic()
    groups = api.client.get("/api/v1/groups", headers=api.h("read"))
    assert groups.status_code == 200, groups.text
    return time.monotonic() - t0


def test_20k_attribute_keys_are_refused_at_once_and_reads_stay_fast(api: Api) -> None:
    _timed_groups(api)  # warm: the first read loads the statistics
    before = _timed_groups(api)
    many = {f"k{i:05d}": "v" for i in range(20_000)}
    body = report("12" * 16, datetime(2024, 1, 1, tzinfo=UTC), **many).model_dump_json()
    t0 = time.monotonic()
    r = api.post("/api/v1/crashes", body)
    assert time.monotonic() - t0 < 1.0
    assert r.status_code == 422, r.text
    assert "20000 keys, more than 64 (limit max_attribute_keys)" in r.json()["detail"]
    r = api.post("/api/v1/heartbeats", json.dumps(
        {"host_id": "h1", "start": "2024-01-01T00:00:00", "end": "2024-01-01T00:05:00",
         "load": many}))
    assert r.status_code == 422 and "max_attribute_keys" in r.json()["detail"], r.text
    r = api.post("/api/v1/crashes", report("34" * 16, datetime(2024, 1, 1, tzinfo=UTC),
                                           **{"k" * 65: 1}).model_dump_json())
    assert r.status_code == 422 and "max_attribute_key_chars" in r.json()["detail"], r.text
    ok = api.post("/api/v1/crashes", report("56" * 16, datetime(2024, 1, 1, tzinfo=UTC),
                                            deployment="canary").model_dump_json())
    assert ok.status_code == 201, ok.text
    assert _timed_groups(api) < max(1.0, 3 * before)  # before the fix: 60-95 s


def test_crash_frame_width_is_bounded_whatever_the_keys(tmp_path: Path) -> None:
    # 10 crashes x 60 distinct keys each: 600 keys in the fleet, within the per-crash limit
    when = datetime(2024, 1, 1, tzinfo=UTC)
    records = [CrashRecord(report(f"{i:032x}", when), {f"c{i}_{j}": j for j in range(60)})
               for i in range(10)]
    records.append(CrashRecord(report("f" * 32, when), {"c0_1": 1}))  # c0_1: on 2 rows
    with DuckDBStore(tmp_path / "data") as store:
        store.add_crashes(records)
        frame = store.crash_frame(None, None)
    keys = [c for c in frame.columns if re.fullmatch(r"c\d+_\d+", c)]
    assert len(keys) == limits.MAX_ATTRIBUTE_COLUMNS
    assert frame.attrs["dropped_attribute_keys"] == 600 - limits.MAX_ATTRIBUTE_COLUMNS
    assert "c0_1" in keys  # the most frequent key is kept


def test_sidecar_attributes_beyond_the_limit_are_dropped_and_counted(tmp_path: Path) -> None:
    fleet = small_fleet(tmp_path / "fleet")
    attrs = {f"a{i:03d}": i for i in range(100)}
    (fleet / "crashes" / "wide.json").write_text(json.dumps(
        {"host_id": "h1", "captured_at": "2024-01-03T00:00:00Z", **attrs}))
    # a numeric host_id is the host "42" of hosts.csv, not "no host_id"
    (fleet / "crashes" / "numeric.json").write_text(json.dumps(
        {"host_id": 42, "captured_at": "2024-01-03T00:00:00Z"}))
    with DuckDBStore(tmp_path / "data") as store:
        summary = ingest([fleet], store, jobs=1)
        kept = [str(r) for r in summary.rejections.kept if r.category == "attribute-limit"]
        assert kept == [f"{fleet}/crashes/wide.json: 36 of 100 attributes dropped (limit "
                        "max_attribute_keys, see docs/limits.md); crash kept"]
        assert summary.crashes_added == 2, [str(r) for r in summary.rejections]
        stored = store._query("SELECT host_id, attributes FROM crashes ORDER BY host_id").fetchall()
    assert [h for h, _ in stored] == ["42", "h1"]
    assert len(json.loads(stored[1][1])) == limits.MAX_ATTRIBUTE_KEYS


def test_unbalanced_quote_in_hosts_csv_rejects_its_row_only(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "hosts.csv").write_text('host_id,zone\nh1,"a\nh2,b\nh3,c\n')
    with DuckDBStore(tmp_path / "data") as store:
        summary = ingest([fleet], store, jobs=1)
        hosts = sorted(store.host_ids())
    reasons = [str(r) for r in summary.rejections]
    assert hosts == ["h2", "h3"], reasons
    assert len(reasons) == 1 and "hosts.csv:2" in reasons[0], reasons


def test_every_limit_is_in_docs_limits_md() -> None:
    table = (REPO / "docs" / "limits.md").read_text()
    for limit in limits.LIMITS:
        row = next((line for line in table.splitlines() if line.startswith(f"| `{limit.name}`")),
                   None)
        assert row is not None, f"{limit.name} missing from docs/limits.md"
        assert limit.default in row, (limit.name, limit.default, row)
        if limit.env:
            assert limit.env in row, (limit.name, limit.env)


def test_every_env_limit_has_a_unit_and_is_checked_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each COREEPI_* limit variable of LIMITS is checked by check_environment
    (and so when a command or a ServeConfig starts), its error naming it."""
    env = sorted(x.env for x in limits.LIMITS if x.env and x.env.startswith("COREEPI_"))
    assert sorted(limits.ENV_UNITS) == env
    for name in env:
        monkeypatch.delenv(name, raising=False)
    limits.check_environment()
    for name in env:
        monkeypatch.setenv(name, "0")
        with pytest.raises(limits.LimitEnvError) as err:
            limits.check_environment()
        assert err.value.line() == f"{name}: '0' is not a positive number of {limits.ENV_UNITS[name]}"
        with pytest.raises(limits.LimitEnvError):
            ServeConfig()
        monkeypatch.delenv(name)


@pytest.mark.parametrize("variable", ["COREEPI_MAX_CORE_BYTES", "COREEPI_MAX_WRITE_BACKLOG"])
@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["ingest"], ["report"]])
def test_a_bad_limit_variable_stops_any_command_in_one_line(variable: str, command: list[str],
                                                            tmp_path: Path) -> None:
    """Before: ``COREEPI_MAX_CORE_BYTES=lots coreepi serve`` started, and every
    core sent to it then failed."""
    import os
    import subprocess
    import sys

    unit = limits.ENV_UNITS[variable]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COREEPI_MAX_")}
    done = subprocess.run(
        [sys.executable, "-m", "coreepi", *command, "--data-dir", str(tmp_path / "d")],
        env={**env, variable: "lots"}, capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (
        2, f"coreepi: error: {variable}: 'lots' is not a positive number of {unit}\n")
    assert not (tmp_path / "d").exists()


def test_a_read_budget_below_the_poll_interval_is_refused(tmp_path: Path) -> None:
    """Before: ``--read-cpu-seconds 0.001`` was accepted, though the budget is
    checked only every 50 ms."""
    import subprocess
    import sys

    with pytest.raises(ValueError, match=r"0.01 s is below the 50 ms"):
        ServeConfig(read_cpu_seconds=0.01)
    assert ServeConfig(read_cpu_seconds=0.05).read_cpu_seconds == 0.05
    for value in ("0.001", "-1"):
        done = subprocess.run(
            [sys.executable, "-m", "coreepi", "serve", "--port", "0", "--read-cpu-seconds", value,
             "--data-dir", str(tmp_path / "d")], capture_output=True, text=True, timeout=120,
            check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr == (f"coreepi: error: --read-cpu-seconds: {float(value):g} s is below "
                               "the 50 ms at which a read's CPU time is checked, so it could not "
                               "be kept (give at least 0.05)\n")
    assert not (tmp_path / "d").exists()
