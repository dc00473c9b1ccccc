"""Load shedding on the write path: beyond ``max_write_backlog`` writes waiting
for their group commit, the server answers 503 + Retry-After at once and
stores nothing of the refused request; what it accepted is committed.

The store is held busy for real (a transaction of the DuckDB store kept open
in a thread: the group commit's batch waits on the writer lock), so the
backlog is the one a slow disk or a PostgreSQL failover would build."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from coreepi.model.limits import LIMITS, MAX_WRITE_BACKLOG, max_write_backlog
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.store import DuckDBStore

LIMIT = 4


def _heartbeat(i: int) -> dict[str, object]:
    return {"host_id": f"node-{i}", "boot_id": "b1", "start": "2024-03-01T00:00:00Z",
            "end": "2024-03-01T00:05:00Z"}


def _until(what: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_backlog_beyond_the_limit_is_refused_with_retry_after(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "data")
    token = create_token(store, ["ingest"], "agents")[1]
    app = create_app(store, ServeConfig(max_write_backlog=LIMIT, analysis_jobs=0))
    auth = {"authorization": f"Bearer {token}"}
    commits = app.state.heartbeats
    release = threading.Event()
    holding = threading.Event()

    def hold_the_writer() -> None:
        with store.transaction():
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_writer)
    holder.start()
    try:
        holding.wait(10)
        with TestClient(app) as client, ThreadPoolExecutor(LIMIT + 3) as pool:
            def post(i: int) -> httpx.Response:
                return client.post("/api/v1/heartbeats", json=_heartbeat(i), headers=auth)

            first = pool.submit(post, 0)  # taken as a batch, then blocked on the writer
            _until(lambda: commits._running and commits.backlog == 0)
            waiting = [pool.submit(post, i) for i in range(1, LIMIT + 1)]
            _until(lambda: commits.backlog == LIMIT)
            refused: list[Future[httpx.Response]] = [pool.submit(post, i) for i in (98, 99)]
            answers = [f.result(30) for f in refused]  # answered while the store is still busy
            assert not first.done() and not any(f.done() for f in waiting)
            release.set()
            accepted = [f.result(60) for f in (first, *waiting)]
            metrics = client.get("/metrics").text
    finally:
        release.set()
        holder.join(30)
    for r in answers:
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "1"  # nothing written yet: no rate, the floor
        assert r.json()["reason"] == "overloaded"
        assert f"limit max_write_backlog={LIMIT}" in r.json()["detail"]
    assert [r.status_code for r in accepted] == [201] * (LIMIT + 1)
    hosts = sorted(store.exposure_frame()["host_id"])
    assert hosts == sorted(f"node-{i}" for i in range(LIMIT + 1))  # the refused ones: not stored
    assert 'coreepi_requests_rejected_total{reason="overloaded"} 2.0' in metrics.splitlines()
    store.close()


def test_write_backlog_limit_is_named_and_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [x.env for x in LIMITS if x.name == "max_write_backlog"] == ["COREEPI_MAX_WRITE_BACKLOG"]
    monkeypatch.delenv("COREEPI_MAX_WRITE_BACKLOG", raising=False)
    assert max_write_backlog() == MAX_WRITE_BACKLOG == ServeConfig().max_write_backlog
    monkeypatch.setenv("COREEPI_MAX_WRITE_BACKLOG", "64")
    assert ServeConfig().max_write_backlog == 64
    monkeypatch.setenv("COREEPI_MAX_WRITE_BACKLOG", "lots")
    with pytest.raises(ValueError, match="'lots' is not a positive number of writes"):
        max_write_backlog()


def test_a_store_that_cannot_write_answers_503_with_retry_after(tmp_path: Path) -> None:
    """A StoreError (PostgreSQL unreachable past the pool's wait; here a store
    opened read-only) is a 503 + Retry-After the agent honours, not a 500."""
    writable = DuckDBStore(tmp_path / "data")
    token = create_token(writable, ["ingest"], "agents")[1]
    writable.close()
    store = DuckDBStore(tmp_path / "data", read_only=True)
    app = create_app(store, ServeConfig(analysis_jobs=0, token_cache_seconds=0))
    with TestClient(app) as client:
        r = client.post("/api/v1/heartbeats", json=_heartbeat(1),
                        headers={"authorization": f"Bearer {token}"})
    store.close()
    assert r.status_code == 503, r.text
    assert r.json()["reason"] == "store-unavailable" and r.headers["retry-after"] == "5"
    assert "nothing stored" in r.json()["detail"] and "read-only" in r.json()["detail"]


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker", "--once"]])
def test_a_bad_backlog_setting_is_one_line_and_exit_2(command: list[str], tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "coreepi", *command, "--data-dir", str(tmp_path / "d")],
        env=dict(os.environ, COREEPI_MAX_WRITE_BACKLOG="lots"), capture_output=True, text=True,
        timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr == ("coreepi: error: COREEPI_MAX_WRITE_BACKLOG: 'lots' is not a positive "
                           "number of writes\n")
    assert not (tmp_path / "d").exists()
