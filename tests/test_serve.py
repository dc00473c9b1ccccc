"""coreepi serve, in-process: the app called through httpx's ASGI transport
(FastAPI's TestClient) over a real DuckDB store and real cores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from fleetfactory import CoreSet, coreset  # noqa: F401
from servekit import T0, edge_report, snapshot, wait_for_jobs, zstd_bytes

from coreepi.ingest.artifacts import inspect_file
from coreepi.model.report import CrashReport, HostFacts
from coreepi.reanalysis.warm import WarmLauncher
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.store import DuckDBStore

KiB = 1024


@pytest.fixture(scope="module")
def full_reports(coreset: CoreSet) -> list[CrashReport]:  # noqa: F811
    return [inspect_file(core)[0] for core in coreset.cores[:3]]


class Server:
    def __init__(self, tmp: Path, config: ServeConfig) -> None:
        self.store = DuckDBStore(tmp / "data")
        self.tokens = {s: create_token(self.store, [s], f"test-{s}")[1]
                       for s in ("ingest", "read", "admin")}
        self.app = create_app(self.store, config)
        self.client = TestClient(self.app)

    def h(self, scope: str | None = "ingest", **extra: str) -> dict[str, str]:
        out = dict(extra)
        if scope is not None:
            out["authorization"] = f"Bearer {self.tokens[scope]}"
        return out

    def post(self, report: CrashReport | dict | str, scope: str | None = "ingest"):
        body = report.model_dump_json() if isinstance(report, CrashReport) else (
            report if isinstance(report, str) else json.dumps(report))
        return self.client.post("/api/v1/crashes", content=body,
                                headers=self.h(scope, **{"content-type": "application/json"}))

    def put_core(self, crash_id: str, body: bytes, scope: str | None = "ingest",
                 ctype: str = "application/zstd"):
        return self.client.put(f"/api/v1/crashes/{crash_id}/core", content=body,
                               headers=self.h(scope, **{"content-type": ctype}))

    def metric(self, name: str) -> float:
        text = self.client.get("/metrics").text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total += float(line.rsplit(" ", 1)[1])
        return total


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    config = ServeConfig(max_body_bytes=256 * KiB, max_core_bytes=8 << 20, analysis_jobs=2,
                         analysis_timeout_seconds=120, token_cache_seconds=0)
    s = Server(tmp_path, config)
    with s.client:
        yield s
    # the server's stop ends its workers' zygotes (and so their children)
    assert [w.runner.launcher._proc for w in s.app.state.workers] == [None, None]
    s.store.close()


def test_report_then_core_is_analysed_centrally(server: Server, coreset: CoreSet,  # noqa: F811
                                               full_reports: list[CrashReport]) -> None:
    full = full_reports[0]
    sent = edge_report(full)
    assert not sent.threads and sent.signature is None
    r = server.post(sent)
    assert r.status_code == 201, r.text
    assert r.json() == {"crash_id": full.crash_id, "status": "created"}
    assert server.metric('coreepi_crashes_ingested_total{source="elf-core"}') == 1

    body = zstd_bytes(coreset.cores[0])
    r = server.put_core(full.crash_id, body)
    assert r.status_code == 201, r.text
    answer = r.json()
    assert answer["queued"] is True and answer["core_status"] == "stored"
    assert answer["signature"] is None  # durable now, analysed by a worker thread next
    assert wait_for_jobs(server.store.job_counts)["done"] == 1
    # forked from a worker thread's warm zygote, as `coreepi worker` does: the
    # zygote that served it is still up for the next core
    launchers = [w.runner.launcher for w in server.app.state.workers]
    assert all(isinstance(x, WarmLauncher) for x in launchers) and len(launchers) == 2
    assert [x._proc.poll() for x in launchers if x._proc is not None] == [None]

    got = CrashReport.model_validate_json(server.client.get(
        f"/api/v1/crashes/{full.crash_id}", headers=server.h("read")).text)
    assert got.signature.signature == full.signature.signature
    assert [p.name for p in got.phenotypes] == [p.name for p in full.phenotypes]
    assert got.crashed_thread is not None and got.crashed_thread.frames
    assert got.host_id == "node-1" and got.attributes["app_version"] == "1.2.3"
    assert got.core.stored and got.core.blob_key == answer["blob_key"]
    assert server.store.get_blob(answer["blob_key"]) == body
    row = server.store.crash_frame().iloc[0]
    assert row["core_status"] == "stored" and row["signature"] == full.signature.signature
    assert row["app_version"] == "1.2.3"

    # idempotent: the same report and the same core again change nothing
    before = snapshot(server.store)
    assert server.post(sent).status_code == 200
    assert server.post(sent).json()["status"] == "duplicate"
    r = server.put_core(full.crash_id, body)
    assert r.status_code == 200 and r.json()["status"] == "duplicate"
    assert snapshot(server.store) == before
    assert server.metric("coreepi_crashes_duplicate_total") == 2
    assert server.metric('coreepi_core_analyses_total{outcome="ok"}') == 1


def test_analysed_report_is_not_reanalysed(server: Server, coreset: CoreSet,  # noqa: F811
                                          full_reports: list[CrashReport]) -> None:
    sent = edge_report(full_reports[1], analysed=True)
    assert server.post(sent).status_code == 201
    r = server.put_core(sent.crash_id, zstd_bytes(coreset.cores[1]))
    assert r.status_code == 201 and r.json()["queued"] is False
    assert server.store.job_counts() == {"queued": 0, "running": 0, "done": 0, "dead": 0}
    assert server.metric("coreepi_core_analyses_total") == 0
    stored = server.store.get_report(sent.crash_id)
    assert stored.core.stored and stored.threads == sent.threads


def test_unreadable_core_is_counted(server: Server, full_reports: list[CrashReport]) -> None:
    import zstandard

    sent = edge_report(full_reports[2])
    assert server.post(sent).status_code == 201
    r = server.put_core(sent.crash_id,
                        zstandard.ZstdCompressor().compress(b"\x7fELF" + b"not a core" * 100))
    assert r.status_code == 201, r.text
    assert r.json()["queued"] is True
    assert wait_for_jobs(server.store.job_counts)["done"] == 1  # unreadable is a result
    assert server.store.count_crashes(core_status="unreadable") == 1
    (row,) = server.store.list_crashes()
    assert row["core_reason"]
    assert server.metric('coreepi_core_analyses_total{outcome="unreadable"}') == 1
    jobs = server.client.get("/api/v1/jobs?state=done", headers=server.h("read")).json()
    assert jobs["counts"]["done"] == 1 and jobs["jobs"][0]["crash_id"] == sent.crash_id


def test_rejections_write_nothing(server: Server, coreset: CoreSet,  # noqa: F811
                                  full_reports: list[CrashReport]) -> None:
    sent = edge_report(full_reports[0])
    assert server.post(sent).status_code == 201
    before = snapshot(server.store)
    rejected0 = server.metric("coreepi_requests_rejected_total")
    other = edge_report(full_reports[1], minutes=7)
    cases = {
        "no token": (server.post(other, scope=None), 401),
        "wrong token": (server.client.post(
            "/api/v1/crashes", content=other.model_dump_json(),
            headers={"authorization": "Bearer cep_wrong", "content-type": "application/json"}),
            401),
        "not bearer": (server.client.post(
            "/api/v1/crashes", content=other.model_dump_json(),
            headers={"authorization": f"Basic {server.tokens['ingest']}"}), 401),
        "read token ingests": (server.post(other, scope="read"), 403),
        "ingest token reads": (server.client.get(f"/api/v1/crashes/{sent.crash_id}",
                                                 headers=server.h("ingest")), 403),
        "ingest token lists": (server.client.get("/api/v1/crashes", headers=server.h()), 403),
        "oversized body": (server.post(other.model_dump(mode="json") | {
            "attributes": {"pad": "x" * (300 * KiB)}}), 413),
        "oversized chunked": (server.client.post(
            "/api/v1/crashes", content=iter([b"{" + b" " * (200 * KiB), b" " * (200 * KiB)]),
            headers=server.h(**{"content-type": "application/json"})), 413),
        "malformed json": (server.post('{"crash_id": "abc", '), 422),
        "not a report": (server.post({"crash_id": other.crash_id, "source": "elf-core"}), 422),
        "extra field": (server.post(other.model_dump(mode="json") | {"evil": 1}), 422),
        "no host": (server.post(other.model_copy(update={"host_id": None})), 422),
        "reused crash_id": (server.post(sent.model_copy(update={"host_id": "node-2"})), 409),
        "path-like id": (server.post(other.model_copy(update={"crash_id": "../../etc"})), 400),
        "upper-case id": (server.post(other.model_copy(
            update={"crash_id": other.crash_id.upper()})), 400),
        "core for unknown crash": (server.put_core(other.crash_id, zstd_bytes(
            coreset.cores[1])), 404),
        "path-like core id": (server.put_core("..%2F..%2Fetc", b"x"), 400),
        "dot-dot core id": (server.put_core("%2E%2E", b"x"), 400),
        "core not zstd": (server.put_core(sent.crash_id, coreset.cores[0].read_bytes()[:4096]),
                          400),
        "core wrong type": (server.put_core(sent.crash_id, b"{}", ctype="application/json"), 415),
        "core cut short": (server.put_core(sent.crash_id, zstd_bytes(coreset.cores[0])[:-100]),
                           400),
        "core over limit": (server.put_core(sent.crash_id, b"\x28\xb5\x2f\xfd" + b"\0" * (9 << 20)),
                            413),
        "core read token": (server.put_core(sent.crash_id, zstd_bytes(coreset.cores[0]),
                                            scope="read"), 403),
        "heartbeat backwards": (server.client.post("/api/v1/heartbeats", json={
            "host_id": "h", "start": "2024-03-01T01:00:00Z", "end": "2024-03-01T00:00:00Z"},
            headers=server.h()), 422),
    }
    wrong = {k: (r.status_code, r.text[:200]) for k, (r, want) in cases.items()
             if r.status_code != want}
    assert not wrong, wrong
    for name, (r, _) in cases.items():
        assert r.json().get("detail"), name
    assert snapshot(server.store) == before
    assert server.metric("coreepi_requests_rejected_total") == rejected0 + len(cases)
    text = server.client.get("/metrics").text
    for reason in ("unauthorized", "forbidden", "too-large", "invalid-json", "invalid-body",
                   "conflict", "invalid-crash-id", "unknown-crash", "invalid-core",
                   "unsupported-media-type"):
        assert f'coreepi_requests_rejected_total{{reason="{reason}"}}' in text, reason
    # no upload left behind (the server's own scratch directory stays until it exits)
    assert not [p for p in (server.store.data_dir / "tmp").rglob("*") if p.is_file()]


def test_heartbeats_become_exposure(server: Server) -> None:
    facts = HostFacts(kernel="6.8.0", cpu_model="Xeon 8375C", cpu_family=6, microcode="0xd0003a5",
                      hypervisor="kvm", gpus=[{"name": "A100", "driver": "550.54"}])
    hb = {"host_id": "node-1", "boot_id": "b1", "start": "2024-03-01T00:00:00Z",
          "end": "2024-03-01T00:05:00Z", "facts": facts.model_dump(mode="json"),
          "load": {"loadavg_1m": 3.5, "memory_pressure_some_avg10": 0.2, "uptime_seconds": 600}}
    r = server.client.post("/api/v1/heartbeats", json=hb, headers=server.h())
    assert r.status_code == 201, r.text
    r = server.client.post("/api/v1/heartbeats", json=hb, headers=server.h())
    assert r.status_code == 200 and r.json()["status"] == "duplicate"
    nxt = hb | {"start": "2024-03-01T00:05:00Z", "end": "2024-03-01T00:10:00+00:00",
                "facts": None, "load": {"loadavg_1m": 9.0}}
    assert server.client.post("/api/v1/heartbeats", json=nxt, headers=server.h()).status_code == 201
    before = snapshot(server.store)
    clash = hb | {"start": "2024-03-01T00:02:00Z", "facts": HostFacts(kernel="7").model_dump()}
    assert server.client.post("/api/v1/heartbeats", json=clash,
                              headers=server.h()).status_code == 409
    assert snapshot(server.store) == before  # the facts of a refused heartbeat are not kept

    exposure = server.store.exposure_frame()
    assert len(exposure) == 2 and exposure["seconds"].sum() == 600
    assert list(exposure["loadavg_1m"]) == [3.5, 9.0]  # numbers stay numbers
    assert exposure["kernel"].iloc[0] == "6.8.0" and exposure["gpu_model"].iloc[0] == "A100"
    hosts = server.client.get("/api/v1/hosts", headers=server.h("read")).json()["hosts"]
    assert hosts[0]["host_id"] == "node-1" and hosts[0]["attributes"]["cpu_model"] == "Xeon 8375C"
    assert server.metric('coreepi_heartbeats_total{outcome="created"}') == 2


def test_read_endpoints_and_paging(server: Server, full_reports: list[CrashReport]) -> None:
    sent = [edge_report(r, host_id=f"node-{i % 2}", minutes=i, analysed=True)
            for i, r in enumerate(full_reports)]
    for s in sent:
        assert server.post(s).status_code == 201
    read = server.h("read")
    seen, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = server.client.get("/api/v1/crashes", params=params, headers=read).json()
        seen += [c["crash_id"] for c in page["crashes"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(s.crash_id for s in sent) and len(seen) == len(set(seen))
    only = server.client.get("/api/v1/crashes", params={"host_id": "node-1"}, headers=read).json()
    assert [c["crash_id"] for c in only["crashes"]] == [sent[1].crash_id]
    window = server.client.get("/api/v1/crashes", headers=read, params={
        "since": (T0 + timedelta(minutes=1)).isoformat(), "until": "2024-03-01T00:02:00"}).json()
    assert [c["crash_id"] for c in window["crashes"]] == [sent[1].crash_id]
    assert server.client.get("/api/v1/crashes", params={"since": "yesterday"},
                             headers=read).status_code == 400
    assert server.client.get("/api/v1/crashes", params={"cursor": "!!"},
                             headers=read).status_code == 400
    assert server.client.get(f"/api/v1/crashes/{'0' * 32}", headers=read).status_code == 404

    groups = server.client.get("/api/v1/groups", params={"fresh": "true"}, headers=read).json()
    assert groups["window"]["crashes"] == 3 and groups["window"]["hosts_with_crashes"] == 2
    sigs = [g for g in groups["groups"] if g["kind"] == "signature"]
    assert sum(g["crashes"] for g in sigs) == 3
    names = {g["key"] for g in groups["groups"] if g["kind"] == "phenotype"}
    assert names == {p.name for r in full_reports for p in r.phenotypes}
    assert server.client.get("/api/v1/groups", headers=server.h("admin")).status_code == 200


def test_tokens_api_and_revocation(server: Server) -> None:
    admin = server.h("admin")
    assert server.client.post("/api/v1/tokens", json={"scopes": ["read"]},
                              headers=server.h("read")).status_code == 403
    r = server.client.post("/api/v1/tokens", json={"scopes": ["read"], "name": "grafana"},
                           headers=admin)
    assert r.status_code == 201
    token = r.json()["token"]
    assert token.startswith("cep_") and len(token) >= 40
    listed = server.client.get("/api/v1/tokens", headers=admin).json()["tokens"]
    assert "grafana" in {t["name"] for t in listed}
    assert all("token" not in t and "token_sha256" not in t for t in listed)
    stored = {t.name: t for t in server.store.api_tokens()}
    assert token not in stored["grafana"].token_sha256  # only the hash is kept
    mine = {"authorization": f"Bearer {token}"}
    assert server.client.get("/api/v1/hosts", headers=mine).status_code == 200
    assert server.client.post("/api/v1/tokens", json={"scopes": ["root"]},
                              headers=admin).status_code == 422
    assert server.client.delete("/api/v1/tokens/grafana", headers=admin).json() == {"revoked": 1}
    assert server.client.get("/api/v1/hosts", headers=mine).status_code == 401


def test_ops_endpoints(server: Server) -> None:
    assert server.client.get("/healthz").json()["status"] == "ok"
    spec = server.client.get("/openapi.json").json()
    for path in ("/api/v1/crashes", "/api/v1/crashes/{crash_id}/core", "/api/v1/heartbeats",
                 "/api/v1/groups", "/api/v1/hosts", "/api/v1/crashes/{crash_id}"):
        assert path in spec["paths"], path
    assert "CrashReport" in json.dumps(spec["components"])
    assert server.client.get("/docs").status_code == 200
    text = server.client.get("/metrics").text
    assert "coreepi_crashes_ingested_total" in text and "coreepi_requests_rejected_total" in text


def test_metrics_can_require_a_token(tmp_path: Path) -> None:
    s = Server(tmp_path, replace(ServeConfig(), metrics_public=False))
    with s.client:
        assert s.client.get("/metrics").status_code == 401
        assert s.client.get("/metrics", headers=s.h("read")).status_code == 200
    s.store.close()


def _bomb(zeros: int) -> bytes:
    """ELF magic then ``zeros`` zero bytes, zstd-compressed (a few KiB), streamed
    so the test never holds the plain bytes."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=3).compressobj()
    out = [cctx.compress(b"\x7fELF")]
    block = b"\0" * (1 << 20)
    for _ in range(zeros >> 20):
        out.append(cctx.compress(block))
    out.append(cctx.flush())
    return b"".join(out)


