"""The systemd capture mode: systemd-coredump is the core_pattern handler;
import the cores it stored for the command's processes.

systemd-coredump honours the crashing process's RLIMIT_CORE, so the limit is
raised for the command's tree as in the kernel mode. After the command ends,
the supervisor waits for systemd-coredump processes still writing (a big core
takes a while), then reads its journal entries logged since the run started
(``journalctl -o json``, as :mod:`coreepi.capture.coredump_import` does) and
keeps those whose COREDUMP_ENVIRON holds ``COREEPI_CI_RUN=<run id>``. Each
entry's core (a file under /var/lib/systemd/coredump, or inline) is
decompressed into the run's directory; an entry without a core is still a
crash, reported with the reason. A recorded ``journalctl -o json`` export can
stand in for the live journal (a job whose journal is read elsewhere, and the
tests on machines without systemd).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from coreepi.capture.coredump_import import entry_core, entry_field, journal_entries
from coreepi.capture.supervise.base import CapturedCrash, marker
from coreepi.capture.supervise.kernelfiles import CORE_PATTERN

__all__ = ["collect_journal_cores", "systemd_unavailable", "wait_for_coredump"]

HANDLER_COMM = "systemd-coredum"  # comm is 15 characters


def systemd_unavailable() -> str | None:
    """Why the systemd mode cannot read the live journal here, or None."""
    try:
        pattern = CORE_PATTERN.read_text().strip()
    except OSError as exc:
        return f"{CORE_PATTERN}: {exc.strerror}"
    if not (pattern.startswith("|") and "systemd-coredump" in pattern):
        return "core_pattern does not pipe to systemd-coredump"
    if shutil.which("journalctl") is None:
        return "journalctl is not installed"
    return None


def wait_for_coredump(timeout: float) -> None:
    """Return when no systemd-coredump process runs, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for pid in os.listdir("/proc"):
            try:
                busy = pid.isdigit() and Path(f"/proc/{pid}/comm").read_text().strip() == \
                    HANDLER_COMM
            except OSError:
                continue
            if busy:
                break
        if not busy:
            return
        time.sleep(0.1)


def _ours(entry: dict[str, Any], needle: bytes) -> bool:
    value = entry.get("COREDUMP_ENVIRON")
    raw = bytes(value) if isinstance(value, list) and value and isinstance(value[0], int) \
        else str(value or "").encode()
    return any(line == needle for line in raw.replace(b"\0", b"\n").split(b"\n"))


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def collect_journal_cores(run_id: str, since: float, dest: Path,
                          export: Path | None = None) -> list[CapturedCrash]:
    """This run's crashes from systemd-coredump's entries (the live journal
    since ``since``, seconds since the epoch, or the ``export`` file), their
    cores decompressed into ``dest``."""
    needle = marker(run_id)
    crashes: list[CapturedCrash] = []
    entries = journal_entries(export) if export is not None else journal_entries(since=since)
    for entry in entries:
        if not _ours(entry, needle):
            continue
        pid = _int(entry_field(entry, "COREDUMP_PID"))
        comm = entry_field(entry, "COREDUMP_COMM") or "unknown"
        crash = CapturedCrash(core=None, pid=pid, signal=_int(entry_field(
            entry, "COREDUMP_SIGNAL")), comm=comm, exe=entry_field(entry, "COREDUMP_EXE") or "",
            cmdline=(entry_field(entry, "COREDUMP_CMDLINE") or "").split())
        stream, why = entry_core(entry)
        if stream is None:
            crash.error = why
        else:
            target = dest / f"core.{comm}.{pid}.{len(crashes)}"
            try:
                with stream, open(target, "wb") as out:
                    shutil.copyfileobj(stream, out, 1 << 20)
                crash.core = target
            except (OSError, EOFError) as exc:
                crash.error = f"systemd-coredump's core of pid {pid} unreadable: {exc}"
        crashes.append(crash)
    return crashes
