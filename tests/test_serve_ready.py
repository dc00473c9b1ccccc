"""Readiness (breaker4 #31): ``/readyz`` answers 503 naming the blob store
when its bucket does not answer (an S3 endpoint on an unused 127.0.0.1 port),
200 over a reachable one (moto's server); ``/healthz`` stays liveness; and
``coreepi serve`` warns at start-up, in one line, of an unreachable bucket."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from servekit import free_port

from coreepi.serve import ServeConfig, create_app
from coreepi.store import open_store

_CONFIG = ServeConfig(analysis_jobs=0)


def _dead_endpoint(monkeypatch: pytest.MonkeyPatch) -> str:
    """AWS_* pointing at a 127.0.0.1 port nothing listens on."""
    url = f"http://127.0.0.1:{free_port()}"
    for key, value in {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    return url


def test_readyz_is_ready_over_a_reachable_bucket(s3_bucket: str, tmp_path: Path) -> None:
    with open_store(tmp_path / "store", blobs=s3_bucket) as store, \
            TestClient(create_app(store, _CONFIG)) as client:
        got = client.get("/readyz")
        assert (got.status_code, got.json()["status"]) == (200, "ready")


def test_readyz_says_503_naming_an_unreachable_bucket(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    endpoint = _dead_endpoint(monkeypatch)
    with open_store(tmp_path / "store", blobs="s3://cores/prod") as store, \
            TestClient(create_app(store, _CONFIG)) as client:
        started = time.monotonic()
        got = client.get("/readyz")
        took = time.monotonic() - started
        assert client.get("/healthz").status_code == 200  # alive, just not ready
        wrong = client.post("/readyz")  # an API path: refused in JSON, not an HTML page
        assert (wrong.status_code, wrong.headers["content-type"]) == (405, "application/json")
    assert got.status_code == 503 and got.json()["status"] == "unready"
    detail = got.json()["detail"]
    assert detail.startswith(f"blob store s3://cores/prod (endpoint {endpoint}): unreachable: ")
    assert "\n" not in detail
    assert took < 10  # the probe does not retry with back-off for minutes


def test_readyz_names_an_unwritable_blob_directory(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs-file"
    blobs.write_text("not a directory")
    with open_store(tmp_path / "store", blobs=blobs) as store, \
            TestClient(create_app(store, _CONFIG)) as client:
        got = client.get("/readyz")
    assert got.status_code == 503
    assert got.json()["detail"] == f"blob store {blobs}: {blobs} is not a directory"


def test_serve_warns_at_start_of_an_unreachable_bucket(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    endpoint = _dead_endpoint(monkeypatch)
    log = tmp_path / "serve.log"
    subprocess.run([sys.executable, "-m", "coreepi", "store", "init", str(tmp_path / "d")],
                   check=True, capture_output=True, timeout=120)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coreepi", "serve", "--data-dir", str(tmp_path / "d"),
             "--blobs", "s3://cores/prod", "--port", str(free_port()), "--jobs", "0",
             "--log-level", "warning"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 60
        while "web UI" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    warnings = [line for line in log.read_text().splitlines() if "warning" in line]
    assert len(warnings) == 1, log.read_text()
    assert re.fullmatch(
        rf"coreepi: warning: blob store s3://cores/prod \(endpoint {re.escape(endpoint)}\): "
        r"unreachable: .+: cores cannot be stored until it answers "
        r"\(GET /readyz says 503 until then\)", warnings[0])
