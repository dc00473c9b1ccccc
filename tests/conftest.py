"""Shared fixtures. The crasher corpus (real cores of real C/C++ crashes) lives
in :mod:`corefactory`; here it becomes session-scoped fixtures."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coreepi.model.report import CrashReport

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corefactory import CORE_PATTERN, CoreFactory, Crash, CrasherUnavailable


@pytest.fixture(scope="session")
def corefactory_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoreFactory]:
    """Builds the crashers and makes their cores, once per session, in a temp dir."""
    if platform.machine() != "x86_64":
        pytest.skip(
            f"the crasher corpus is x86-64 specific (ud2, rip/rsp); this is {platform.machine()}"
        )
    root = tmp_path_factory.mktemp("crashers")
    try:
        original_pattern = CORE_PATTERN.read_bytes()
    except OSError:
        original_pattern = None
    factory = CoreFactory(root)
    yield factory
    # Safety net: core_pattern_override() always restores in `finally`; if a
    # pattern of ours is still there anyway (killed mid-run?), put back the one
    # found at session start.
    if original_pattern is not None:
        try:
            now = CORE_PATTERN.read_bytes()
        except OSError:
            return
        if now != original_pattern and str(root).encode() in now:
            CORE_PATTERN.write_bytes(original_pattern)


@pytest.fixture(scope="session")
def get_crash(corefactory_session: CoreFactory) -> Callable[[str], Crash]:
    """``get_crash("null_deref")`` -> :class:`corefactory.Crash`; skips if tools are missing."""

    def get(name: str) -> Crash:
        try:
            return corefactory_session.crash(name)
        except CrasherUnavailable as exc:
            pytest.skip(str(exc))

    return get


@pytest.fixture(scope="session")
def parsed_report(get_crash: Callable[[str], Crash]) -> Callable[[str], CrashReport]:
    """``parsed_report("null_deref")`` -> the CrashReport of ``parse_core(core, exe=binary)``,
    parsed once per session."""
    from coreepi.parse.elf.core import parse_core

    cache: dict[str, CrashReport] = {}

    def get(name: str) -> CrashReport:
        if name not in cache:
            crash = get_crash(name)
            cache[name] = parse_core(crash.core, exe=crash.binary)
        return cache[name]

    return get


# --------------------------------------------------------------------------
# real services: a throwaway PostgreSQL cluster


@pytest.fixture(scope="session")
def pg_cluster(request: pytest.FixtureRequest) -> object:
    """One PostgreSQL server for the session (:class:`pgcluster.PgCluster`),
    stopped and removed at the end (finalizer; atexit if the session dies).
    Skipped with the reason when PostgreSQL is not installed and we are not
    root (as root, scripts/setup.sh installs it, so its absence fails)."""
    import os

    from pgcluster import PgCluster, PgUnavailable

    try:
        cluster = PgCluster()
    except PgUnavailable as exc:
        if os.geteuid() != 0:
            pytest.skip(f"PostgreSQL tests need a server: {exc}")
        raise
    request.addfinalizer(cluster.stop)
    return cluster


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def pg_url(pg_cluster: object) -> str:
    """The URL of a new empty database on the session's cluster."""
    return pg_cluster.create_database(f"t{next(_databases)}")  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# real services: an S3-compatible HTTP server (moto's standalone server)


@pytest.fixture(scope="session")
def s3_server(request: pytest.FixtureRequest) -> str:
    """moto's S3 server on 127.0.0.1 (its own HTTP server thread, spoken to
    over a socket like any S3 endpoint); stopped at the end. Returns its URL."""
    from moto.server import ThreadedMotoServer
    from servekit import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    request.addfinalizer(server.stop)
    return f"http://127.0.0.1:{port}"


_buckets = iter(range(1, 1_000_000))


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new empty bucket; the AWS_* environment points at the server.
    Returns ``s3://bucket/cores``."""
    import httpx

    name = f"bucket{next(_buckets)}"
    httpx.put(f"{s3_server}/{name}", timeout=10).raise_for_status()
    for key, value in {"AWS_ENDPOINT_URL": s3_server, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    return f"s3://{name}/cores"
