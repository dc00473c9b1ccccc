"""Many servers, one database: two ``coreepi serve`` replicas and a
``coreepi worker`` on one PostgreSQL store (a throwaway cluster) with the
cores in an S3-compatible bucket (moto's server), all real processes on
127.0.0.1. A report posted to one replica, its core put to the other,
analysed by the worker, read back from the first; a token revoked with the
CLI is refused by both replicas within seconds."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import zstandard
from capturekit import kernel_args, report_of, run_collect, wait_ready, write_config
from corefactory import Crash
from fleetfactory import CoreSet, coreset  # noqa: F401
from servekit import ServeProcess, edge_report, wait_for_jobs, zstd_bytes

from coreepi.ingest.artifacts import inspect_file
from coreepi.model.report import CrashReport

pytestmark = pytest.mark.timeout(600)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "coreepi"), *args],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def replicas(pg_url: str, s3_bucket: str, tmp_path: Path) -> Iterator[list[ServeProcess]]:
    # the S3 settings are in the environment (s3_bucket); the children inherit it
    args = ["--store", pg_url, "--blobs", s3_bucket, "--jobs", "0"]
    started: list[ServeProcess] = []
    try:
        for i in range(2):
            (tmp_path / f"r{i}").mkdir()
            started.append(ServeProcess(args, tmp_path / f"r{i}" / "serve.log"))
        yield started
    finally:
        for r in started:
            r.kill()


def _token(pg_url: str, scope: str, name: str) -> str:
    made = _cli("token", "create", "--scope", scope, "--name", name, "--store", pg_url)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


def test_two_replicas_one_worker_one_database(replicas: list[ServeProcess], pg_url: str,
                                              s3_bucket: str, coreset: CoreSet) -> None:  # noqa: F811
    ingest = {"authorization": f"Bearer {_token(pg_url, 'ingest', 'agents')}"}
    read = {"authorization": f"Bearer {_token(pg_url, 'read', 'ui')}"}
    full = inspect_file(coreset.cores[0])[0]
    sent = edge_report(full, host_id="node-3")
    one, two = (httpx.Client(base_url=r.url, timeout=120) for r in replicas)
    with one, two:
        r = one.post("/api/v1/crashes", content=sent.model_dump_json(),
                     headers=ingest | {"content-type": "application/json"})
        assert r.status_code == 201, r.text
        # the other replica sees it at once: the same database
        r = two.put(f"/api/v1/crashes/{sent.crash_id}/core", content=zstd_bytes(coreset.cores[0]),
                    headers=ingest | {"content-type": "application/zstd"})
        assert r.status_code == 201 and r.json()["queued"] is True, r.text
        assert one.get("/api/v1/jobs", headers=read).json()["counts"]["queued"] == 1

        done = _cli("worker", "--store", pg_url, "--blobs", s3_bucket, "--once")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ran 1 jobs")
        counts = wait_for_jobs(lambda: two.get("/api/v1/jobs", headers=read).json()["counts"])
        assert counts["done"] == 1 and counts["dead"] == 0
        # the worker process's analysis shows in both replicas' metrics (from the jobs table)
        for c in (one, two):
            lines = c.get("/metrics").text.splitlines()
            assert 'coreepi_analysis_jobs{state="done"} 1.0' in lines
            assert 'coreepi_analysis_jobs{state="queued"} 0.0' in lines
        got = CrashReport.model_validate_json(
            one.get(f"/api/v1/crashes/{sent.crash_id}", headers=read).text)
        assert got.signature is not None and got.signature.signature == full.signature.signature
        assert got.core.stored and got.host_id == "node-3"
        # the core comes back from the bucket as stored: zstd, the uploaded content
        r = two.get(f"/api/v1/crashes/{sent.crash_id}/core", headers=read)
        assert r.status_code == 200, r.text
        assert r.headers["x-gdb-command"].startswith(f"zstd -dc {sent.crash_id}.core.zst")
        assert int(r.headers["content-length"]) == len(r.content)
        assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(r.content)).read() == \
            coreset.cores[0].read_bytes()

        # revoked with the CLI on the database: both replicas refuse it within seconds
        assert _cli("token", "revoke", "ui", "--store", pg_url).returncode == 0
        deadline = time.monotonic() + 15
        refused: set[int] = set()
        while len(refused) < 2 and time.monotonic() < deadline:
            for i, c in enumerate((one, two)):
                if c.get("/api/v1/jobs", headers=read).status_code == 401:
                    refused.add(i)
            time.sleep(0.25)
        assert refused == {0, 1}, [r.output() for r in replicas]
        assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


def test_agent_to_ui_through_postgres_and_s3(pg_url: str, s3_bucket: str, tmp_path: Path,
                                             get_crash: Callable[[str], Crash]) -> None:
    """The whole flow of issue 17 with real processes: `coreepi collect` spools
    a crash, `coreepi agent` ships report and core to `coreepi serve --store
    postgresql://… --blobs s3://…`, a `coreepi worker` analyses it, and the
    web UI shows the analysed crash and hands out its core from the bucket."""
    ingest, read = _token(pg_url, "ingest", "node"), _token(pg_url, "read", "sre")
    (tmp_path / "s").mkdir()
    server = ServeProcess(["--store", pg_url, "--blobs", s3_bucket, "--jobs", "0"],
                          tmp_path / "s" / "serve.log")
    try:
        node = tmp_path / "node"
        node.mkdir()
        (node / "t").write_text(ingest + "\n")
        config = write_config(node, {"server_url": server.url, "token_file": str(node / "t")},
                              collect={"edge_analysis_seconds": 0})  # analysed centrally
        crash = get_crash("null_deref")
        run_collect(config, kernel_args(comm="null_deref"), crash.core)
        [entry] = wait_ready(node / "spool", 1, timeout=180)
        crash_id = report_of(entry)["crash_id"]
        shipped = _cli("agent", "--config", str(config), "--once")
        assert shipped.returncode == 0 and "delivered 1" in shipped.stdout, shipped.stderr

        done = _cli("worker", "--store", pg_url, "--blobs", s3_bucket, "--once")
        assert done.returncode == 0 and done.stdout.startswith("ran 1 jobs"), done.stderr
        with httpx.Client(base_url=server.url, timeout=120,
                          headers={"authorization": f"Bearer {read}"}) as ui:
            page = ui.get(f"/crashes/{crash_id}")
            assert page.status_code == 200 and "store_field" in page.text, page.text[:500]
            assert "SIGSEGV" in page.text and "Download the core" in page.text
            core = ui.get(f"/api/v1/crashes/{crash_id}/core")
            assert core.status_code == 200
            assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(core.content)).read() \
                == crash.core.read_bytes()
            counts = ui.get("/api/v1/jobs").json()["counts"]
            assert counts["done"] == 1 and counts["dead"] == 0
    finally:
        server.kill()
