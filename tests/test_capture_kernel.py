"""End to end on the real kernel (root): `collect` installed as core_pattern,
a real program crashes, its entry appears in the spool with the right signal,
/proc context and signature. core_pattern is restored whatever happens (in
``finally`` under an flock, as tests/corefactory.py does, plus a finalizer)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from capturekit import report_of, wait_ready, write_config
from corefactory import (
    CORE_PATTERN,
    CoreFactory,
    CrasherUnavailable,
    core_pattern_override,
    kernel_cores_unavailable_reason,
)

from coreepi.capture.collect import SPECIFIERS

CORENAME_MAX = 127


def collector_pattern(config: Path, workdir: Path) -> str:
    """``|<venv python> -m coreepi collect --config C -- %P …`` (absolute paths),
    through a wrapper script when that passes the kernel's 127 bytes."""
    tail = " ".join(["--", *SPECIFIERS])
    direct = f"|{sys.executable} -m coreepi collect --config {config} {tail}"
    if len(direct.encode()) <= CORENAME_MAX:
        return direct
    wrapper = workdir / "c"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m coreepi collect "
                       f"--config {config} \"$@\"\n")
    wrapper.chmod(0o755)
    return f"|{wrapper} {tail}"


@pytest.fixture()
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ce-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _crash(binary: Path, core_soft_limit: int) -> subprocess.CompletedProcess[bytes]:
    def limits() -> None:
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (core_soft_limit, hard))

    return subprocess.run([str(binary), "arg-one", "arg two"], preexec_fn=limits,
                          capture_output=True, timeout=120, env={"APP_VERSION": "9.9",
                                                                  "PATH": "/usr/bin:/bin"})


def test_kernel_pipes_a_real_crash_into_the_spool(
    short_dir: Path, corefactory_session: CoreFactory, request: pytest.FixtureRequest
) -> None:
    if reason := kernel_cores_unavailable_reason():
        pytest.skip(reason)
    try:
        binary, _, _ = corefactory_session.binary("null_deref")
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))
    config = write_config(short_dir, collect={"edge_analysis_seconds": 120,
                                              "edge_analysis_detach": True})
    pattern = collector_pattern(config, short_dir)
    original = CORE_PATTERN.read_bytes()

    def restore() -> None:  # safety net if the with-block's finally could not run
        if pattern.encode() in CORE_PATTERN.read_bytes():
            CORE_PATTERN.write_bytes(original)

    request.addfinalizer(restore)
    try:
        with core_pattern_override(pattern):
            # RLIMIT_CORE 0: the kernel still pipes (core(5)); %c reports the limit
            crashed = _crash(binary, 0)
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))
    assert CORE_PATTERN.read_bytes() == original
    assert crashed.returncode == -11
    [entry] = wait_ready(short_dir / "spool", 1, timeout=180)
    report = report_of(entry)
    log = (short_dir / "spool" / "collect.log").read_text()
    assert report["core"]["stored"], log
    assert report["signal"]["name"] == "SIGSEGV" and report["signal"]["fault_address"] == "0x10"
    assert report["process"]["exe"] == str(binary)
    assert report["process"]["cmdline"] == [str(binary), "arg-one", "arg two"]  # from /proc
    assert report["attributes"]["env.APP_VERSION"] == "9.9"
    assert report["attributes"]["rlimit_core"] == 0
    assert "store_field" in report["signature"]["signature"], report["analysis"]
    assert report["core"]["size_bytes"] > 0 and (entry / "core.zst").exists()
    assert report["host_id"] and report["boot_id"]
    assert os.path.basename(report["process"]["exe"]) == report["process"]["comm"]
