"""coreepi serve as a real process: uvicorn on 127.0.0.1 (a free port), a
real DuckDB data dir, tokens made with the CLI, a real core uploaded and
analysed, the server killed with SIGKILL, and the data still there."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401
from servekit import ServeProcess, edge_report, snapshot, wait_for_jobs, zstd_bytes

from coreepi.ingest.artifacts import inspect_file
from coreepi.model.report import CrashReport

JSON = {"content-type": "application/json"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coreepi", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "data"
    assert _cli("store", "init", "--data-dir", str(data)).returncode == 0
    out = {}
    for scope in ("ingest", "read"):
        r = _cli("token", "create", "--scope", scope, "--name", f"t-{scope}", "--data-dir",
                 str(data))
        assert r.returncode == 0, r.stderr
        out[scope] = r.stdout.strip()
    listed = _cli("token", "list", "--data-dir", str(data)).stdout
    assert "t-ingest" in listed and out["ingest"] not in listed
    return out


@pytest.fixture
def server(tmp_path: Path, tokens: dict[str, str]) -> Iterator[ServeProcess]:
    s = ServeProcess(["--data-dir", str(tmp_path / "data"), "--max-body-mb", "1",
                      "--max-core-mb", "64", "--jobs", "2"], tmp_path / "serve.log")
    try:
        yield s
    finally:
        s.kill()


def _raw(port: int, request: bytes) -> int:
    """Send raw bytes (no client-side path normalization); the status code."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        head = sock.recv(65536).split(b"\r\n", 1)[0]
    return int(head.split()[1])


