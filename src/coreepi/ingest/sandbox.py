"""The one sandbox runner: an artifact analysed in a child process, with limits.

A hostile or broken artifact (a core that makes the unwinder loop, a
decompression bomb, a log that trips a parser bug) may cost one child
process, never its caller. Every analysis of an artifact outside the
``coreepi inspect`` process goes through :class:`Sandbox`: ``coreepi
ingest`` (:mod:`coreepi.ingest.run`), the server's analysis of received
cores (:mod:`coreepi.serve.analysis`, queued by :mod:`coreepi.ingest.intake`)
and the node's edge analysis (:mod:`coreepi.capture.edge`).

The child is ``python -m coreepi.ingest.worker`` (:mod:`coreepi.ingest.worker`):
it limits its own address space (RLIMIT_AS, ``memory_limit_mb``) and CPU
time (RLIMIT_CPU, the wall-time limit + 1 s), dies with its parent, leaves
the network (a new network namespace, where the kernel allows it:
:func:`coreepi.ingest.worker.isolate_network`; :meth:`Sandbox.capabilities`
says which, and a child that ran with the network is logged once), and
prints one JSON result. This side enforces the wall-time limit (the child
is killed, by pid, when it passes) and turns a child that dies, hangs or
prints garbage into a :class:`SandboxResult` with a category:

==================  ==========================================================
category            meaning
==================  ==========================================================
``worker-timeout``  the wall-time limit passed; the child was killed
``worker-crashed``  the child died of a signal or printed no result
``memory-limit``    the analysis ran out of its address-space limit (a
                    MemoryError, or ENOMEM mapping the core): retryable
                    with a larger limit, says nothing about the core
``unreadable-core`` the artifact cannot be used (the worker's InputError)
``analysis-error``  the analysis failed (a bug), or its report is invalid
==================  ==========================================================
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from coreepi.ingest.scratch import scratch_dir
from coreepi.ingest.worker import PARENT_PID_ENV
from coreepi.model.report import CrashReport

__all__ = ["Child", "Launcher", "Sandbox", "SandboxLimits", "SandboxResult",
           "network_isolation"]

log = logging.getLogger("coreepi.sandbox")

RETRYABLE = frozenset({"memory-limit"})
"""Categories that are a limit's doing, not the artifact's: the same
artifact may be analysed with a larger limit."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one analysis. ``timeout_seconds``: wall time, seconds (the
    CPU limit is one second more); ``memory_limit_mb``: address space, MiB
    (None or 0: no limit); ``debug_dirs``: directories of debug files in
    ``.build-id/xx/rest[.debug]`` layout, searched by the analysis."""

    timeout_seconds: float
    memory_limit_mb: int | None
    debug_dirs: Sequence[Path] = ()
    max_core_bytes: int | None = None
    """Decompressed size of a core, bytes (the worker's ``COREEPI_MAX_CORE_BYTES``;
    None: the default of docs/limits.md)."""

    @property
    def cpu_seconds(self) -> int:
        """The child's CPU-time limit (RLIMIT_CPU), seconds: the wall-time
        limit + 1, so that the wall-time kill comes first."""
        return max(1, int(self.timeout_seconds) + 1)


@dataclass
class SandboxResult:
    """What one analysis gave: ``ok`` and its reports (zero or more: a
    kernel log may hold several crashes), or ``category`` (see the module
    docstring) and ``error``, one line."""

    ok: bool
    reports: list[CrashReport] = field(default_factory=list)
    category: str = ""
    error: str = ""
    network: str | None = None
    """"" when the child ran without a network, else why it could not leave
    it; None when it printed no result."""

    @property
    def retryable(self) -> bool:
        """A failure of a resource limit (:data:`RETRYABLE`), not of the
        artifact: file it for another try, not as an unreadable core."""
        return not self.ok and self.category in RETRYABLE


@functools.cache
def network_isolation() -> str:
    """"" when this machine lets an analysis child leave the network, else
    why not (one line). Asked once per process, of a throwaway child that
    makes the same calls as the analysis child
    (:func:`coreepi.ingest.worker.isolate_network`)."""
    probe = "from coreepi.ingest.worker import isolate_network as i; print(i(), end='')"
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the probe could not run: {exc}"
    if proc.returncode:
        return f"the probe exited {proc.returncode}: {proc.stderr.strip()[-200:]}"
    return proc.stdout.strip()


class Child(Protocol):
    """A started analysis child: what :class:`Sandbox` uses of ``subprocess.Popen``."""

    returncode: int | None

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]: ...

    def kill(self) -> None: ...


Launcher = Callable[[list[str], dict[str, str]], Child]
"""Starts the worker command ``argv`` with environment ``env``; the default
runs it as a new process (:func:`_popen`), a warm launcher forks it from a
pre-imported one (:mod:`coreepi.reanalysis.warm`)."""


def _popen(argv: list[str], env: dict[str, str]) -> Child:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, env=env)


class Sandbox:
    """Runs analyses in worker children. Thread-safe: ``run`` may be called
    from several threads at once; :meth:`kill_all` kills exactly the
    children this sandbox started and that still run (an interrupted ingest,
    a server shutting down).

    ``launcher``: how a child is started (:data:`Launcher`; default: a new
    process). ``scratch_dir``: where each child's temporary directory is made (a
    decompressed core can be large: the capture puts it in its spool);
    default: this process's scratch directory (:mod:`coreepi.ingest.scratch`:
    removed at exit, swept after a SIGKILL by the next coreepi process).
    """

    def __init__(self, limits: SandboxLimits, *, scratch_dir: Path | None = None,
                 launcher: Launcher | None = None) -> None:
        self.limits = limits
        self.scratch_dir = scratch_dir
        self.launcher = launcher or _popen
        self._procs: set[Child] = set()
        self._lock = threading.Lock()
        self._told_network = False

    def capabilities(self) -> str:
        """One line: what confines each analysis child (limits, network)."""
        limits = self.limits
        memory = (f"address space {limits.memory_limit_mb} MiB" if limits.memory_limit_mb
                  else "no address-space limit")
        why = network_isolation()
        network = ("no network (own network namespace)" if not why
                   else f"NETWORK NOT ISOLATED ({why})")
        return (f"analysis sandbox: {memory}, wall {limits.timeout_seconds:g} s, CPU "
                f"{limits.cpu_seconds} s, no core file, dies with its "
                f"parent, {network}")

    def _argv(self, artifact: Path) -> list[str]:
        limits = self.limits
        argv = [sys.executable, "-m", "coreepi.ingest.worker", "--artifact", str(artifact),
                "--cpu-seconds", str(limits.cpu_seconds)]
        if limits.memory_limit_mb:
            argv += ["--memory-limit-mb", str(limits.memory_limit_mb)]
        for d in limits.debug_dirs:
            argv += ["--debug-dir", str(d)]
        return argv

    def run(self, artifact: Path) -> SandboxResult:
        """Analyse the artifact at ``artifact`` (an ELF core, plain or
        compressed, a kernel log or an hs_err log) in a child; blocks until
        it is done or killed at the wall-time limit. Never raises for what
        the artifact does; OSError when the child cannot be started."""
        timeout = self.limits.timeout_seconds
        # The worker decompresses cores into its TMPDIR; a worker killed for
        # its time or memory limit cannot clean up, so this side owns the dir.
        env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
        if self.limits.max_core_bytes is not None:
            env["COREEPI_MAX_CORE_BYTES"] = str(self.limits.max_core_bytes)
        with tempfile.TemporaryDirectory(prefix="sandbox-",
                                         dir=self.scratch_dir or scratch_dir()) as tmp:
            proc = self.launcher(self._argv(artifact), {**env, "TMPDIR": tmp})
            with self._lock:
                self._procs.add(proc)
            try:
                try:
                    out, err = proc.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()  # by pid: our child only
                    proc.communicate()
                    return SandboxResult(
                        False, category="worker-timeout",
                        error=f"analysis took longer than {timeout:g} s; stopped")
            finally:
                with self._lock:
                    self._procs.discard(proc)
        result = self._decode(proc.returncode, out, err)
        if result.network and not self._told_network:
            self._told_network = True
            log.warning("analysis children run with the network: %s", result.network)
        return result

    def _decode(self, rc: int, out: bytes, err: bytes) -> SandboxResult:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        if rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
            why = "memory or CPU limit" if -rc in (signal.SIGKILL, signal.SIGXCPU) else "a bug"
            return SandboxResult(False, category="worker-crashed",
                                 error=f"analysis process died of {name} ({why}?) {tail[0]}".strip())
        try:
            obj = json.loads(out)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if "MemoryError" in err.decode("utf-8", "replace"):
                return SandboxResult(False, category="memory-limit",
                                     error=f"analysis exceeded the memory limit "
                                     f"({self.limits.memory_limit_mb} MiB)")
            return SandboxResult(False, category="worker-crashed",
                                 error=f"analysis process exited {rc} without a result: {tail[0]}")
        network = obj.get("network")
        if not obj.get("ok"):
            return SandboxResult(False, category=obj.get("category", "analysis-error"),
                                 error=obj.get("error", "unknown error"), network=network)
        try:
            reports = [CrashReport.model_validate(r) for r in obj["reports"]]
        except ValidationError as exc:
            return SandboxResult(False, category="analysis-error", error=f"bad report: {exc}",
                                 network=network)
        return SandboxResult(True, reports, network=network)

    def kill_all(self) -> None:
        """Kill (SIGKILL, by pid) every child of this sandbox still running."""
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
