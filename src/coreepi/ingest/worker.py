"""One artifact, analysed in a sandboxed child process.

``python -m coreepi.ingest.worker --artifact PATH [--debug-dir DIR]...
[--memory-limit-mb N] [--cpu-seconds S]`` limits its own address space
(RLIMIT_AS) and CPU time (RLIMIT_CPU) before reading anything, asks the
kernel to kill it if its parent dies (PR_SET_PDEATHSIG), leaves the network
(:func:`isolate_network`: a new network namespace, whose only interface is a
loopback that is down), analyses the artifact with
:func:`coreepi.ingest.artifacts.inspect_file`, and prints one JSON object on
standard output::

    {"ok": true, "exe": "/path/used/or/null", "reports": [CrashReport, ...],
     "network": ""}
    {"ok": false, "category": "unreadable-core" | "memory-limit" | "analysis-error",
     "error": "one line", "network": ""}

``network``: empty when the child ran without a network, else why it could
not leave it (one line: the kernel refused the namespaces).

The parent (:class:`coreepi.ingest.sandbox.Sandbox`) enforces the wall-time limit and turns a
worker that dies, hangs or prints garbage into one warning row. A hostile
core can therefore cost one process, never the ingest.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import signal
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

PR_SET_PDEATHSIG = 1
CLONE_NEWUSER = 0x10000000  # <linux/sched.h>
CLONE_NEWNET = 0x40000000
PARENT_PID_ENV = "COREEPI_PARENT_PID"
"""Set by the sandbox: the pid the worker must not outlive."""


def _limit(memory_limit_mb: int | None, cpu_seconds: int | None) -> None:
    if memory_limit_mb:
        limit = memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crashing worker leaves no core of its own


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    # the parent died before prctl: we were re-parented — to init, or to a
    # subreaper whose pid is not 1 (containers) — so compare with the pid the
    # parent gave us
    expected = os.environ.get(PARENT_PID_ENV)
    if os.getppid() == 1 or (expected is not None and str(os.getppid()) != expected):
        os._exit(1)


def isolate_network() -> str:
    """Move this process into a new, empty network namespace (its loopback is
    down, so even 127.0.0.1 is unreachable: ``connect`` fails with
    ENETUNREACH): an artifact that subverts the analysis cannot reach the
    server, the store or the metadata service. Root (CAP_SYS_ADMIN) gets
    ``unshare(CLONE_NEWNET)``; anyone else a new user namespace with it
    (``CLONE_NEWUSER | CLONE_NEWNET``), where the kernel allows unprivileged
    user namespaces (``user.max_user_namespaces`` > 0, no distribution
    switch against it, a single-threaded caller). Files are still read and
    written as the real user. Returns "" when isolated, else one line saying
    why not (the analysis then runs with the caller's network)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as exc:
        return f"no libc to call unshare(2): {exc}"
    if libc.unshare(CLONE_NEWNET) == 0:
        return ""
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        return ""
    return f"unshare(CLONE_NEWUSER|CLONE_NEWNET): {os.strerror(ctypes.get_errno())}"


def _analyse(path: str, debug_dirs: list[str]) -> str:
    from coreepi.ingest.artifacts import ArtifactKind, inspect_file, plain_core, sniff
    from coreepi.ingest.buildid import BuildIdIndex, core_main_build_id

    kind, compression = sniff(path)
    with tempfile.TemporaryDirectory(prefix="coreepi-worker-") as tmp:
        plain = path
        if kind is ArtifactKind.ELF and compression is not None:
            # decompressed here (not by inspect_file) so that the main
            # executable's build-id can be read before parsing
            plain = str(plain_core(path, Path(tmp)))
        exe = None
        if kind is ArtifactKind.ELF:
            index = BuildIdIndex(root=Path(tmp), symbol_dirs=[Path(d) for d in debug_dirs])
            exe = index.executable_for(core_main_build_id(plain))
        reports = inspect_file(plain, exe=exe, debug_dirs=debug_dirs)
        if plain != path:
            for r in reports:
                r.analysis.warnings = [w.replace(plain, path) for w in r.analysis.warnings]
        body = ",".join(r.model_dump_json() for r in reports)
    exe_json = json.dumps(str(exe) if exe is not None else None)
    return f'{{"ok": true, "exe": {exe_json}, "reports": [{body}]}}'


def _failure(exc: BaseException, memory_limit_mb: int | None) -> dict[str, object]:
    from coreepi.errors import InputError, ResourceLimitError

    # under RLIMIT_AS, loading a shared library fails with an ImportError
    # ("failed to map segment from shared object"), not a MemoryError; and
    # mapping the core fails with ENOMEM (ResourceLimitError): the limit's
    # doing, not the core's, so it must not be filed as an unreadable core
    if isinstance(exc, MemoryError | ResourceLimitError) or (
        isinstance(exc, ImportError) and ("map segment" in str(exc) or "allocate memory" in str(exc))
    ):
        why = f": {exc.reason}" if isinstance(exc, ResourceLimitError) else ""
        return {"ok": False, "category": "memory-limit",
                "error": f"analysis exceeded the memory limit ({memory_limit_mb} MiB){why}"}
    if isinstance(exc, InputError):
        return {"ok": False, "category": "unreadable-core", "error": exc.reason}
    return {"ok": False, "category": "analysis-error",
            "error": f"{type(exc).__name__}: {exc}"[:2000]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coreepi.ingest.worker")
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--debug-dir", action="append", default=[])
    parser.add_argument("--memory-limit-mb", type=int, default=None)
    parser.add_argument("--cpu-seconds", type=int, default=None)
    args = parser.parse_args(argv)
    _limit(args.memory_limit_mb, args.cpu_seconds)
    _die_with_parent()
    network = isolate_network()
    try:
        out = _analyse(args.artifact, args.debug_dir)
    except Exception as exc:  # the parent turns this into one warning row
        out = json.dumps(_failure(exc, args.memory_limit_mb))
    # appended to the object already printed as text (the reports are not parsed again)
    sys.stdout.write(f'{out[:-1]}, "network": {json.dumps(network)}}}')
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