def test_zstd_bomb_and_non_elf_cores_are_refused(tmp_path: Path, coreset: CoreSet,  # noqa: F811
                                                 full_reports: list[CrashReport],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import zstandard

    monkeypatch.setenv("COREEPI_MAX_CORE_BYTES", str(1 << 30))
    config = ServeConfig(max_body_bytes=256 * KiB, max_core_bytes=8 << 20, analysis_jobs=1,
                         core_ratio_min_bytes=16 << 20, token_cache_seconds=0)
    s = Server(tmp_path, config)
    with s.client:
        needs = edge_report(full_reports[0])  # to be analysed here
        done = edge_report(full_reports[1], analysed=True)  # only stored
        for r in (needs, done):
            assert s.post(r).status_code == 201
        before = snapshot(s.store)
        bomb = _bomb(256 << 20)
        assert len(bomb) < 64 * KiB
        png = zstandard.ZstdCompressor().compress(b"\x89PNG\r\n\x1a\n" + b"\0" * 4096)
        for report in (needs, done):
            r = s.put_core(report.crash_id, bomb)
            assert r.status_code == 413, r.text
            assert "1000:1" in r.json()["detail"]
            r = s.put_core(report.crash_id, png)
            assert r.status_code == 422, r.text
            assert "not an ELF core" in r.json()["detail"]
        after = snapshot(s.store)
        assert (after["counts"], after["blobs"]) == (before["counts"], before["blobs"])  # no blob
        assert not [p for p in (s.store.data_dir / "tmp").rglob("*") if p.is_file()]  # no temp file
        assert s.metric("coreepi_core_analyses_total") == 0
        # the crash says why it has no core, in the words the node got (breaker4 #12)
        for report in (needs, done):
            got = s.store.get_report(report.crash_id)
            assert got.core.stored is False and got.core.blob_key is None
            assert got.core.dropped_reason == r.json()["detail"] + " (invalid-core)"
            assert got.core.dropped_reason.startswith("core refused by the server: not an ELF")
        listed = s.client.get("/api/v1/crashes", headers=s.h("read")).json()["crashes"]
        assert {c["core_status"] for c in listed} == {"unreadable"}
        assert s.post(done).status_code == 200  # the node's report again: still a duplicate
        # the real core, sent after all: it replaces the record of the refusal
        assert s.put_core(done.crash_id, zstd_bytes(coreset.cores[1])).status_code == 201
        got = s.store.get_report(done.crash_id)
        assert got.core.stored and got.core.dropped_reason is None
        listed = s.client.get("/api/v1/crashes", headers=s.h("read")).json()["crashes"]
        assert sorted(c["core_status"] for c in listed) == ["stored", "unreadable"]
    s.store.close()


def test_a_pruned_core_reads_pruned_through_the_server(
        server: Server, coreset: CoreSet, full_reports: list[CrashReport]) -> None:  # noqa: F811
    """breaker4 #1: the server's list, report, download and crash page read the
    blob store's pruned/KEY markers as `coreepi list --data-dir` does."""
    from datetime import timedelta

    sent = edge_report(full_reports[1], analysed=True)
    assert server.post(sent).status_code == 201
    assert server.put_core(sent.crash_id, zstd_bytes(coreset.cores[1])).status_code == 201
    read = server.h("read")
    listed = server.client.get("/api/v1/crashes", headers=read).json()["crashes"]
    assert [c["core_status"] for c in listed] == ["stored"]
    assert server.store.blobs.prune(max_age=timedelta(0)).deleted_for_age == 1
    listed = server.client.get("/api/v1/crashes", headers=read).json()["crashes"]
    assert [(c["core_status"], c["core_reason"]) for c in listed] == [
        ("pruned", "pruned: its core was deleted by retention")]
    got = CrashReport.model_validate_json(server.client.get(
        f"/api/v1/crashes/{sent.crash_id}", headers=read).text)
    assert (got.core.stored, got.core.dropped_reason) == (
        False, "pruned: its core was deleted by retention")
    r = server.client.get(f"/api/v1/crashes/{sent.crash_id}/core", headers=read)
    assert r.status_code == 404 and r.json()["detail"] == (
        f"crash {sent.crash_id}: pruned: its core was deleted by retention")
    page = server.client.get(f"/crashes/{sent.crash_id}.json", headers=read)
    assert page.json()["crash"]["core"]["dropped_reason"] == (
        "pruned: its core was deleted by retention")
    host = server.client.get(f"/hosts/{sent.host_id}.json", headers=read).json()
    assert [c["core_status"] for c in host["crashes"]] == ["pruned"]


def test_decompress_to_counter_writes_nothing_and_caps(tmp_path: Path) -> None:
    from coreepi.ingest.intake import InvalidCore, decompress_checked

    src = tmp_path / "bomb.zst"
    src.write_bytes(_bomb(64 << 20))
    assert decompress_checked(src, None, 1 << 30) == 4 + (64 << 20)  # counter: no ratio rule
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.zst"]
    dst = tmp_path / "plain"
    with pytest.raises(InvalidCore) as err:  # hard cap, written to disk: removed on refusal
        decompress_checked(src, dst, 32 << 20)
    assert err.value.status == 413 and not dst.exists()
    with pytest.raises(InvalidCore) as err:  # ratio rule: > 1000:1 and > 16 MiB
        decompress_checked(src, None, 1 << 30, max_ratio=1000, ratio_min_bytes=16 << 20)
    assert err.value.status == 413 and "zstd bomb" in str(err.value)
    # a large ratio is fine below the minimum size
    assert decompress_checked(src, None, 1 << 30, max_ratio=1000, ratio_min_bytes=1 << 30)


def test_future_heartbeats_and_reports_are_refused(server: Server,
                                                   full_reports: list[CrashReport]) -> None:
    now = datetime.now(UTC)
    hb = {"host_id": "node-9", "start": "2099-01-01T00:00:00Z", "end": "2099-01-01T00:05:00Z"}
    before = snapshot(server.store)
    r = server.client.post("/api/v1/heartbeats", json=hb, headers=server.h())
    assert r.status_code == 422 and "in the future" in r.json()["detail"], r.text
    soon = {"host_id": "node-9", "start": (now + timedelta(days=2)).isoformat(),
            "end": (now + timedelta(days=2, minutes=5)).isoformat()}
    assert server.client.post("/api/v1/heartbeats", json=soon,
                              headers=server.h()).status_code == 422
    future = edge_report(full_reports[0]).model_copy(
        update={"captured_at": datetime(2099, 1, 1, tzinfo=UTC)})
    r = server.post(future)
    assert r.status_code == 422 and "captured_at" in r.json()["detail"], r.text
    late = edge_report(full_reports[1]).model_copy(
        update={"captured_at": now + timedelta(days=1, hours=1)})
    assert server.post(late).status_code == 422
    assert snapshot(server.store) == before
    assert server.store.exposure_frame().empty

    # within the skew (a node clock a little ahead) is accepted
    ok = {"host_id": "node-9", "start": now.isoformat(),
          "end": (now + timedelta(hours=1)).isoformat()}
    assert server.client.post("/api/v1/heartbeats", json=ok, headers=server.h()).status_code == 201
    ahead = edge_report(full_reports[2]).model_copy(
        update={"captured_at": now + timedelta(hours=1)})
    assert server.post(ahead).status_code == 201


def test_clock_skew_is_configurable(tmp_path: Path) -> None:
    s = Server(tmp_path, replace(ServeConfig(), max_clock_skew_seconds=60, token_cache_seconds=0))
    now = datetime.now(UTC)
    with s.client:
        hb = {"host_id": "h", "start": now.isoformat(),
              "end": (now + timedelta(minutes=5)).isoformat()}
        assert s.client.post("/api/v1/heartbeats", json=hb, headers=s.h()).status_code == 422
    s.store.close()
