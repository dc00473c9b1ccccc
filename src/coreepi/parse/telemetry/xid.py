"""NVIDIA Xid (and NVSwitch SXid) lines into ``xid`` events.

The NVIDIA driver (``NVRM``) prints one line per Xid::

    NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC …
    NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on …
    NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
    NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000     (older drivers)

NVLink5 Xids (144-150) carry their own severity after the unit name
(``…: 149, NETIR_LINK_EVT Fatal XC0 …``, ``…: 145, RLW_RXPIPE Nonfatal
…``); it overrides the catalog's. The word elsewhere in a message is free
text: it changes nothing (an Xid 119 GSP timeout is the catalog's "error"
whatever its message says). A GPU that falls off the bus while the driver probes it gets no
Xid line, only::

    NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.
    NVRM: The NVIDIA GPU 0000:b3:00.0
                   NVRM: (PCI ID: 10de:26b5) installed in this system has
                   NVRM: fallen off the bus and is not responding to commands.

which is read as Xid 79 (``detail.xid_line`` False); one GPU falling off
is one event even when both forms are printed.

And, before the first Xid of a GPU, ``NVRM: GPU at PCI:0000:9b:00:
GPU-<uuid>`` and ``NVRM: GPU Board Serial Number: …``, which are kept
(bounded) and added to that GPU's events. NVSwitch drivers print ``SXid``
lines the same way (``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028,
Non-fatal, …``).

Extracted: code, PCI address, pid, process name, the driver's message, and
from :file:`data/nvidia_xid.toml` (NVIDIA's public Xid documentation) the
code's name, mnemonic, meaning, usual cause, NVIDIA's immediate action and
whether it is hardware-indicative.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, make_event

__all__ = ["XidInfo", "XidParser", "xid_info", "xid_table"]

_XID: Final = re.compile(
    r"\b(S?)Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d{1,6})\b,? ?(.*)$"
)
_PID: Final = re.compile(r"pid=(?:'([^']*)'|([^,\s]*)),?\s*")
_NAME: Final = re.compile(r"name=([^,]*),?\s*")
_GPU_AT: Final = re.compile(r"NVRM: GPU at (?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?): (GPU-[0-9a-fA-F-]{8,64})")
_SERIAL: Final = re.compile(r"NVRM: GPU Board Serial Number: (\S+)")
_MAX_GPUS: Final = 256
_PCI: Final = r"(?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
_OFF_BUS: Final = re.compile(r"NVRM: GPU (?:at )?" + _PCI + r": GPU has fallen off the bus")
_THE_GPU: Final = re.compile(r"NVRM: The NVIDIA GPU " + _PCI + r"\s*$")
# NVLink5 Xids (144-150) state their severity right after the unit that
# raised them ("NETIR_LINK_EVT Fatal XC0 …", "SAW_MVB Nonfatal XC0 …"); only
# there is the word the driver's verdict. Anywhere else ("… GSP! … Fatal",
# a process named Fatal) it is free text and the catalog's severity stands,
# so one Xid line always gets one severity.
_OWN_SEVERITY: Final = re.compile(r"[A-Z][A-Z0-9_]{0,63} (Fatal|Nonfatal|Non-fatal)\b")
_FELL_OFF: Final = 79
_SAME_FALL_LINES: Final = 100  # an Xid 79 and the off-bus message this close are one fall
_OFF_BUS_LINES: Final = 3  # "The NVIDIA GPU …" is continued on at most this many lines
_UNKNOWN: Final = frozenset({"", "<unknown>", "N/A", "n/a", "unknown"})


@dataclass(frozen=True)
class XidInfo:
    """One row of the Xid table (see ``data/nvidia_xid.toml``)."""

    code: int
    name: str
    mnemonic: str
    meaning: str
    cause: str
    action: str
    hardware_indicative: bool
    severity: str


@lru_cache(maxsize=1)
def _load() -> tuple[dict[int, XidInfo], str]:
    text = resources.files("coreepi.parse.telemetry").joinpath("data/nvidia_xid.toml").read_text("utf-8")
    data = tomllib.loads(text)
    table: dict[int, XidInfo] = {}
    for key, row in data.get("xid", {}).items():
        code = int(key)
        table[code] = XidInfo(
            code=code,
            name=str(row["name"]),
            mnemonic=str(row.get("mnemonic", "")),
            meaning=str(row.get("meaning", "")),
            cause=str(row.get("cause", "")),
            action=str(row.get("action", "")),
            hardware_indicative=bool(row.get("hardware_indicative", False)),
            severity=str(row.get("severity", "error")),
        )
    return table, str(data.get("source", ""))


def xid_table() -> dict[int, XidInfo]:
    """Every Xid code coreepi knows, from NVIDIA's public documentation."""
    return dict(_load()[0])


def xid_info(code: int) -> XidInfo | None:
    """What Xid ``code`` means, or None for a code not in the table."""
    return _load()[0].get(code)


def _pci(text: str) -> str:
    return text.lower()


