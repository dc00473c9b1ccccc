"""The analysis sandbox's confinement, on real children: no network (an
analysis child cannot reach a socket listening on 127.0.0.1), and a core
that cannot be mapped within the address-space limit (ENOMEM under a real
RLIMIT_AS) is a retryable ``memory-limit``, not an ``unreadable-core``."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401

from coreepi.ingest.sandbox import Child, Sandbox, SandboxLimits, network_isolation

# The real worker (limits, death with its parent, network isolation, the
# JSON result), with the analysis of the artifact replaced by an attempt to
# connect to the port named in the artifact's place.
PROBE = r"""
import json, socket, sys
import coreepi.ingest.worker as w

def connect(port, _dirs):
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        return json.dumps({"ok": True, "reports": [], "connect": exc.errno})
    return json.dumps({"ok": True, "reports": [], "connect": 0})

w._analyse = connect
sys.exit(w.main(sys.argv[1:]))
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0)
        yield server


def _probe_launcher(argv: list[str], env: dict[str, str]) -> Child:
    # the sandbox's own command line, run by PROBE instead of `-m coreepi.ingest.worker`
    return subprocess.Popen([sys.executable, "-c", PROBE, *argv[3:]], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)


def _accepted(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def test_an_analysis_child_cannot_reach_127_0_0_1(listener: socket.socket) -> None:
    why = network_isolation()
    if why:
        pytest.skip(f"this kernel refuses the namespaces: {why}")
    port = str(listener.getsockname()[1])
    # the control: the same connect from an unconfined process gets through
    socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
    assert _accepted(listener)
    sandbox = Sandbox(SandboxLimits(60, 1024), launcher=_probe_launcher)
    result = sandbox.run(Path(port))
    assert (result.ok, result.network) == (True, ""), result.error
    assert not _accepted(listener)
    assert "no network (own network namespace)" in sandbox.capabilities()


def test_the_connect_error_is_network_unreachable(listener: socket.socket) -> None:
    if network_isolation():
        pytest.skip("no network namespaces here")
    port = listener.getsockname()[1]
    code = (f"import socket; from coreepi.ingest.worker import isolate_network as i\n"
            f"assert i() == ''\n"
            f"try:\n socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            f"except OSError as e: print(e.errno)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == errno.ENETUNREACH
    assert not _accepted(listener)


def test_refused_namespaces_are_said_and_logged(listener: socket.socket,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """A child the kernel refuses the namespaces (here: without CAP_SYS_ADMIN,
    and with a second thread, so unshare(CLONE_NEWUSER) is EINVAL) analyses
    with the network: its result says why, the sandbox logs it once, the
    connect gets through."""
    refused = PROBE.replace("w._analyse = connect", (
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "w._analyse = connect"))
    # root keeps CAP_SYS_ADMIN (unshare(CLONE_NEWNET) would succeed): drop it
    # from the bounding set, so the exec'd Python has it in no set
    drop = (["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin"]
            if os.getuid() == 0 else [])

    def launch(argv: list[str], env: dict[str, str]) -> Child:
        return subprocess.Popen([*drop, sys.executable, "-c", refused, *argv[3:]],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=env)

    sandbox = Sandbox(SandboxLimits(60, 1024), launcher=launch)
    port = Path(str(listener.getsockname()[1]))
    with caplog.at_level("WARNING", logger="coreepi.sandbox"):
        first, second = sandbox.run(port), sandbox.run(port)
    why = "unshare(CLONE_NEWUSER|CLONE_NEWNET): Invalid argument"
    assert (first.ok, first.network, second.network) == (True, why, why), first.error
    assert _accepted(listener)
    assert [r.getMessage() for r in caplog.records] == [
        f"analysis children run with the network: {why}"]


def _big_core(core: Path, tmp: Path) -> Path:
    """The core followed by a 2 GiB hole (a sparse file: no disk used): a
    mapping of it cannot fit under a 1 GiB address-space limit."""
    big = tmp / "big.core"
    big.write_bytes(core.read_bytes())
    os.truncate(big, big.stat().st_size + (2 << 30))
    return big


def test_enomem_mapping_the_core_is_a_retryable_memory_limit(
        coreset: CoreSet, tmp_path: Path) -> None:  # noqa: F811
    big = _big_core(coreset.cores[0], tmp_path)
    result = Sandbox(SandboxLimits(120, 1024)).run(big)
    assert (result.ok, result.category, result.retryable) == (False, "memory-limit", True)
    assert result.error.startswith("analysis exceeded the memory limit (1024 MiB): cannot map "
                                   "the core"), result.error
    assert "Cannot allocate memory" in result.error
    # the same bytes under a limit they fit in: analysed (the hole is past the core's data)
    roomy = Sandbox(SandboxLimits(120, 8192)).run(big)
    assert roomy.ok or roomy.category == "unreadable-core", roomy.error
    assert not roomy.retryable
