"""Helpers for the server tests: reports from real cores, zstd bodies, a
snapshot of everything the server can write (rows and blob files), and pages
of an in-process app once its findings are computed."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import zstandard

from coreepi.model.report import CrashReport
from coreepi.store import DuckDBStore

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def pages_when_ready(store: DuckDBStore, paths: list[str]) -> list[tuple[int, str]]:
    """(status, body) of each of ``paths`` from an in-process app on ``store`` (a read
    token), fetched once its first findings are computed (at most 60 s)."""
    from fastapi.testclient import TestClient

    from coreepi.serve import ServeConfig, create_app, create_token

    _, token = create_token(store, ["read"])
    app = create_app(store, ServeConfig(findings_debounce_seconds=0.05))
    try:
        client = TestClient(app)
        headers = {"authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 60
        while not client.get("/index.json", headers=headers).json().get("ready"):
            assert time.monotonic() < deadline, "the findings were never computed"
            time.sleep(0.1)
        return [(r.status_code, r.text) for r in (client.get(p, headers=headers) for p in paths)]
    finally:
        app.state.findings.close()


def edge_report(full: CrashReport, host_id: str = "node-1", minutes: int = 1,
                analysed: bool = False) -> CrashReport:
    """What a node agent sends: identity, signal, process, host, attributes;
    with ``analysed=False`` no threads/frames/phenotypes/signature (left to
    the server)."""
    update: dict[str, Any] = {
        "host_id": host_id, "captured_at": T0 + timedelta(minutes=minutes),
        "boot_id": "boot-1", "attributes": {"app_version": "1.2.3", "deployment": "canary"},
    }
    if not analysed:
        update |= {"threads": [], "phenotypes": [], "signature": None, "modules": [],
                   "memory_map": []}
    return CrashReport.model_validate({**full.model_dump(), **update})


def zstd_bytes(path: Path) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(path.read_bytes())


def snapshot(store_or_dir: DuckDBStore | Path) -> dict[str, Any]:
    """Rows per table (API tables included) and the blob files on disk."""
    own = not isinstance(store_or_dir, DuckDBStore)
    store = DuckDBStore(store_or_dir, read_only=True) if own else store_or_dir
    try:
        counts = dict(store.counts())
        for table in ("api_tokens", "crash_receipts"):
            row = store._query(f"SELECT count(*) FROM {table}").fetchone()
            counts[table] = int(row[0]) if row else 0
        reports = {r[0]: r[1] for r in store._query(
            "SELECT crash_id, report FROM crashes").fetchall()}
        blobs = sorted(p.name for p in store.blobs.root.rglob("*")
                       if p.is_file() and not p.name.startswith("."))
    finally:
        if own:
            store.close()
    return {"counts": counts, "reports": reports, "blobs": blobs}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_jobs(counts: Any, timeout: float = 180.0) -> dict[str, int]:
    """Poll ``counts()`` (the store's ``job_counts``, or a GET of
    ``/api/v1/jobs``'s counts) until no analysis job is queued or running;
    returns the last counts. AssertionError after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        got = counts()
        if got["queued"] == 0 and got["running"] == 0:
            return dict(got)
        assert time.monotonic() < deadline, f"analysis jobs still pending: {got}"
        time.sleep(0.2)


class ServeProcess:
    """``coreepi serve ARGS`` as a child process on 127.0.0.1 (``port``, else a
    free one; environment ``env``, else this one's), output appended to
    ``log``; started and healthy when constructed. :meth:`kill`
    (this test's own child, by pid) stops it."""

    def __init__(self, args: list[str], log: Path, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        import subprocess
        import sys
        import time

        import httpx

        self.tmp = log.parent
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "a+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coreepi", "serve", *args, "--port", str(self.port),
             "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"server did not start:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def kill(self, sig: int = 9) -> None:
        import os

        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=60)
