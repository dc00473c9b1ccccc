"""Edge analysis: the core analysed on the node, by the same analyzer as
``coreepi inspect``, in ingest's sandbox (:class:`coreepi.ingest.sandbox.Sandbox`:
RLIMIT_AS, RLIMIT_CPU, killed with its parent and at the wall-time budget).

The node has the crashed binaries and libraries, so symbolization is cheap
and the core need not travel; when the budget runs out the report goes
without analysis and the core is shipped for central analysis.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from coreepi.ingest.sandbox import Sandbox, SandboxLimits
from coreepi.model.report import CrashReport

__all__ = ["EdgeResult", "analyse_core"]


@dataclass
class EdgeResult:
    """``report``: the analysed report (None unless ``outcome`` is ``ok``);
    ``outcome``: ``ok``, ``timeout`` or ``failed``; ``detail``: why not, one line."""

    report: CrashReport | None
    outcome: str
    detail: str = ""


def analyse_core(
    core: Path,
    *,
    seconds: float,
    memory_mb: int,
    debug_dirs: list[str],
    scratch: Path,
    max_core_bytes: int | None = None,
) -> EdgeResult:
    """Analyse ``core`` (zstd or plain ELF) in the sandbox within ``seconds``
    of wall time and ``memory_mb`` MiB of address space (0: no limit).
    ``debug_dirs`` that do not exist are skipped. ``scratch``: a directory
    for the decompressed copy (created and removed here); ``max_core_bytes``:
    the most the copy may take (None: the default limit). Never raises for
    what the core does."""
    limits = SandboxLimits(seconds, memory_mb or None,
                           [Path(d) for d in debug_dirs if os.path.isdir(d)],
                           max_core_bytes=max_core_bytes)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        result = Sandbox(limits, scratch_dir=scratch).run(core)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.category == "worker-timeout":
        return EdgeResult(None, "timeout", f"edge {result.error}")
    if not result.ok:
        return EdgeResult(None, "failed", f"{result.category}: {result.error}"[:500])
    if not result.reports:
        return EdgeResult(None, "failed", "worker found no crash in the core")
    return EdgeResult(result.reports[0], "ok")
