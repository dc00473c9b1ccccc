"""Edge analysis: the core analysed on the node, by the same analyzer as
``coreepi inspect``, in the sandboxed worker of :mod:`coreepi.ingest.worker`
(RLIMIT_AS, RLIMIT_CPU, killed with its parent), within a wall-time budget.

The node has the crashed binaries and libraries, so symbolization is cheap
and the core need not travel; when the budget runs out the report goes
without analysis and the core is shipped for central analysis.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from coreepi.model.report import CrashReport

__all__ = ["EdgeResult", "analyse_core"]


@dataclass
class EdgeResult:
    report: CrashReport | None
    outcome: str  # "ok", "timeout", "failed"
    detail: str = ""


def analyse_core(
    core: Path,
    *,
    seconds: float,
    memory_mb: int,
    debug_dirs: list[str],
    scratch: Path,
) -> EdgeResult:
    """Analyse ``core`` (zstd or plain ELF) in a worker process. ``scratch``:
    a directory for the decompressed copy (created and removed here)."""
    argv = [sys.executable, "-m", "coreepi.ingest.worker", "--artifact", str(core),
            "--cpu-seconds", str(max(1, int(seconds) + 1))]
    if memory_mb:
        argv += ["--memory-limit-mb", str(memory_mb)]
    for d in debug_dirs:
        if os.path.isdir(d):
            argv += ["--debug-dir", d]
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.kill()  # the worker only: it is our child, by pid
            proc.communicate()
            return EdgeResult(None, "timeout", f"edge analysis took longer than {seconds:g} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return EdgeResult(None, "failed", f"worker exited {proc.returncode}: {tail[0]}"[:500])
    try:
        obj = json.loads(out)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return EdgeResult(None, "failed", "worker printed no result")
    if not obj.get("ok"):
        return EdgeResult(None, "failed", f"{obj.get('category')}: {obj.get('error')}"[:500])
    try:
        reports = [CrashReport.model_validate(r) for r in obj.get("reports", [])]
    except ValidationError as exc:
        return EdgeResult(None, "failed", f"bad report from worker: {exc}"[:500])
    if not reports:
        return EdgeResult(None, "failed", "worker found no crash in the core")
    return EdgeResult(reports[0], "ok")
