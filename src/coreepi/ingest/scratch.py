"""Scratch space that cleans itself up, by construction.

Every process of coreepi that writes temporary files (decompressed cores,
uploads being received, analysis workers' copies) writes them under one
directory of its own, ``<root>/coreepi-<pid>-<start>`` (``root``: ``$TMPDIR``
by default; ``start``: the process's start time in clock ticks since boot,
so a recycled pid is told apart). That directory is

- removed when the process exits normally or on SIGTERM/SIGHUP (the default
  action of those signals would skip ``finally`` blocks and leave a 7.8 GB
  partial file behind: :func:`exit_on_sigterm` turns them into SystemExit);
- swept by the next coreepi process using the same root, when its owner is
  dead (SIGKILL, a power loss): :func:`sweep`, called by :func:`scratch_dir`.

Worker children get the parent's directory as their ``TMPDIR`` and die with
it (``PR_SET_PDEATHSIG`` in :mod:`coreepi.ingest.worker`), so what they leave
is removed with it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

__all__ = ["exit_on_sigterm", "scratch_dir", "sweep"]

PREFIX = "coreepi-"
_lock = threading.Lock()
_mine: dict[Path, Path] = {}  # root -> this process's directory under it


def _start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` (clock ticks since boot), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # field 22; the command (field 2) is in parentheses and may hold spaces
    return int(stat.rsplit(")", 1)[1].split()[19])


def _owner_alive(name: str) -> bool:
    """Whether the process named by a scratch directory ``coreepi-<pid>-<start>`` runs."""
    try:
        pid_text, start_text = name[len(PREFIX):].split("-", 1)
        pid, start = int(pid_text), int(start_text)
    except ValueError:
        return True  # not one of ours (another coreepi-* name): leave it
    return _start_ticks(pid) == start


def sweep(root: Path | None = None) -> list[str]:
    """Remove the scratch directories under ``root`` (default ``$TMPDIR``)
    whose owner process is gone; returns their names."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        names = [p.name for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return removed
    for name in names:
        if not _owner_alive(name):
            shutil.rmtree(root / name, ignore_errors=True)
            removed.append(name)
    return removed


def _remove_all() -> None:
    with _lock:
        for path in _mine.values():
            shutil.rmtree(path, ignore_errors=True)
        _mine.clear()


def scratch_dir(root: Path | None = None) -> Path:
    """This process's scratch directory under ``root`` (default ``$TMPDIR``),
    created on first use (after sweeping the dead ones) and removed at exit."""
    root = Path(root or tempfile.gettempdir())
    with _lock:
        path = _mine.get(root)
        if path is not None and path.is_dir():
            return path
        sweep(root)
        pid = os.getpid()
        path = root / f"{PREFIX}{pid}-{_start_ticks(pid) or 0}"
        path.mkdir(parents=True, exist_ok=True)
        if not _mine:
            atexit.register(_remove_all)
        _mine[root] = path
        return path


def exit_on_sigterm() -> None:
    """SIGTERM and SIGHUP raise SystemExit (status 128 + signal) in the main
    thread, so ``finally`` blocks and the atexit removal of the scratch
    directory run. Call from a command's main thread (the CLI does)."""
    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _exit)
