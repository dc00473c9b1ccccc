"""``coreepi debug``: open a stored crash in gdb with the right files.

The caller writes the core, decompressed, into a temporary directory; the
crash's modules (executable, libraries) are found **by build-id** — in the symbol
directories given (a fleet's ``symbols/`` or ``.build-id`` trees, indexed as
ingest indexes them: :class:`coreepi.ingest.buildid.BuildIdIndex`), else at
their recorded path on this machine when the file there has the same
build-id — and laid out as a sysroot of symbolic links at their recorded
paths, so gdb loads exactly the files the crashed process ran. Debug files
come from the same index (``.build-id/xx/rest.debug``), the symbol
directories and ``/usr/lib/debug``. debuginfod is never contacted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coreepi.errors import InputError
from coreepi.ingest.buildid import BuildIdIndex, elf_identity
from coreepi.model.report import CrashReport, Module

__all__ = ["GdbSession", "gdb_session", "run_gdb"]

SYSTEM_DEBUG_DIR = Path("/usr/lib/debug")


@dataclass
class GdbSession:
    """What gdb is started with: ``core`` (decompressed), ``exe`` (None: not
    found), ``sysroot``, ``debug_dirs``; ``missing``: modules found nowhere
    (path and build-id), ``found``: module path -> file used."""

    core: Path
    exe: Path | None
    sysroot: Path
    debug_dirs: list[Path]
    found: dict[str, Path] = field(default_factory=dict)
    missing: list[tuple[str, str | None]] = field(default_factory=list)

    def command(self, gdb: str, extra: Sequence[str] = ()) -> list[str]:
        """The gdb argv: settings that must precede loading (``-iex``), the
        caller's ``extra`` arguments (e.g. ``-batch -ex bt``), the files."""
        dirs = ":".join(str(d) for d in self.debug_dirs)
        argv = [gdb, "-q",
                "-iex", "set debuginfod enabled off",
                "-iex", f"set sysroot {self.sysroot}",
                "-iex", f"set debug-file-directory {dirs}",
                *extra]
        if self.exe is not None:
            argv += ["-se", str(self.exe)]
        return [*argv, "-c", str(self.core)]


def gdb_session(report: CrashReport, core: Path, workdir: Path,
                symbol_dirs: Sequence[Path] = ()) -> GdbSession:
    """A :class:`GdbSession` for ``report`` whose decompressed core is at
    ``core``; the build-id index and the sysroot are made under ``workdir``
    (the caller's temporary directory). Raises :class:`InputError` when a
    symbol directory is not a directory."""
    for d in symbol_dirs:
        if not d.is_dir():
            raise InputError(str(d), "--symbol-dir: not a directory")
    index = BuildIdIndex.build(workdir / "index", symbol_dirs, symbol_dirs)
    session = GdbSession(core, None, workdir / "sysroot", [*index.debug_dirs, SYSTEM_DEBUG_DIR])
    session.sysroot.mkdir()
    for i, module in enumerate(report.modules):
        path = _module_file(module, index)
        if path is None:
            if module.build_id and not module.path.startswith("["):
                session.missing.append((module.path, module.build_id))
            continue
        session.found[module.path] = path
        if i == 0:  # parse puts the main executable first
            session.exe = path
        if module.path.startswith("/"):
            link = session.sysroot / module.path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(path)
    return session


def _module_file(module: Module, index: BuildIdIndex) -> Path | None:
    """The file of ``module`` with its build-id: from the index, else at its
    recorded path on this machine when that file's build-id matches."""
    if not module.build_id:
        return None
    found = index.executable_for(module.build_id)
    if found is not None:
        return found
    if module.path.startswith("/"):
        ident = elf_identity(module.path)
        if ident is not None and ident.build_id == module.build_id.lower() and ident.loadable:
            return Path(module.path)
    return None


def run_gdb(session: GdbSession, extra: Sequence[str] = (), gdb: str | None = None) -> int:
    """Run gdb on ``session`` in the foreground (stdin, stdout and stderr are
    the caller's) and return its exit status. Ctrl-C goes to gdb, not to us.
    Raises :class:`InputError` when gdb is not installed."""
    gdb = gdb or shutil.which("gdb")
    if gdb is None:
        raise InputError("gdb", "not installed (e.g. apt-get install gdb)")
    env = dict(os.environ, DEBUGINFOD_URLS="")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.run(session.command(gdb, extra), env=env, check=False).returncode
    finally:
        signal.signal(signal.SIGINT, previous)
