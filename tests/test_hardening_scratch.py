"""Decompression bombs and abrupt deaths (issue 15, holes 3 and 4): scratch lives in one
per-process directory, removed at exit or on SIGTERM, swept by the next process after a
SIGKILL; workers die with their parent. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard
from prockit import alive, bytes_under, children

from coreepi.ingest import scratch
from coreepi.model import limits

MiB = 1 << 20


def zstd_bomb(path: Path, gib: int) -> Path:
    """An ELF-looking core of ``gib`` GiB of zeros in a few hundred KB: the
    64 MiB frame of zeros repeated (concatenated zstd frames are one stream)."""
    cctx = zstandard.ZstdCompressor(level=1)
    head = cctx.compress(b"\x7fELF\x02\x01\x01" + bytes(64 * MiB - 7))
    zeros = cctx.compress(bytes(64 * MiB))
    with open(path, "wb") as fh:
        fh.write(head)
        for _ in range(gib * 16 - 1):
            fh.write(zeros)
    return path


def _env(tmpdir: Path, **extra: str) -> dict[str, str]:
    tmpdir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "COREEPI_MAX_CORE_BYTES"}
    return {**env, "TMPDIR": str(tmpdir), **extra}


def test_inspect_bomb_stops_at_the_limit_with_one_line(tmp_path: Path) -> None:
    bomb = zstd_bomb(tmp_path / "core.zst", 2)
    tmpdir = tmp_path / "t"
    run = subprocess.run([sys.executable, "-m", "coreepi", "inspect", str(bomb)],
                         env=_env(tmpdir, COREEPI_MAX_CORE_BYTES=str(100 * MiB)),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and str(bomb) in run.stderr, run.stderr
    assert f"decompresses to more than {100 * MiB} bytes" in run.stderr
    assert list(tmpdir.iterdir()) == []


def test_sigterm_during_decompression_leaves_no_partial_file(tmp_path: Path) -> None:
    bomb = zstd_bomb(tmp_path / "core.zst", 16)
    tmpdir = tmp_path / "t"
    proc = subprocess.Popen([sys.executable, "-m", "coreepi", "inspect", str(bomb)],
                            env=_env(tmpdir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while bytes_under(tmpdir) < 200 * MiB:
            assert time.monotonic() < deadline and proc.poll() is None, "no decompression seen"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert list(tmpdir.iterdir()) == []  # before: a multi-GB partial core stayed


def test_sigkilled_ingest_leaves_no_worker_and_its_litter_is_swept(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    (fleet / "crashes").mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id\nh1\n")
    zstd_bomb(fleet / "crashes" / "core.1.zst", 8)
    (fleet / "crashes" / "core.1.json").write_text(json.dumps(
        {"host_id": "h1", "captured_at": "2024-01-02T00:00:00Z"}))
    tmpdir = tmp_path / "t"
    argv = [sys.executable, "-m", "coreepi", "ingest", str(fleet), "--data-dir",
            str(tmp_path / "data"), "--jobs", "1"]
    proc = subprocess.Popen(argv, env=_env(tmpdir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while bytes_under(tmpdir) < 100 * MiB:  # the worker is decompressing the bomb
            assert time.monotonic() < deadline and proc.poll() is None, "no worker seen"
            time.sleep(0.05)
        workers = children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(w) for w in workers), "a worker outlived its ingest"
    finally:
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert bytes_under(tmpdir) > 0  # the killed ingest's scratch, until the next start
    again = subprocess.run(argv, env=_env(tmpdir, COREEPI_MAX_CORE_BYTES=str(100 * MiB)),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "decompresses to more than" in again.stderr + again.stdout
    assert list(tmpdir.iterdir()) == []


def test_sweep_removes_only_dead_owners(tmp_path: Path) -> None:
    dead = tmp_path / "coreepi-999999999-1"
    (dead / "job-x").mkdir(parents=True)
    (dead / "job-x" / "core").write_bytes(b"x" * 1000)
    recycled = tmp_path / f"coreepi-{os.getpid()}-1"  # our pid, another start time
    recycled.mkdir()
    other = tmp_path / "coreepi-not-ours"
    other.mkdir()
    mine = scratch.scratch_dir(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])
    assert scratch.sweep(tmp_path) == []  # the live owner's directory stays


def test_server_start_sweeps_a_killed_servers_uploads(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from coreepi.serve import ServeConfig, create_app
    from coreepi.store import DuckDBStore

    stale = tmp_path / "data" / "tmp" / "coreepi-999999999-1"
    stale.mkdir(parents=True)
    (stale / "upload-abc.zst").write_bytes(b"x" * 4096)
    with DuckDBStore(tmp_path / "data") as store:
        with TestClient(create_app(store, ServeConfig(analysis_jobs=0))):
            assert not stale.exists()


def test_max_core_bytes_default_fits_the_scratch_disk(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COREEPI_MAX_CORE_BYTES", raising=False)
    free = __import__("shutil").disk_usage(tmp_path).free
    expected = max(0, min(32 << 30, free - (2 << 30)))
    assert abs(limits.max_core_bytes(tmp_path) - expected) < 64 * MiB
    assert limits.max_core_bytes(None) == 32 << 30
    monkeypatch.setenv("COREEPI_MAX_CORE_BYTES", "12345")
    assert limits.max_core_bytes(tmp_path) == 12345
