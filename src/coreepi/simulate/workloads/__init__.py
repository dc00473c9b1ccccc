"""The simulator's workloads: small real C/C++ programs shipped as sources
(this directory) and compiled at simulate time with gcc/g++ into a cache
directory, one binary per (source, version defines, compiler).

``kvstore.c``
    a key-value service in C; bugs: null-deref-v2 (only with
    ``-DAPP_VERSION=2``), kernel-ring, assert, wild-pointer, double-free,
    stack-overflow; ``none`` is a healthy run (the fault injector's target).
``indexer.cpp``
    a C++ document indexer whose parse errors are exceptions, under a
    profiler's SIGUSR2 timer in the ``high-exceptions+sigusr2`` profile: the
    return-to-NULL race of DESIGN.md's reference story (the mechanism of
    ``tests/crashers_reference/unwind_race.cpp``); bug: uncaught-exception.

Both are built ``-g -O1`` (small, fast, no frame pointer) with a GNU build-id.
x86-64 only (inline asm in ``indexer.cpp``; register names in the injector).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from coreepi.errors import CoreepiError

__all__ = [
    "BUG_NEEDS",
    "FLAGS",
    "BuildError",
    "bug_unreachable",
    "build_workload",
    "default_cache_dir",
    "source_path",
]

#: compiler flags of every workload build
FLAGS = ("-g", "-O1", "-Wall", "-Wno-use-after-free", "-Wl,--build-id")

#: bugs compiled in only by a define: (source, bug) -> (macro, least value
#: that has the bug, the value the source assumes when it is not defined);
#: kept next to the sources' ``#if`` lines (kvstore.c: ``APP_VERSION >= 2``)
BUG_NEEDS: dict[tuple[str, str], tuple[str, int, int]] = {
    ("kvstore.c", "null-deref-v2"): ("APP_VERSION", 2, 1),
}


def bug_unreachable(source: str, bug: str, defines: Sequence[str]) -> str | None:
    """Why ``bug`` of workload ``source`` cannot fire in a build with ``-D``
    ``defines`` (e.g. ``"needs APP_VERSION=2 or above, built with
    APP_VERSION=1"``), or None when it can."""
    need = BUG_NEEDS.get((source, bug))
    if need is None:
        return None
    macro, least, default = need
    shown = f"{macro} not defined (so {default})"
    value: int | None = default
    for d in defines:
        name, _, given = d.partition("=")
        if name == macro:
            shown = f"{macro}={given}"
            value = int(given) if given.lstrip("-").isdigit() else None
    if value is not None and value >= least:
        return None
    return f"needs {macro}={least} or above, built with {shown}"


class BuildError(CoreepiError):
    """A workload could not be compiled (no compiler, or it failed)."""


def source_path(source: str) -> Path:
    """Path of a shipped workload source file."""
    return Path(str(resources.files(__name__).joinpath(source)))


def default_cache_dir() -> Path:
    """``$COREEPI_CACHE`` or the per-user cache dir, ``…/coreepi/workloads``."""
    env = os.environ.get("COREEPI_CACHE")
    if env:
        return Path(env) / "workloads"
    import platformdirs

    return Path(platformdirs.user_cache_dir("coreepi")) / "workloads"


def _compiler_id(compiler: str) -> str:
    proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.splitlines()[0] if proc.stdout else compiler


def build_workload(
    name: str, source: str, defines: Sequence[str] = (), cache_dir: Path | None = None
) -> Path:
    """The binary of workload ``name`` built from ``source`` with ``-D``
    ``defines``, compiled once into the cache (keyed by the source's bytes,
    the flags and the compiler's version) and reused. The binary is named
    ``name`` (signatures may show the executable's file name). Safe to call
    from several processes at once (a lock file)."""
    src = source_path(source)
    compiler = "g++" if source.endswith((".cpp", ".cc", ".cxx")) else "gcc"
    if shutil.which(compiler) is None:
        raise BuildError(f"{compiler} is not installed (needed to build the workload {name})")
    argv_flags = [*FLAGS, *(f"-D{d}" for d in defines)]
    if compiler == "gcc":
        argv_flags.append("-std=gnu11")
    key = hashlib.sha256(
        b"\0".join(
            [src.read_bytes(), " ".join(argv_flags).encode(), _compiler_id(compiler).encode()]
        )
    ).hexdigest()[:16]
    root = (cache_dir or default_cache_dir()) / f"{name}-{key}"
    binary = root / name
    if binary.is_file():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary
        tmp = root / f".{name}.{os.getpid()}"
        proc = subprocess.run(
            [compiler, *argv_flags, "-o", str(tmp), str(src)],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if proc.returncode != 0:
            raise BuildError(f"building {name} from {source} failed:\n{proc.stderr[-3000:]}")
        tmp.rename(binary)
    return binary
