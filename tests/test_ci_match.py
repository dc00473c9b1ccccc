"""``coreepi ci run --server``: CI crashes matched against a real ``coreepi
serve`` on 127.0.0.1, seeded through its ingest API with a small fleet
(three crashes of the suite's SIGSEGV signature on two hosts, versions 3.1.0
and 3.1.2, one crash of an unrelated signature, exposure heartbeats)."""

from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from cikit import SEGV_SIGNATURE, Suite, build_suite, coreepi
from servekit import free_port

from coreepi.ingest.artifacts import inspect_file
from coreepi.model.report import CrashReport, Signature

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the suite's expectations are x86-64 ones")
T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _seed(url: str, token: str, report: CrashReport) -> None:
    headers = {"authorization": f"Bearer {token}"}
    fleet = [("node-1", "3.1.0", 1), ("node-2", "3.1.2", 2), ("node-1", "3.1.2", 3)]
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        for host in ("node-1", "node-2", "node-3"):
            hb = {"host_id": host, "boot_id": "b", "start": T0.isoformat(),
                  "end": (T0 + timedelta(days=2)).isoformat(), "facts": {"kernel": "6.1.0"}}
            assert c.post("/api/v1/heartbeats", json=hb).status_code == 201
        for n, (host, version, hour) in enumerate(fleet):
            sent = report.model_copy(update={
                "crash_id": f"{n:032x}", "host_id": host, "boot_id": "b",
                "captured_at": T0 + timedelta(hours=hour),
                "attributes": {"app_version": version}})
            r = c.post("/api/v1/crashes", content=sent.model_dump_json(),
                       headers={"content-type": "application/json"})
            assert r.status_code == 201, r.text
        other = report.model_copy(update={
            "crash_id": "f" * 32, "host_id": "node-3", "boot_id": "b",
            "captured_at": T0 + timedelta(hours=5), "attributes": {"app_version": "3.1.2"},
            "signature": Signature(signature="some_other | path")})
        assert c.post("/api/v1/crashes", content=other.model_dump_json(),
                      headers={"content-type": "application/json"}).status_code == 201


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return build_suite(tmp_path_factory.mktemp("match-suite"))


@pytest.fixture(scope="module")
def server(suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(url, read token) of a seeded server."""
    tmp = tmp_path_factory.mktemp("match-server")
    made = tmp / "made"
    r = coreepi("ci", "run", "--capture", "ptrace", "--cores-dir", str(made), "--",
                str(suite.root / "segv_child"), cwd=tmp)
    (core,) = made.iterdir()
    (report,) = inspect_file(core)
    assert report.signature is not None and report.signature.signature == SEGV_SIGNATURE, r
    data = tmp / "data"
    assert coreepi("store", "init", "--data-dir", str(data), cwd=tmp).returncode == 0
    tokens = {}
    for scope in ("ingest", "read"):
        t = coreepi("token", "create", "--scope", scope, "--name", scope, "--data-dir",
                    str(data), cwd=tmp)
        assert t.returncode == 0, t.stderr
        tokens[scope] = t.stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "coreepi", "serve", "--data-dir", str(data),
                             "--port", str(port), "--log-level", "warning"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp / "serve.log").read_text()
            time.sleep(0.2)
        _seed(url, tokens["ingest"], report)
        yield url, tokens["read"]
    finally:
        os.kill(proc.pid, signal.SIGTERM)  # our own server, by pid
        proc.wait(timeout=60)
        log.close()


def test_known_and_new_signatures(suite: Suite, server: tuple[str, str], tmp_path: Path
                                  ) -> None:
    url, token = server
    r = coreepi("ci", "run", "--capture", "ptrace", "--server", url, "--fail-on", "new",
                "--markdown", str(tmp_path / "pr.md"), "--junit-xml", str(tmp_path / "j.xml"),
                "--", "sh", str(suite.script), cwd=tmp_path, env={"COREEPI_TOKEN": token})
    assert r.returncode == 1, r.stderr  # the thread abort is new to production
    md = (tmp_path / "pr.md").read_text()
    assert ": 3 crashes on 2 hosts since 3.1.0" in md
    # the findings-based groups API gives the group's id, verdict and UI page
    assert re.search(r"\[group ([0-9a-f]{16}): 3 crashes on 2 hosts since 3\.1\.0, verdict "
                     r"[a-z-]+\]\(" + re.escape(url) + r"/groups/\1\)", md), md
    assert "new: never seen in production" in md
    assert "1 new to production" in md
    assert "; production: " in (tmp_path / "j.xml").read_text()


def test_known_crash_passes_fail_on_new(suite: Suite, server: tuple[str, str],
                                        tmp_path: Path) -> None:
    url, token = server
    cmd = ["--", "sh", "-c", f"{suite.root / 'segv_child'}; exit 0"]
    r = coreepi("ci", "run", "--capture", "ptrace", "--server", url, "--fail-on", "new", *cmd,
                cwd=tmp_path, env={"COREEPI_TOKEN": token})
    assert r.returncode == 0, r.stderr
    assert "0 new to production" in r.stderr
    r = coreepi("ci", "run", "--capture", "ptrace", "--server", url, *cmd, cwd=tmp_path,
                env={"COREEPI_TOKEN": token})
    assert r.returncode == 1  # --fail-on any (the default)


def test_refused_token_is_reported_and_counts_as_new(suite: Suite, server: tuple[str, str],
                                                     tmp_path: Path) -> None:
    url, _ = server
    r = coreepi("ci", "run", "--capture", "ptrace", "--server", url, "--fail-on", "new", "--",
                "sh", "-c", f"{suite.root / 'segv_child'}; exit 0", cwd=tmp_path,
                env={"COREEPI_TOKEN": "not-a-token"})
    assert r.returncode == 1
    assert "no production match" in r.stderr and "token refused (401)" in r.stderr
