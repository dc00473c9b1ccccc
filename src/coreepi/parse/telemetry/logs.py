"""Hardware telemetry: kernel log lines and tool outputs into
:class:`~coreepi.model.events.TelemetryEvent` s.

Input: any text that may hold them — ``dmesg`` (plain, ``-T``, ``-x``,
``--time-format iso``), ``/dev/kmsg`` records, console / pstore logs,
journal and syslog text, ``mcelog --ascii`` output or ``/var/log/mcelog``,
``ras-mc-ctl --errors`` output — as a path (zstd / gzip / bzip2 / xz decompressed),
the text itself, or an iterable of lines. Output: events, streamed.

Families (one module each):

* machine checks (:mod:`~coreepi.parse.telemetry.mce`): kernel ``mce:
  [Hardware Error]:`` records (Intel print and AMD decoder), the Xen
  hypervisor's ``(XEN)`` console records and old kernels' unprefixed ones
  (:mod:`~coreepi.parse.telemetry.console_mce`), APEI/GHES
  ``{N}[Hardware Error]:`` records, mcelog records, rasdaemon
  ``ras-mc-ctl --errors`` lines, and ``Memory failure: … Sending SIGBUS``
  lines (``sigbus_mce``);
* EDAC memory errors (:mod:`~coreepi.parse.telemetry.edac`): ``EDAC MC0: 1
  CE … on DIMM (…)`` -> ``edac_ce`` / ``edac_ue``;
* NVIDIA Xid / NVSwitch SXid (:mod:`~coreepi.parse.telemetry.xid`) with
  each code's meaning from NVIDIA's documentation;
* PCIe AER (:mod:`~coreepi.parse.telemetry.aer`).

A crash report whose signal is ``SIGBUS`` with ``BUS_MCEERR_AR`` /
``BUS_MCEERR_AO`` becomes a ``sigbus_mce`` event with
:func:`event_from_crash`.

Times: ``[  123.456789]`` and kmsg records give ``uptime_seconds`` (``ts``
stays None); ``dmesg -T``, ISO-8601 journal / syslog / ``dmesg
--time-format iso`` prefixes, mcelog's ``TIME`` and rasdaemon's timestamps
give ``ts`` in UTC (a wall clock without a zone is taken as UTC).

Robustness: the input is read line by line (lines cut at
:data:`MAX_LINE_BYTES`), every multi-line record is bounded, and no input
text makes these functions raise (an unreadable path raises OSError, a
compressed file cut short or corrupt
:class:`~coreepi.parse.open_input.DecompressionError` after the events read
before that point).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Final

from coreepi.model.events import EventKind, TelemetryEvent, event_id
from coreepi.model.report import CrashReport
from coreepi.parse.kernel.oops import log_lines
from coreepi.parse.kernel.prefixes import split_prefix
from coreepi.parse.open_input import DecompressionError
from coreepi.parse.telemetry.aer import AerParser
from coreepi.parse.telemetry.base import Context, FamilyParser
from coreepi.parse.telemetry.console_mce import ConsoleMceParser
from coreepi.parse.telemetry.edac import EdacParser
from coreepi.parse.telemetry.fold import Fold
from coreepi.parse.telemetry.ghes import GhesParser
from coreepi.parse.telemetry.mce import KernelMceParser, MemoryFailureParser
from coreepi.parse.telemetry.mcelog import McelogParser
from coreepi.parse.telemetry.rasdaemon import RasdaemonTraceParser, RasMcCtlParser
from coreepi.parse.telemetry.xid import XidParser, xid_info, xid_table

__all__ = [
    "MAX_LINE_BYTES",
    "TelemetryScanner",
    "event_from_crash",
    "looks_like_telemetry",
    "parse_telemetry",
    "xid_info",
    "xid_table",
]

MAX_LINE_BYTES: Final = 64 * 1024

_TRIGGER: Final = re.compile(
    r"Xid|EDAC|Hardware|AER|PCIe Bus Error|Memory failure|SIGBUS|events:|NVRM|Machine|MCE"
    r"|CMCI occurred|POLLED occurred|mce_record|mc_event|status=0x"
)
_PARSERS: Final = (XidParser, EdacParser, KernelMceParser, ConsoleMceParser, GhesParser, AerParser,
                   McelogParser, RasMcCtlParser, RasdaemonTraceParser, MemoryFailureParser)


class TelemetryScanner:
    """The hardware events of a log, fed one line at a time (push): for a
    reader that reads the log once for several purposes (see
    :mod:`coreepi.ingest.hostlog`). ``host_id`` and ``name`` as in
    :func:`parse_telemetry`. Feed every line, in order, with
    :meth:`feed`; then :meth:`close` once."""

    def __init__(self, *, host_id: str | None = None, name: str | None = None) -> None:
        self._ctx = Context(host_id=host_id, name=name)
        self._parsers: list[FamilyParser] = [cls(self._ctx) for cls in _PARSERS]
        self._fold = Fold()
        self.lines = 0

    def feed(self, text: str) -> list[TelemetryEvent]:
        """The events that this line (without its newline) completes, maybe none."""
        self.lines += 1
        parsers = self._parsers
        # Most lines of a log are not hardware events: skip them unless a
        # record that reads keyword-less lines (mcelog, ras-mc-ctl, old
        # AER) is open. Skipped lines still count for the record gaps.
        if _TRIGGER.search(text) is None and not any(p.busy for p in parsers):
            return []
        line = split_prefix(self.lines, text)
        out: list[TelemetryEvent] = []
        for index, parser in enumerate(parsers):
            try:
                out.extend(parser.feed(line))
            except Exception:  # noqa: BLE001 - one family's bug must not stop the others
                parsers[index] = _PARSERS[index](self._ctx)
        return self._fold.take(out, self.lines)

    def close(self) -> list[TelemetryEvent]:
        """The events of the records still open at the end of the input."""
        out: list[TelemetryEvent] = []
        for parser in self._parsers:
            try:
                out.extend(parser.flush())
            except Exception:  # noqa: BLE001, S112 - one family's bug must not stop the others
                continue
        return self._fold.close(out)


def parse_telemetry(
    source: Path | Iterable[str],
    *,
    host_id: str | None = None,
    name: str | None = None,
) -> Iterator[TelemetryEvent]:
    """Stream the hardware events of a kernel log or tool output.

    ``source``: a path (``os.PathLike``; compressed files are decompressed,
    see :mod:`coreepi.parse.open_input`), the text as ``str`` / ``bytes``, a
    binary file object, or an iterable of lines. ``host_id`` is copied into
    every event; ``name`` identifies the input in ``source`` and in event
    ids (defaults to the path). Single-line events come out as their line is
    read, multi-line records (MCE, AER, GHES, mcelog) when they close, so the
    order is log order up to a few lines. Memory stays bounded whatever the
    input size.

    Raises OSError when the path cannot be read, and
    :class:`~coreepi.parse.open_input.DecompressionError` (naming the file
    and the line where it stops) when a compressed file is cut short or
    corrupt — after the events of every line before it.
    """
    if name is None and isinstance(source, os.PathLike):
        name = os.fspath(source)
    scanner = TelemetryScanner(host_id=host_id, name=name)
    try:
        for text in log_lines(source, MAX_LINE_BYTES):  # type: ignore[arg-type]
            yield from scanner.feed(text)
    except DecompressionError:
        yield from scanner.close()  # the records open where the input stops
        raise
    yield from scanner.close()


_SIGBUS: Final = 7  # x86, arm, arm64, riscv, powerpc, s390
_MCEERR: Final = {4: "BUS_MCEERR_AR", 5: "BUS_MCEERR_AO"}


def event_from_crash(report: CrashReport) -> TelemetryEvent | None:
    """A ``sigbus_mce`` event for a process killed by SIGBUS with
    ``BUS_MCEERR_AR`` (it consumed poisoned memory) or ``BUS_MCEERR_AO``
    (poison found in its memory, e.g. by the scrubber); None for any other
    crash. The id derives from the crash id, so re-uploads collide."""
    signal = report.signal
    if signal is None:
        return None
    code = (signal.si_code_name or "").upper()
    if not code.startswith("BUS_MCEERR"):
        is_sigbus = signal.name == "SIGBUS" or (signal.name is None and signal.number == _SIGBUS)
        if not is_sigbus or signal.si_code not in _MCEERR:
            return None
        code = _MCEERR[signal.si_code]  # type: ignore[index]
    process = report.process
    who = process.comm or (os.path.basename(process.exe) if process.exe else None) or "process"
    address = f"0x{signal.fault_address:x}" if signal.fault_address is not None else None
    required = code.endswith("_AR")
    summary = f"{who}"
    summary += f" (pid {process.pid})" if process.pid is not None else ""
    summary += f" killed by SIGBUS {code}: uncorrected memory error"
    summary += f" at {address}" if address else ""
    ts = report.captured_at
    if ts is not None and ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return TelemetryEvent(
        event_id=event_id(report.host_id, "crash", report.crash_id, code),
        host_id=report.host_id,
        ts=ts,
        kind=EventKind.SIGBUS_MCE,
        severity="uncorrected",
        component=f"memory at {address}" if address else None,
        summary=summary,
        hardware_indicative=True,
        detail={
            "crash_id": report.crash_id,
            "pid": process.pid,
            "process": process.comm,
            "exe": process.exe,
            "signal": signal.name or "SIGBUS",
            "si_code_name": code,
            "action_required": required,
            "fault_address": address,
        },
        source=f"crash {report.crash_id}",
    )


_MARKERS: Final = re.compile(
    rb"NVRM: Xid \(|SXid \(|EDAC MC\d+: (?:\d+ )?[CU]E\b|\[Hardware Error\]: |Machine Check"
    rb"|Hardware event\. This is not a software error\.|AER: |PCIe Bus Error: "
    rb"|^(?:Memory controller|MCE|PCIe AER) events:|Sending SIGBUS to .{1,64} due to hardware memory corruption"
    rb"|\bmce_record: +\d{4}-|\bmc_event:? +(?:\[[A-Z]{1,8}\] +)?\d{4}-",
    re.MULTILINE,
)


def looks_like_telemetry(head: bytes) -> bool:
    """Content sniffing: does this start of a file hold hardware events
    (Xid, EDAC CE/UE, machine checks, AER, mcelog / rasdaemon records)?
    Never raises."""
    try:
        data = bytes(head[: 1 << 20])
        if not data or b"\x00" in data[:4096]:
            return False
        return _MARKERS.search(data) is not None
    except Exception:  # noqa: BLE001 - sniffing must not fail
        return False
