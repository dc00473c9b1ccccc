"""PCIe Advanced Error Reporting lines into ``aer`` events.

Format: ``drivers/pci/pcie/aer.c`` (``aer_print_port_info``,
``aer_print_error``, ``__aer_print_error``)::

    pcieport 0000:00:1c.5: AER: Corrected error received: 0000:03:00.0
    r8169 0000:03:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
    r8169 0000:03:00.0:   device [10ec:8168] error status/mask=00000001/00002000
    r8169 0000:03:00.0:    [ 0] RxErr                  (First)

    pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0
    nvme 0000:01:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)
    nvme 0000:01:00.0: AER:   device [144d:a808] error status/mask=00004000/00000000
    nvme 0000:01:00.0: AER:    [14] CmpltTO                (First)
    nvme 0000:01:00.0: AER:   TLP Header: 40000001 0000000f 9a9f0000 00000000
    pcieport 0000:00:01.0: AER: device recovery failed

Kernels since 5.x put ``AER: `` in every line; 6.x say ``Correctable`` /
``Uncorrectable`` and ``error message received from``; 3.x print ``id=00e0``
instead of the source device and ``aer 0000:00:03.0:pcie02:`` as device.
All of these are read. The ``error received`` line of the root port and the
``PCIe Bus Error`` block of the device it names are grouped into one event
(per device, so interleaved devices do not mix); a ``received`` line with no
block after it (rate-limited) is an event by itself.
"""

from __future__ import annotations

import re
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, Record, make_event

__all__ = ["AerParser", "aer_severity"]

GAP: Final = 8
_BDF: Final = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_DEVICE: Final = re.compile(r"(?:^|\s)(\S{1,64}) (" + _BDF + r")(?::pcie\d{1,4})?: (?:AER: ?)?(.*)$")
_RECEIVED: Final = re.compile(
    r"^(Multiple )?(Corrected|Correctable|Uncorrected \((?:Non-)?Fatal\)|Uncorrectable \((?:Non-)?Fatal\)) "
    r"error (?:message )?received(?::| from)? ?(?:id=([0-9a-fA-F]{4})|(" + _BDF + r"))?"
)
_BUS_ERROR: Final = re.compile(
    r"^PCIe Bus Error: severity=([^,]{1,40}), type=([^,]{1,40}),? ?(?:id=([0-9a-fA-F]{4}))?\(?([\w ]{0,30}ID)?\)?"
)
_STATUS: Final = re.compile(
    r"^device \[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\] error status/mask=([0-9a-fA-F]{1,8})/([0-9a-fA-F]{1,8})"
)
_BIT: Final = re.compile(r"^\[ ?(\d{1,2})\] ?(.*?)\s*(\(First\))?$")
_RECOVERY: Final = re.compile(r"(?:[Dd]evice recovery (successful|failed)|(Root Port link has been reset)"
                              r"|(broadcast \w+ message))")
_MAX_OPEN: Final = 32


def aer_severity(text: str) -> str:
    """``Corrected`` / ``Correctable`` -> corrected, ``Uncorrected
    (Non-Fatal)`` -> uncorrected, ``Uncorrected (Fatal)`` -> fatal."""
    lowered = text.lower()
    if "non-fatal" in lowered or "nonfatal" in lowered:
        return "uncorrected"
    if "fatal" in lowered:
        return "fatal"
    if lowered.startswith("correct"):
        return "corrected"
    if lowered.startswith("uncorrect"):
        return "uncorrected"
    return lowered.strip() or "unknown"