def test_served_end_to_end(server: ServeProcess, tokens: dict[str, str],
                           coreset: CoreSet) -> None:  # noqa: F811
    full = inspect_file(coreset.cores[0])[0]
    sent = edge_report(full, host_id="node-7")
    ingest = {"authorization": f"Bearer {tokens['ingest']}"}
    read = {"authorization": f"Bearer {tokens['read']}"}
    with httpx.Client(base_url=server.url, timeout=120) as c:
        # the store is held by the server: the CLI says so instead of corrupting it
        busy = _cli("token", "list", "--data-dir", str(server.tmp / "data"))
        assert busy.returncode == 2 and busy.stderr.count("\n") == 1, busy.stderr
        assert "is open in coreepi serve (pid" in busy.stderr and "--server URL" in busy.stderr

        r = c.post("/api/v1/crashes", content=sent.model_dump_json(),
                   headers=ingest | {"content-type": "application/json"})
        assert r.status_code == 201, r.text
        body = zstd_bytes(coreset.cores[0])

        def chunks() -> Iterator[bytes]:  # streamed (chunked), as an agent sends it
            for i in range(0, len(body), 64 * 1024):
                yield body[i:i + 64 * 1024]

        r = c.put(f"/api/v1/crashes/{sent.crash_id}/core", content=chunks(),
                  headers=ingest | {"content-type": "application/zstd"})
        assert r.status_code == 201, (r.text, server.output())
        assert r.json()["queued"] is True
        wait_for_jobs(lambda: c.get("/api/v1/jobs", headers=read).json()["counts"])
        got = CrashReport.model_validate_json(c.get(f"/api/v1/crashes/{sent.crash_id}",
                                                    headers=read).text)
        assert got.signature is not None and got.signature.signature == full.signature.signature
        assert got.signal is not None and got.signal.name == "SIGSEGV"
        assert got.crashed_thread is not None and got.crashed_thread.frames

        # idempotent
        assert c.post("/api/v1/crashes", content=sent.model_dump_json(),
                      headers=ingest).status_code == 415  # Content-Type: application/json
        assert c.post("/api/v1/crashes", json=sent.model_dump(mode="json"),
                      headers=ingest).json()["status"] == "duplicate"
        assert c.put(f"/api/v1/crashes/{sent.crash_id}/core", content=body,
                     headers=ingest | {"content-type": "application/zstd"}).status_code == 200

        hb = {"host_id": "node-7", "boot_id": "b", "start": "2024-03-01T00:00:00Z",
              "end": "2024-03-01T01:00:00Z", "facts": {"kernel": "6.1.0", "cpu_model": "EPYC"},
              "load": {"loadavg_1m": 1.25, "uptime_seconds": 7200}}
        assert c.post("/api/v1/heartbeats", json=hb, headers=ingest).status_code == 201

        # rejections
        other = edge_report(inspect_file(coreset.cores[1])[0], host_id="node-7")
        assert c.post("/api/v1/crashes", content=other.model_dump_json(),
                      headers={"authorization": "Bearer nope"} | JSON).status_code == 401
        assert c.post("/api/v1/crashes", content=other.model_dump_json(),
                      headers=read | JSON).status_code == 403
        assert c.get("/api/v1/crashes", headers=ingest).status_code == 403
        assert c.post("/api/v1/crashes", content=b"{" * 10,
                      headers=ingest | JSON).status_code == 422
        big = other.model_dump(mode="json") | {"attributes": {"pad": "x" * (2 << 20)}}
        assert c.post("/api/v1/crashes", json=big, headers=ingest).status_code == 413
        assert c.post("/api/v1/crashes", content=sent.model_copy(
            update={"boot_id": "changed"}).model_dump_json(), headers=ingest | JSON).status_code == 409
        assert c.post("/api/v1/crashes", content=other.model_copy(
            update={"crash_id": "../../etc"}).model_dump_json(),
            headers=ingest | JSON).status_code == 400
        assert c.put(f"/api/v1/crashes/{other.crash_id}/core", content=body,
                     headers=ingest | {"content-type": "application/zstd"}).status_code == 404
        auth = f"Authorization: Bearer {tokens['ingest']}\r\n".encode()
        for path in (b"/api/v1/crashes/../../etc/core", b"/api/v1/crashes/..%2F..%2Fetc/core",
                     b"/api/v1/crashes/%2e%2e/core"):
            status = _raw(server.port, b"PUT " + path + b" HTTP/1.1\r\nHost: x\r\n" + auth +
                          b"Content-Type: application/zstd\r\nContent-Length: 4\r\n"
                          b"Connection: close\r\n\r\n\x28\xb5\x2f\xfd")
            assert status in (400, 404), (path, status)  # never 2xx; 404 when not routed
        assert _raw(server.port, b"PUT /api/v1/crashes/..%2F..%2Fetc/core HTTP/1.1\r\nHost: x\r\n"
                    + auth + b"Content-Type: application/zstd\r\nContent-Length: 4\r\n"
                    b"Connection: close\r\n\r\n\x28\xb5\x2f\xfd") == 400

        metrics = c.get("/metrics").text
        assert 'coreepi_crashes_ingested_total{source="elf-core"} 1.0' in metrics
        assert 'coreepi_requests_rejected_total{reason="unauthorized"} 1.0' in metrics
        assert 'coreepi_requests_rejected_total{reason="too-large"} 1.0' in metrics
        assert 'coreepi_heartbeats_total{outcome="created"} 1.0' in metrics
        listed = c.get("/api/v1/crashes", headers=read).json()["crashes"]
        assert [x["crash_id"] for x in listed] == [sent.crash_id]

    # a 2xx means durable: SIGKILL, no shutdown, and everything is there
    server.kill(signal.SIGKILL)
    snap = snapshot(server.tmp / "data")
    counts = snap["counts"]
    assert counts["crashes"] == 1 and counts["crash_receipts"] == 1
    assert counts["exposure"] == 1 and counts["hosts"] == 1
    assert len(snap["blobs"]) == 1
    assert not list((server.tmp / "data" / "tmp").rglob("upload-*"))
    stored = CrashReport.model_validate_json(snap["reports"][sent.crash_id])
    assert stored.signature == got.signature and stored.core.stored
