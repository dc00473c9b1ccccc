"""From an artifact on disk to analysed CrashReports: parse, then analyze,
while the core is still open (the analyzers read its memory)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from coreepi.analyze import analyze
from coreepi.parse import open_core
from coreepi.report import CrashReport

__all__ = ["inspect_core"]


def inspect_core(
    path: str | os.PathLike[str],
    *,
    exe: str | os.PathLike[str] | None = None,
    sysroot: str | os.PathLike[str] | None = None,
    debug_dirs: Sequence[str | os.PathLike[str]] = (),
    run_analysis: bool = True,
) -> CrashReport:
    """Parse the ELF core at ``path`` and (unless ``run_analysis`` is False)
    analyse it: phenotypes, and as they land, scanned frames and a signature.
    Arguments and errors as :func:`coreepi.parse.parse_core`."""
    with open_core(path, exe=exe, sysroot=sysroot, debug_dirs=debug_dirs) as parsed:
        if run_analysis:
            analyze(parsed.report, parsed.memory)
        return parsed.report
