"""Run a command under a capture mode and analyse every core its tree left.

Modes (:data:`MODES`), and what ``auto`` tries, in order:

1. ``kernel`` — core_pattern writes files, with a per-process name (``%p``
   in the pattern, or core_uses_pid=1: otherwise two crashes in one
   directory keep one core, so ``auto`` passes over it; asked for by name it
   is used anyway, with a warning);
2. ``systemd`` — systemd-coredump is the handler and journalctl is here;
3. ``ptrace`` — otherwise: the supervisor writes the cores itself.

Nothing machine-wide is changed: the core limit is raised in the command's
own process (inherited by its tree), core_pattern is only read.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from coreepi.capture.supervise.base import RUN_ID_VARIABLE, CapturedCrash, CaptureResult
from coreepi.capture.supervise.kernelfiles import (
    CORE_PATTERN,
    CORE_USES_PID,
    collect_kernel_cores,
    kernel_unavailable,
    raise_core_limit,
)
from coreepi.errors import InputError
from coreepi.reporting.ci import CiCrash, CiRun

__all__ = ["MODES", "CiError", "analyse", "capture", "choose_mode", "ci_run"]

MODES = ("auto", "kernel", "systemd", "ptrace")


class CiError(InputError):
    """The run cannot start: unknown command, unavailable capture mode."""


def _per_process_names() -> bool:
    try:
        pattern = CORE_PATTERN.read_text()
        return "%p" in pattern or CORE_USES_PID.read_text().strip() == "1"
    except OSError:
        return False


def choose_mode(requested: str, journal_export: Path | None = None) -> tuple[str, list[str]]:
    """(mode, notes): the mode to use and what was passed over and why.
    Raises CiError when ``requested`` is unknown or not usable here."""
    if requested not in MODES:
        raise CiError("--capture", f"{requested!r}: one of {', '.join(MODES)}")
    notes: list[str] = []
    if requested in ("kernel", "auto"):
        why = kernel_unavailable()
        if why is None and not _per_process_names():
            if requested == "kernel":
                notes.append("core_pattern has no %p and core_uses_pid is 0: two crashes in "
                             "one directory leave one core")
            else:
                why = "core_pattern names cores without the pid (two crashes in one " \
                      "directory would keep one)"
        if why is None:
            return "kernel", notes
        if requested == "kernel":
            raise CiError("--capture kernel", why)
        notes.append(f"kernel: {why}")
    if requested in ("systemd", "auto"):
        from coreepi.capture.supervise.journal import systemd_unavailable

        why = None if journal_export is not None else systemd_unavailable()
        if why is None:
            return "systemd", notes
        if requested == "systemd":
            raise CiError("--capture systemd", f"{why} (give --journal-export FILE to read "
                          "a recorded `journalctl -o json` export)")
        notes.append(f"systemd: {why}")
    return "ptrace", notes


def capture(argv: Sequence[str], mode: str, cores_dir: Path, *, run_id: str,
            journal_export: Path | None = None, systemd_wait: float = 30.0) -> CaptureResult:
    """Run ``argv`` under ``mode`` (not ``auto``) with ``COREEPI_CI_RUN=run_id``
    in its environment; the cores end up in ``cores_dir``."""
    env = {**os.environ, RUN_ID_VARIABLE: run_id}
    started = time.time()
    if mode == "ptrace":
        from coreepi.capture.supervise.tracer import run_traced

        try:
            return run_traced(argv, cores_dir, env=env)
        except OSError as exc:
            raise CiError("--capture ptrace", f"cannot trace the command: {exc}") from None
    code = subprocess.run(list(argv), env=env, preexec_fn=raise_core_limit,  # noqa: PLW1509
                          check=False).returncode
    warnings: list[str] = []
    if mode == "kernel":
        crashes, warnings = collect_kernel_cores(run_id, started, Path.cwd(), cores_dir)
    else:  # systemd-coredump's journal (its importer loads the capture config stack)
        from coreepi.capture.supervise.journal import collect_journal_cores, wait_for_coredump

        if journal_export is None:
            wait_for_coredump(systemd_wait)
        crashes = collect_journal_cores(run_id, started, cores_dir, journal_export)
    return CaptureResult(mode=mode, returncode=code, crashes=crashes, warnings=warnings)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}" if number else "unknown signal"


def analyse(captured: CapturedCrash) -> CiCrash:
    """Analyse one captured crash's core (coreepi.ingest.artifacts.inspect_file)."""
    from coreepi.ingest.artifacts import inspect_file

    crash = CiCrash(pid=captured.pid, signal=_signal_name(captured.signal),
                    process=captured.comm, cmdline=captured.cmdline, core=captured.core,
                    error=captured.error, seconds_to_core=captured.seconds)
    if captured.core is None:
        return crash
    started = time.perf_counter()
    try:
        reports = inspect_file(captured.core)
    except InputError as exc:
        crash.error = str(exc)
        reports = []
    crash.seconds_to_analyse = time.perf_counter() - started
    if reports:
        report = crash.report = reports[0]
        crash.pid = crash.pid or report.process.pid or 0
        crash.process = crash.process or report.process.comm or Path(
            report.process.exe or "unknown").name
        crash.cmdline = crash.cmdline or report.process.cmdline
        if report.signal is not None and not captured.signal:
            crash.signal = report.signal.name or _signal_name(report.signal.number)
    return crash


def ci_run(argv: Sequence[str], *, mode: str = "auto", cores_dir: Path,
           journal_export: Path | None = None, systemd_wait: float = 30.0,
           on_mode: object = None) -> CiRun:
    """Capture and analyse: the :class:`CiRun` of ``argv``. ``on_mode``, when
    callable, is told the chosen mode and the notes before the command
    starts. The run id is ``$COREEPI_CI_RUN`` when set (a pipeline's own id),
    else random. Raises CiError (command not found, mode unavailable)."""
    if not argv:
        raise CiError("ci run", "no command given (coreepi ci run [OPTIONS] -- CMD ...)")
    if shutil.which(argv[0]) is None:
        raise CiError(argv[0], "command not found")
    if journal_export is not None and not journal_export.is_file():
        raise CiError(str(journal_export), "no such file (--journal-export)")
    chosen, notes = choose_mode(mode, journal_export)
    try:
        cores_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CiError(str(cores_dir), f"cannot make the cores directory: {exc.strerror}"
                      ) from None
    if callable(on_mode):
        on_mode(chosen, notes)
    run_id = os.environ.get(RUN_ID_VARIABLE) or uuid.uuid4().hex
    started = time.perf_counter()
    result = capture(argv, chosen, cores_dir, run_id=run_id, journal_export=journal_export,
                     systemd_wait=systemd_wait)
    crashes = [analyse(c) for c in result.crashes]
    seconds = time.perf_counter() - started  # the command and the analysis of its cores
    warnings = [n for n in notes if chosen == mode] + result.warnings
    return CiRun(command=list(argv), mode=chosen, returncode=result.returncode, seconds=seconds,
                 crashes=crashes, warnings=warnings)
