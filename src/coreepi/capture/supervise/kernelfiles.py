"""The kernel capture mode: core_pattern writes plain files; raise RLIMIT_CORE
for the command's tree and collect the files it wrote.

Usable when ``/proc/sys/kernel/core_pattern`` is a file pattern (not a
``|pipe``) and the hard RLIMIT_CORE is not 0. The machine's core_pattern is
only read. A relative pattern (``core``, ``core.%p``) is written in the
crashing process's working directory: the command's working directory tree
is searched; an absolute one in its own directory. A file is this run's
when it is an ELF core written since the run started and its memory holds
``COREEPI_CI_RUN=<run id>`` (the environment the command's tree inherited);
a process that wipes its environment is therefore not collected (ptrace mode
sees it). Limitation of the pattern itself: without ``%p`` (and
``core_uses_pid`` 0) two crashes in one directory leave one file.
"""

from __future__ import annotations

import glob as globs
import os
import re
import resource
import shutil
from collections.abc import Iterator
from pathlib import Path

from coreepi.capture.supervise.base import CapturedCrash, marker

__all__ = ["CORE_PATTERN", "collect_kernel_cores", "kernel_unavailable", "raise_core_limit"]

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
CORE_USES_PID = Path("/proc/sys/kernel/core_uses_pid")
MAX_DIRS = 20000  # a working tree bigger than this is not searched further
_SPEC = re.compile(r"%(.)")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def kernel_unavailable() -> str | None:
    """Why the kernel mode cannot be used here, or None when it can."""
    pattern = _read(CORE_PATTERN)
    if not pattern:
        return f"{CORE_PATTERN} is unreadable or empty"
    if pattern.startswith("|"):
        return f"core_pattern pipes cores to {pattern[1:].split()[0]!r}, not to files"
    if resource.getrlimit(resource.RLIMIT_CORE)[1] == 0:
        return "the hard RLIMIT_CORE is 0 (cores are disabled for this job)"
    return None


def raise_core_limit() -> None:
    """Soft RLIMIT_CORE up to the hard limit (run in the command's child, before exec)."""
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def pattern_glob(pattern: str, uses_pid: bool) -> str:
    """The core_pattern as a glob: every ``%x`` specifier matches anything
    (``%%`` is a ``%``); ``.*`` appended when the kernel adds ``.PID``
    (core_uses_pid=1 and no ``%p`` in the pattern)."""
    has_pid = False

    def spec(m: re.Match[str]) -> str:
        nonlocal has_pid
        has_pid |= m.group(1) == "p"
        return "%" if m.group(1) == "%" else "*"

    glob = _SPEC.sub(spec, pattern.replace("[", "[[]"))
    return glob + ".*" if uses_pid and not has_pid else glob


def _candidates(glob: str, cwd: Path) -> Iterator[Path]:
    if os.path.isabs(glob):
        yield from (Path(p) for p in sorted(globs.glob(glob)))
        return
    for n, (top, dirs, _files) in enumerate(os.walk(cwd)):
        if n >= MAX_DIRS:
            return
        dirs[:] = [d for d in dirs if d not in (".git", ".hg", ".svn")]
        yield from (Path(top, p) for p in sorted(globs.glob(glob, root_dir=top)))


def _is_core(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(18)
    except OSError:
        return False
    return head[:4] == b"\x7fELF" and int.from_bytes(head[16:18], "little") == 4  # ET_CORE


def _holds(path: Path, needle: bytes) -> bool:
    """Does the file contain ``needle``? (read in 8 MiB chunks)."""
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            if needle in tail + block:
                return True
            tail = block[-len(needle):]
    return False


def collect_kernel_cores(run_id: str, since: float, cwd: Path, dest: Path
                         ) -> tuple[list[CapturedCrash], list[str]]:
    """Move this run's kernel-written cores (see the module docstring) into
    ``dest``; (crashes, warnings). ``since``: the run's start, seconds since
    the epoch."""
    uses_pid = _read(CORE_USES_PID) == "1"
    glob = pattern_glob(_read(CORE_PATTERN), uses_pid)
    needle = marker(run_id) + b"\0"
    crashes: list[CapturedCrash] = []
    warnings: list[str] = []
    for path in _candidates(glob, cwd):
        try:
            if not path.is_file() or path.stat().st_mtime < since or not _is_core(path):
                continue
            if not _holds(path, needle):
                continue
            target = dest / f"{path.name}.{len(crashes)}"
            shutil.move(path, target)
        except OSError as exc:
            warnings.append(f"{path}: cannot collect: {exc.strerror or exc}")
            continue
        crashes.append(CapturedCrash(core=target))
    return crashes, warnings
