"""`coreepi agent` against a fake server on 127.0.0.1 (tests/fakeserver.py):
server down → spooled; up → delivered once; SIGKILL mid-upload → restarted
agent delivers once; heartbeats tile time; refusals are quarantined."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard
from capturekit import kernel_args, queued, report_of, run_collect, write_config
from fakeserver import TOKEN, FakeServer

from coreepi.capture.agent import Agent
from coreepi.capture.config import load_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _setup(tmp_path: Path, port: int, **tables: dict[str, object]) -> Path:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return write_config(tmp_path, {"server_url": f"http://127.0.0.1:{port}",
                                   "token_file": str(token)}, **tables)


def _spool_crashes(config: Path, n: int, size: int = 200_000) -> list[bytes]:
    cores = []
    for i in range(n):
        data = b"\x7fELF" + os.urandom(size // 2) + bytes(size // 2)
        done = run_collect(config, kernel_args(when=1_700_000_000 + i, comm=f"app{i}"), data=data)
        assert done.returncode == 0
        cores.append(data)
    return cores


def _agent_once(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coreepi", "agent", "--config", str(config),
                           "--once"], capture_output=True, text=True, timeout=120)


def _plain(blob: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompressobj().decompress(blob)


def test_server_down_then_up_delivers_each_crash_once(tmp_path: Path) -> None:
    port = _free_port()
    config = _setup(tmp_path, port)
    cores = _spool_crashes(config, 3)
    spool = tmp_path / "spool"
    down = _agent_once(config)  # nobody listens on the port
    assert down.returncode == 1, down.stdout + down.stderr
    assert len(queued(spool)) == 3
    assert "server unavailable" in (spool / "agent.log").read_text()
    with FakeServer(port) as server:
        up = _agent_once(config)
        assert up.returncode == 0, up.stderr
        assert "delivered 3" in up.stdout
        assert queued(spool) == []
        assert sorted(server.created.values()) == [1, 1, 1]
        assert sorted(_plain(c) for c in server.cores.values()) == sorted(cores)
        again = _agent_once(config)
        assert "delivered 0" in again.stdout
        assert sum(server.posts.values()) == 3  # nothing sent twice
        for crash_id, body in server.reports.items():
            assert json.loads(body)["crash_id"] == crash_id


def test_sigkill_mid_upload_then_restart_delivers_once(tmp_path: Path) -> None:
    port = _free_port()
    config = _setup(tmp_path, port)
    _spool_crashes(config, 2, size=8 << 20)  # random half: ~4 MiB compressed each
    spool = tmp_path / "spool"
    argv = [sys.executable, "-m", "coreepi", "agent", "--config", str(config)]
    with FakeServer(port, put_delay_per_mib=0.5) as server:
        agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert server.put_started.wait(60), "agent never started an upload"
            time.sleep(0.3)
            agent.send_signal(signal.SIGKILL)  # mid-upload: the server is reading slowly
            agent.wait(10)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        assert len(queued(spool)) == 2
        server.put_delay_per_mib = 0.0
        agent = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while queued(spool) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(30) == 0
        assert queued(spool) == []
        assert len(server.created) == 2 and set(server.created.values()) == {1}
        assert set(server.cores) == set(server.created)
        assert sum(server.puts_started.values()) > len(server.cores)  # one upload was cut
        for crash_id, blob in server.cores.items():
            report = json.loads(server.reports[crash_id])
            assert len(_plain(blob)) == report["core"]["size_bytes"]


def test_heartbeats_tile_time_and_send_facts_when_changed(tmp_path: Path) -> None:
    with FakeServer() as server:
        config = load_config(_setup(tmp_path, server.port))
        Agent(config).run_once()
        Agent(config).run_once()
    first, second = server.heartbeats
    assert first["facts"] is not None and first["facts"]["kernel"] == os.uname().release
    assert second["facts"] is None  # unchanged since the last acknowledged heartbeat
    assert second["start"] == first["end"] and first["start"] <= first["end"]
    assert first["host_id"] and first["boot_id"]
    load = first["load"]
    assert load["uptime_seconds"] > 0 and load["loadavg_1m"] >= 0
    assert set(load) == {"loadavg_1m", "memory_pressure_some_avg10", "uptime_seconds"}


def test_refusals_are_quarantined_and_bad_token_retried(tmp_path: Path) -> None:
    with FakeServer() as server:
        config_path = _setup(tmp_path, server.port)
        _spool_crashes(config_path, 2)
        spool = tmp_path / "spool"
        config = load_config(config_path)
        stats = Agent(config, token="wrong").run_once()
        assert stats.delivered == 0 and stats.failures >= 1
        assert len(queued(spool)) == 2  # 401 is retried later, not dropped
        doomed = report_of(queued(spool)[0])["crash_id"]
        server.refuse[doomed] = 409
        stats = Agent(config).run_once()
        assert stats.delivered == 1 and stats.quarantined == 1
        refused = spool / "quarantine" / doomed
        assert "409" in (refused / "REFUSED").read_text()
        assert queued(spool) == []


def test_core_put_404_reposts_report(tmp_path: Path) -> None:
    with FakeServer() as server:
        config_path = _setup(tmp_path, server.port)
        _spool_crashes(config_path, 1)
        [entry] = queued(tmp_path / "spool")
        (entry / ".reported").write_bytes(b"")  # the agent thinks the server has it; it has not
        stats = Agent(load_config(config_path)).run_once()
        assert stats.delivered == 1
        [crash_id] = server.cores
        assert server.created[crash_id] == 1


@pytest.mark.parametrize("age,shipped", [(0.0, False), (10_000.0, True)])
def test_pending_edge_analysis_waits_until_stale(tmp_path: Path, age: float, shipped: bool) -> None:
    with FakeServer() as server:
        config_path = _setup(tmp_path, server.port, collect={"edge_analysis_seconds": 30})
        _spool_crashes(config_path, 1)
        [entry] = queued(tmp_path / "spool")
        marker = entry / ".analysis-pending"
        marker.write_bytes(b"")
        stamp = time.time() - age
        os.utime(marker, (stamp, stamp))
        Agent(load_config(config_path)).run_once()
        assert bool(server.reports) is shipped


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_with_jitter(tmp_path: Path, status: int) -> None:
    """An overloaded server answers 429/503 with Retry-After: the agent waits
    at least that long, at most 20 % more (jitter), and then delivers."""
    with FakeServer() as server:
        config = _setup(tmp_path, server.port)
        _spool_crashes(config, 1)
        server.shedding = (status, "40")
        agent = Agent(load_config(config))
        try:
            agent.run_once()
            wait = agent._next_try - time.monotonic()
            assert 38 < wait <= 48.1, wait  # 40 s .. 40 s + 20 %, less the time spent here
            assert agent.stats.failures == 2  # the crash and the heartbeat
            assert server.posts == {}
            server.shedding = None
            agent.run_once()
            assert agent.stats.delivered == 1
        finally:
            agent.client.close()


def test_retry_after_forms() -> None:
    from coreepi.capture.agent import retry_after_seconds

    assert retry_after_seconds("120") == 120.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None
