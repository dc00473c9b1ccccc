"""The agent's token: a missing/empty token_file is a config error (one line,
exit 2); a token the server refuses (401/403) is "token refused" on the
terminal, in agent.log and in `agent status`, and is not retried until
token_file holds another token; an unreachable server is said on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from capturekit import kernel_args, queued, run_collect, write_config
from fakeserver import TOKEN, FakeServer
from test_agent_shipping import _free_port

from coreepi.capture.agent import Agent
from coreepi.capture.config import load_config


def _agent(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coreepi", "agent", "--config", str(config),
                           *args], capture_output=True, text=True, timeout=120)


def _config(tmp_path: Path, port: int, token: str | None) -> Path:
    token_file = tmp_path / "token"
    if token is not None:
        token_file.write_text(token)
    return write_config(tmp_path, {"server_url": f"http://127.0.0.1:{port}",
                                   "token_file": str(token_file)})


def test_missing_or_empty_token_file_is_a_config_error(tmp_path: Path) -> None:
    config = _config(tmp_path, _free_port(), None)
    r = _agent(config, "--once")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"coreepi: error: token_file {tmp_path / 'token'}: No such file or " \
                       "directory\n"
    (tmp_path / "token").write_text("\n")
    r = _agent(config, "--once")
    assert r.returncode == 2
    assert r.stderr == f"coreepi: error: token_file {tmp_path / 'token'}: empty (expected " \
                       "the token on its first line)\n"


def test_refused_token_is_said_and_cleared_by_a_good_one(tmp_path: Path) -> None:
    port = _free_port()
    config = _config(tmp_path, port, "wrong-token\n")
    assert run_collect(config, kernel_args(comm="app"), data=b"\x7fELF" + bytes(5000)
                       ).returncode == 0
    spool = tmp_path / "spool"
    with FakeServer(port):
        r = _agent(config, "--once")
        assert r.returncode == 1
        assert "coreepi agent: token refused (token_file " in r.stderr
        assert "HTTP 401" in r.stderr and "server unavailable" not in r.stderr
        log = (spool / "agent.log").read_text()
        assert "token refused" in log and "server unavailable" not in log
        status = json.loads(_agent(config, "status", "--json").stdout)
        assert "token refused: " in _agent(config, "status").stdout
        assert "token refused" in status["token_refused"] and status["queued"] == 1
        (tmp_path / "token").write_text(TOKEN + "\n")
        r = _agent(config, "--once")
        assert r.returncode == 0 and "delivered 1" in r.stdout, r.stderr
        assert queued(spool) == []
        assert json.loads(_agent(config, "status", "--json").stdout)["token_refused"] is None


def test_unreachable_server_is_said_on_stderr(tmp_path: Path) -> None:
    config = _config(tmp_path, _free_port(), TOKEN)
    r = _agent(config, "--once")
    assert r.returncode == 1
    assert "coreepi agent: server unavailable: POST /api/v1/heartbeats: ConnectError" in r.stderr


def test_daemon_waits_for_a_new_token_instead_of_retrying(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("revoked\n")
    config = load_config(write_config(tmp_path, {"server_url": "http://127.0.0.1:9",
                                                 "token_file": str(tmp_path / "token")},
                                      agent={"poll_seconds": 0.05, "heartbeat_seconds": 0.05,
                                             "backoff_initial_seconds": 0.05,
                                             "backoff_max_seconds": 0.05}))
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        ok = request.headers.get("authorization") == "Bearer fresh"
        return httpx.Response(200 if ok else 401, json={} if ok else {"detail": "revoked"})

    agent = Agent(config, transport=httpx.MockTransport(answer))
    runner = threading.Thread(target=agent.run)
    runner.start()
    try:
        time.sleep(1.0)  # 20 poll rounds: an outage backoff of 0.05 s would retry ~20 times
        assert seen == ["Bearer revoked"]
        (tmp_path / "token").write_text("fresh\n")
        deadline = time.monotonic() + 10
        while "Bearer fresh" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        agent.stop.set()
        runner.join(10)
    assert "Bearer fresh" in seen and agent.stats.heartbeats >= 1


def test_refusal_without_a_token_is_not_retried_either(tmp_path: Path) -> None:
    """token_file = "" (no token) on a server that wants one: refused once,
    said once, then quiet until a token_file is configured and restarted."""
    config = load_config(write_config(tmp_path, {"server_url": "http://127.0.0.1:9",
                                                 "token_file": ""},
                                      agent={"poll_seconds": 0.05, "heartbeat_seconds": 0.05,
                                             "backoff_initial_seconds": 0.05,
                                             "backoff_max_seconds": 0.05}))
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", "none"))
        return httpx.Response(401, json={"detail": "missing bearer token"})

    agent = Agent(config, transport=httpx.MockTransport(answer))
    runner = threading.Thread(target=agent.run)
    runner.start()
    time.sleep(0.6)
    agent.stop.set()
    runner.join(10)
    assert seen == ["none"] and agent.refused
    assert "token refused" in (tmp_path / "spool" / "token-refused").read_text()