def _known(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return None if text in _UNKNOWN else text


def _split_rest(rest: str) -> tuple[int | None, str | None, str]:
    """``pid=…, name=…, message`` -> (pid, process, message)."""
    pid: int | None = None
    process: str | None = None
    match = _PID.match(rest)
    if match is not None:
        value = _known(match.group(1) if match.group(1) is not None else match.group(2))
        pid = int(value) if value is not None and value.isdigit() else None
        rest = rest[match.end():]
        match = _NAME.match(rest)
        if match is not None:
            process = _known(match.group(1))
            rest = rest[match.end():]
    return pid, process, rest.strip()


class XidParser:
    """Feeds on log lines; one event per Xid / SXid line."""


    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._gpus: dict[str, dict[str, str]] = {}
        self._last_gpu: str | None = None
        self._fell: dict[str, int] = {}  # GPU -> line of its last fall off the bus
        self._pending: tuple[str, list[LogLine]] | None = None  # "The NVIDIA GPU …" waiting for its end

    def _remember(self, pci: str, key: str, value: str) -> None:
        if pci not in self._gpus and len(self._gpus) >= _MAX_GPUS:
            self._gpus.pop(next(iter(self._gpus)))
        self._gpus.setdefault(pci, {})[key] = value

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        message = line.message
        if "Xid" not in message:
            return self._nvrm_line(line, message) if "NVRM: " in message else []
        match = _XID.search(message)
        if match is None:
            return []
        switch, pci, code_text, rest = match.groups()
        code = int(code_text)
        if not switch and code == _FELL_OFF and self._fell_again(_pci(pci), line):
            return []
        return [self._event(line, bool(switch), _pci(pci), code, rest)]

    def flush(self) -> list[TelemetryEvent]:
        return []

    def _fell_again(self, pci: str, line: LogLine) -> bool:
        """Whether this GPU's fall off the bus was already reported (the
        driver may print both an Xid 79 and its off-bus message)."""
        last = self._fell.get(pci)
        if len(self._fell) >= _MAX_GPUS and pci not in self._fell:
            self._fell.pop(next(iter(self._fell)))
        self._fell[pci] = line.number
        return last is not None and line.number - last <= _SAME_FALL_LINES

    def _nvrm_line(self, line: LogLine, message: str) -> list[TelemetryEvent]:
        """NVRM lines without an Xid: GPU identity, or a fall off the bus."""
        if self._pending is not None:
            pci, lines = self._pending
            if line.number - lines[-1].number <= 1 and len(lines) <= _OFF_BUS_LINES:
                lines.append(line)
                if "fallen off the bus" in message:
                    self._pending = None
                    return self._off_bus(pci, lines)
                return []
            self._pending = None
        if (match := _THE_GPU.search(message)) is not None:
            self._pending = (_pci(match.group(1)), [line])
        elif (match := _OFF_BUS.search(message)) is not None:
            return self._off_bus(_pci(match.group(1)), [line])
        elif "NVRM: GPU " in message:
            self._gpu_line(message)
        return []

    def _off_bus(self, pci: str, lines: list[LogLine]) -> list[TelemetryEvent]:
        if self._fell_again(pci, lines[-1]):
            return []
        info = xid_info(_FELL_OFF)
        assert info is not None  # 79 is in NVIDIA's table
        text = " ".join(l.message.split("NVRM: ", 1)[-1].strip() for l in lines)
        detail: dict[str, Any] = {
            "code": _FELL_OFF, "pci_address": pci, "xid_line": False, "message": text[:1000], "known": True,
            "name": info.name, "mnemonic": info.mnemonic, "meaning": info.meaning, "usual_cause": info.cause,
            "nvidia_action": info.action, "documentation": _load()[1], **self._gpus.get(pci, {}),
        }
        summary = f"GPU {pci} has fallen off the bus (no Xid line; read as Xid {_FELL_OFF})"
        return [make_event(self.ctx, lines, EventKind.XID, summary, severity=info.severity,
                           component=f"GPU {pci}", hardware_indicative=True, detail=detail)]

    def _gpu_line(self, message: str) -> None:
        match = _GPU_AT.search(message)
        if match is not None:
            self._last_gpu = _pci(match.group(1))
            self._remember(self._last_gpu, "gpu_uuid", match.group(2))
            return
        match = _SERIAL.search(message)
        if match is not None and self._last_gpu is not None:
            self._remember(self._last_gpu, "board_serial", match.group(1))

    def _event(self, line: LogLine, switch: bool, pci: str, code: int, rest: str) -> TelemetryEvent:
        detail: dict[str, Any] = {"code": code, "pci_address": pci}
        if switch:
            return self._sxid(line, pci, code, rest, detail)
        pid, process, text = _split_rest(rest)
        detail.update(pid=pid, process=process, message=text[:1000], xid_line=True)
        detail.update(self._gpus.get(pci, {}))
        info = xid_info(code)
        if info is None:
            detail.update(known=False, documentation=_load()[1])
            name = "unknown Xid"
            hardware, severity = False, "error"
        else:
            detail.update(
                known=True, name=info.name, mnemonic=info.mnemonic, meaning=info.meaning,
                usual_cause=info.cause, nvidia_action=info.action, documentation=_load()[1],
            )
            name, hardware, severity = info.name, info.hardware_indicative, info.severity
        own = _OWN_SEVERITY.match(text)
        if own is not None:  # the driver's own verdict beats the catalog's
            severity = "fatal" if own.group(1) == "Fatal" else "non-fatal"
            detail["severity_from"] = "line"
        who = f", pid {pid}" if pid is not None else ""
        who += f" {process}" if process else ""
        summary = f"Xid {code} ({name}) on GPU {pci}{who}"
        return make_event(self.ctx, [line], EventKind.XID, summary, severity=severity,
                          component=f"GPU {pci}", hardware_indicative=hardware, detail=detail)

    def _sxid(self, line: LogLine, pci: str, code: int, rest: str, detail: dict[str, Any]) -> TelemetryEvent:
        level, _, text = rest.partition(",")
        fatal = level.strip().lower() == "fatal"
        detail.update(switch=True, fatal=fatal, message=(text.strip() if level.strip() else rest)[:1000])
        summary = f"SXid {code} ({level.strip() or 'NVSwitch error'}) on NVSwitch {pci}"
        return make_event(self.ctx, [line], EventKind.XID, summary,
                          severity="fatal" if fatal else "non-fatal", component=f"NVSwitch {pci}",
                          hardware_indicative=fatal, detail=detail)
