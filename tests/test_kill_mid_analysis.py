"""A real ``coreepi serve`` and a real ``coreepi ingest`` SIGKILLed while a core is being
analysed (issue 15, hole 4): the analysis worker dies with its parent (no orphan), the
next start removes what the killed process left, and every crash is analysed exactly
once. Real cores (fleetfactory), real processes on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from clikit import cli, write_cli_fleet
from fleetfactory import CoreSet, coreset  # noqa: F401
from prockit import alive, bytes_under, children
from servekit import ServeProcess, edge_report, wait_for_jobs, zstd_bytes

from coreepi.ingest.artifacts import inspect_file
from coreepi.serve.tokens import create_token
from coreepi.store import DuckDBStore

CENTRAL = "analysed centrally by coreepi"


def _first_child(pid: int, timeout: float = 120.0) -> list[int]:
    """The children of ``pid`` as soon as it has one (polled every 10 ms)."""
    deadline = time.monotonic() + timeout
    while not (kids := children(pid)):
        assert time.monotonic() < deadline, "no analysis worker started"
        time.sleep(0.01)
    return kids


def _assert_died(pids: list[int]) -> None:
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not any(alive(p) for p in pids), "an analysis worker outlived its parent"
    finally:
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_dead_holder_is_told_from_a_live_one() -> None:
    """dead_holders on real processes: a live one, the same one SIGKILLed, a
    reused pid (ours, with another start time), another host's worker."""
    import socket
    import subprocess

    from coreepi.serve.analysis import dead_holders, worker_name

    me = worker_name()
    ns = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    child = subprocess.Popen(["sleep", "60"])
    try:
        start = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        other = f"{socket.gethostname()}:{child.pid}.{start}.{ns}:1"
        assert dead_holders({me, other}) == []
    finally:
        child.kill()
        child.wait()
    reused = me.replace(f":{os.getpid()}.", f":{os.getpid()}.1", 1)  # our pid, another start
    elsewhere = "another-host-xyz:1.1.1:1"
    other_ns = f"{socket.gethostname()}:{child.pid}.{start}.1:1"  # a container's pid
    assert dead_holders({me, other, reused, elsewhere, other_ns, "w1"}) == sorted([other, reused])


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
def test_server_killed_mid_analysis(tmp_path: Path, coreset: CoreSet,  # noqa: F811
                                    monkeypatch: pytest.MonkeyPatch, sig: int) -> None:
    """SIGKILL: the worker dies with the server, the next start sweeps the litter
    and takes the job over (once its heartbeat is stale). SIGTERM (a stop): the
    server removes its scratch, and the cut analysis is not taken for an
    unreadable core (before: ``core_status`` unreadable, never analysed again)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    data = tmp_path / "data"
    with DuckDBStore(data) as store:
        _, token = create_token(store, ["ingest", "read"], "t")
    headers = {"Authorization": f"Bearer {token}"}
    full = inspect_file(coreset.cores[0])[0]
    sent = edge_report(full)  # to be analysed by the server
    args = ["--data-dir", str(data), "--jobs", "1"]
    server = ServeProcess(args, tmp_path / "serve1.log")
    try:
        r = httpx.post(f"{server.url}/api/v1/crashes", content=sent.model_dump_json(),
                       headers={**headers, "content-type": "application/json"}, timeout=60)
        assert r.status_code == 201, r.text
        r = httpx.put(f"{server.url}/api/v1/crashes/{sent.crash_id}/core",
                      content=zstd_bytes(coreset.cores[0]),
                      headers={**headers, "content-type": "application/zstd"}, timeout=60)
        assert r.status_code == 201, r.text
        workers = _first_child(server.proc.pid)
    finally:
        server.kill(sig)
    _assert_died(workers)
    if sig == signal.SIGKILL:
        assert bytes_under(data / "tmp") > 0  # the decompressed core, until the next start
    else:
        assert bytes_under(data / "tmp") == 0

    server = ServeProcess(args, tmp_path / "serve2.log")
    try:
        mine = f"coreepi-{server.proc.pid}-"
        assert [p.name for p in (data / "tmp").iterdir() if not p.name.startswith(mine)] == []

        def counts() -> dict[str, int]:
            return httpx.get(f"{server.url}/api/v1/jobs", headers=headers,
                             timeout=30).json()["counts"]

        # a killed server's job is taken over at once, its process being gone (before:
        # once its heartbeat was 60 s stale); the analysis itself takes seconds
        started = time.monotonic()
        final = wait_for_jobs(counts, timeout=300)
        took = time.monotonic() - started
        report = httpx.get(f"{server.url}/api/v1/crashes/{sent.crash_id}", headers=headers,
                           timeout=30).json()
        listed = httpx.get(f"{server.url}/api/v1/crashes", headers=headers, timeout=30).json()
    finally:
        server.kill(signal.SIGTERM)
    assert final["done"] == 1 and final["dead"] == 0, final
    assert took < 45, f"the job waited {took:.0f} s for the dead server's heartbeat to go stale"
    assert [c["crash_id"] for c in listed["crashes"]] == [sent.crash_id]
    warnings = report["analysis"]["warnings"]
    assert not any("unreadable" in w for w in warnings), warnings
    assert sum(w.startswith(CENTRAL) for w in warnings) == 1
    assert (report["signature"] or {}).get("signature") == full.signature.signature
    assert bytes_under(data / "tmp") == 0 and list((tmp_path / "t").iterdir()) == []


def test_ingest_sigkilled_mid_analysis(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    made = write_cli_fleet(tmp_path, coreset, count=4)
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    env = {"TMPDIR": str(tmpdir)}
    argv = ["ingest", str(made.fleet), "--data-dir", str(made.data), "--jobs", "1"]
    import subprocess
    import sys

    base = {k: v for k, v in os.environ.items() if not k.startswith("COREEPI_")}
    proc = subprocess.Popen([sys.executable, "-m", "coreepi", *argv], env=base | env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers = _first_child(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    _assert_died(workers)

    again = cli(*argv, env=env)
    assert again.returncode == 0, again.stderr
    assert list(tmpdir.iterdir()) == []  # the killed ingest's scratch was swept
    with DuckDBStore(made.data, read_only=True) as store:
        rows = store._query("SELECT crash_id, signature FROM crashes").fetchall()
    assert len(rows) == len(made.cores) == 4  # each crash once: none lost, none twice
    assert all(signature for _, signature in rows), rows