class AerParser:
    """Feeds on log lines; groups each device's AER block into one event."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._open: dict[str, Record] = {}
        self._received: list[tuple[LogLine, dict[str, Any]]] = []

    @property
    def busy(self) -> bool:
        return bool(self._open)

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        if self._open or self._received:
            self._expire(line.number, out)
        message = line.message
        if "AER" not in message and "PCIe Bus Error" not in message and not self._open:
            return out
        match = _DEVICE.search(message)
        if match is None:
            return out
        driver, device, body = match.group(1), match.group(2).lower(), match.group(3).strip()
        self._body(line, driver, device, body, out)
        return out

    def _expire(self, number: int, out: list[TelemetryEvent]) -> None:
        for key in [k for k, r in self._open.items() if number - r.last > GAP]:
            out.extend(self._close(key))
        while self._received and number - self._received[0][0].number > GAP:
            line, info = self._received.pop(0)
            out.append(self._received_event(line, info))

    def _body(self, line: LogLine, driver: str, device: str, body: str, out: list[TelemetryEvent]) -> None:
        match = _RECEIVED.match(body)
        if match is not None:
            multiple, severity, source_id, source = match.groups()
            info = {"root_port": device, "severity_text": severity, "multiple": bool(multiple),
                    "source_device": source.lower() if source else None, "source_id": source_id}
            if len(self._received) >= _MAX_OPEN:
                old_line, old = self._received.pop(0)
                out.append(self._received_event(old_line, old))
            self._received.append((line, info))
            return
        match = _BUS_ERROR.match(body)
        if match is not None:
            out.extend(self._close(device))
            if len(self._open) >= _MAX_OPEN:
                out.extend(self._close(next(iter(self._open))))
            record = Record(device)
            severity, layer, agent_id, agent = match.groups()
            record.fields.update(device=device, driver=driver, severity_text=severity.strip(),
                                 type=layer.strip(), agent=(agent or "").strip() or None, agent_id=agent_id)
            received = self._take_received(device)
            if received is not None:
                record.add(received[0])
                record.fields.update({k: v for k, v in received[1].items() if k != "severity_text"})
            record.add(line)
            self._open[device] = record
            return
        record = self._open.get(device)
        recovery = _RECOVERY.search(body)
        if recovery is not None:
            target = record or (next(reversed(self._open.values())) if self._open else None)
            if target is not None:
                target.add(line)
                target.fields["recovery"] = recovery.group(0)
            return
        if record is None:
            return
        match = _STATUS.match(body)
        if match is not None:
            vendor, dev_id, status, mask = match.groups()
            record.fields.update(vendor_id=vendor.lower(), device_id=dev_id.lower(),
                                 status=f"0x{status.lower()}", mask=f"0x{mask.lower()}")
            record.add(line)
            return
        match = _BIT.match(body)
        if match is not None:
            bit, name, first = match.groups()
            errors = record.fields.setdefault("errors", [])
            if len(errors) < 32:
                errors.append({"bit": int(bit), "name": name, "first": bool(first)})
            record.add(line)
            return
        if body.startswith("TLP Header:"):
            record.fields["tlp_header"] = body[11:].strip()[:200]
            record.add(line)
        elif body.startswith("Error of this Agent"):
            record.add(line)

    def _take_received(self, device: str) -> tuple[LogLine, dict[str, Any]] | None:
        for index, (line, info) in enumerate(self._received):
            if info["source_device"] in (device, None) or info["root_port"] == device:
                return self._received.pop(index)
        return None

    def _close(self, key: str) -> list[TelemetryEvent]:
        record = self._open.pop(key, None)
        if record is None:
            return []
        f = record.fields
        severity = aer_severity(str(f.get("severity_text", "")))
        detail: dict[str, Any] = {k: v for k, v in f.items() if v is not None}
        names = [e["name"] for e in f.get("errors", [])]
        first = next((e["name"] for e in f.get("errors", []) if e["first"]), None)
        if first:
            detail["first_error"] = first
        summary = f"PCIe {severity} error on {f['device']} ({f.get('type', '?')})"
        if names:
            summary += ": " + ", ".join(names[:6])
        if f.get("recovery"):
            summary += f"; {f['recovery']}"
        return [make_event(self.ctx, record.lines, EventKind.AER, summary, severity=severity,
                           component=f"PCIe {f['device']}", hardware_indicative=True, detail=detail)]

    def _received_event(self, line: LogLine, info: dict[str, Any]) -> TelemetryEvent:
        severity = aer_severity(info["severity_text"])
        where = info["source_device"] or info["root_port"]
        detail = {k: v for k, v in info.items() if v is not None}
        detail["device"] = where
        summary = f"PCIe {severity} error{'s' if info['multiple'] else ''} received by {info['root_port']}"
        if info["source_device"]:
            summary += f" from {info['source_device']}"
        return make_event(self.ctx, [line], EventKind.AER, summary, severity=severity,
                          component=f"PCIe {where}", hardware_indicative=True, detail=detail)

    def flush(self) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        for key in list(self._open):
            out.extend(self._close(key))
        for line, info in self._received:
            out.append(self._received_event(line, info))
        self._received.clear()
        return out
