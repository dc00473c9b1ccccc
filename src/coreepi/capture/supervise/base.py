"""What every capture mode of ``coreepi ci run`` returns: the command's exit
status and one :class:`CapturedCrash` per process of its tree that died of a
core-dumping signal."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RUN_ID_VARIABLE", "CaptureResult", "CapturedCrash", "marker"]

RUN_ID_VARIABLE = "COREEPI_CI_RUN"
"""Environment variable set for the command's tree. Its value (the run id)
lets the kernel and systemd modes tell this run's cores from any other's:
the variable is in every core's copy of the environment (the stack) and in
systemd-coredump's COREDUMP_ENVIRON."""


def marker(run_id: str) -> bytes:
    """The bytes ``COREEPI_CI_RUN=<run id>`` as they sit in a process's environment."""
    return f"{RUN_ID_VARIABLE}={run_id}".encode()


@dataclass(slots=True)
class CapturedCrash:
    """One crashed process. ``core``: its (uncompressed) core file, or None
    with ``error`` saying why there is none. ``pid``/``signal``/``comm``/
    ``exe``/``cmdline`` as the capture saw them (0 / "" when it did not: the
    analysis reads them from the core). ``seconds``: time to write the core
    (ptrace mode; 0 when the kernel wrote it)."""

    core: Path | None
    pid: int = 0
    signal: int = 0
    comm: str = ""
    exe: str = ""
    cmdline: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


@dataclass(slots=True)
class CaptureResult:
    """``returncode``: the command's exit status, or minus the signal that killed it."""

    mode: str
    returncode: int
    crashes: list[CapturedCrash]
    warnings: list[str] = field(default_factory=list)
