"""The agent against the real `coreepi serve` on 127.0.0.1: a crash collected
(through the kernel's core_pattern when root, else through a pipe from a gcore
core) arrives with its signal and signature, the core upload is accepted, the
heartbeat too; a second agent run sends nothing twice."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from capturekit import kernel_args, queued, report_of, run_collect, wait_ready, write_config
from corefactory import (
    CoreFactory,
    Crash,
    CrasherUnavailable,
    core_pattern_override,
    kernel_cores_unavailable_reason,
)

pytest.importorskip("coreepi.serve")
pytest.importorskip("uvicorn")

COREEPI = [sys.executable, "-m", "coreepi"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(url, ingest token, read token) of a `coreepi serve` child process."""
    data = tmp_path / "data"
    subprocess.run([*COREEPI, "store", "init", "--data-dir", str(data)], check=True,
                   capture_output=True, timeout=120)
    tokens = []
    for scope in ("ingest", "read"):
        done = subprocess.run([*COREEPI, "token", "create", "--scope", scope, "--data-dir",
                               str(data)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        tokens.append(done.stdout.strip())
    port = _free_port()
    proc = subprocess.Popen([*COREEPI, "serve", "--data-dir", str(data), "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/docs", timeout=2)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"coreepi serve did not start: {err[-2000:]}")
                time.sleep(0.2)
        yield url, tokens[0], tokens[1]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kernel_crash(workdir: Path, config: Path, factory: CoreFactory) -> bool:
    """Crash null_deref with collect as core_pattern; False if not possible here."""
    from test_capture_kernel import _crash, collector_pattern

    if kernel_cores_unavailable_reason():
        return False
    try:
        binary, _, _ = factory.binary("null_deref")
        with core_pattern_override(collector_pattern(config, workdir)):
            assert _crash(binary, 0).returncode == -11
    except CrasherUnavailable:
        return False
    return True


def test_crash_reaches_real_server(
    server: tuple[str, str, str], corefactory_session: CoreFactory,
    get_crash: Callable[[str], Crash],
) -> None:
    url, ingest_token, read_token = server
    workdir = Path(tempfile.mkdtemp(prefix="ce-", dir="/tmp"))
    try:
        token_file = workdir / "t"
        token_file.write_text(ingest_token + "\n")
        config = write_config(workdir, {"server_url": url, "token_file": str(token_file)},
                              collect={"edge_analysis_seconds": 120,
                                       "edge_analysis_detach": True})
        if not _kernel_crash(workdir, config, corefactory_session):
            crash = get_crash("null_deref")
            run_collect(config, kernel_args(comm="null_deref"), crash.core)
        [entry] = wait_ready(workdir / "spool", 1, timeout=180)
        crash_id = report_of(entry)["crash_id"]
        done = subprocess.run([*COREEPI, "agent", "--config", str(config), "--once"],
                              capture_output=True, text=True, timeout=300)
        agent_log = (workdir / "spool" / "agent.log").read_text()
        assert done.returncode == 0, done.stdout + done.stderr + agent_log
        assert "delivered 1" in done.stdout and "heartbeats 1" in done.stdout, agent_log
        assert queued(workdir / "spool") == []
        r = httpx.get(f"{url}/api/v1/crashes/{crash_id}",
                      headers={"Authorization": f"Bearer {read_token}"}, timeout=30)
        assert r.status_code == 200, r.text
        body = r.json()
        report = body.get("report", body)
        assert report["signal"]["name"] == "SIGSEGV"
        assert "store_field" in report["signature"]["signature"]
        # the ingest token cannot read
        r = httpx.get(f"{url}/api/v1/crashes/{crash_id}",
                      headers={"Authorization": f"Bearer {ingest_token}"}, timeout=30)
        assert r.status_code == 403
        again = subprocess.run([*COREEPI, "agent", "--config", str(config), "--once"],
                               capture_output=True, text=True, timeout=300)
        assert "delivered 0" in again.stdout
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
