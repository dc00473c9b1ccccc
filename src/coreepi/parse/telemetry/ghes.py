"""APEI / GHES hardware error records into events.

* **APEI / GHES** (``drivers/firmware/efi/cper.c``), lines prefixed
  ``{N}[Hardware Error]: ``: the record's ``section_type`` decides the kind
  (memory error -> ``edac_*``, PCIe error -> ``aer``, processor -> ``mce``).
"""

from __future__ import annotations

import re
from typing import Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, Record, make_event
from coreepi.parse.telemetry.mca import GAP

__all__ = ["GhesParser"]

# --------------------------------------------------------------------------- GHES / CPER

_GHES: Final = re.compile(r"\{(\d{1,6})\}\[Hardware Error\]: ?(.*)$")
_GHES_FIELD: Final = re.compile(r"^([a-zA-Z_ ]{1,40}?): (.{0,300})$")
_MAX_GHES: Final = 16


class GhesParser:
    """``{N}[Hardware Error]:`` CPER records printed by the APEI GHES driver."""


    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._open: dict[str, Record] = {}

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        if self._open:
            for key in [k for k, r in self._open.items() if line.number - r.last > GAP]:
                out.extend(self._close(key))
        if "}[Hardware Error]:" not in line.message:
            return out
        match = _GHES.search(line.message)
        if match is None:
            return out
        key, body = match.group(1), match.group(2).strip()
        if body.startswith("Hardware error from APEI Generic Hardware Error Source"):
            out.extend(self._close(key))
            if len(self._open) >= _MAX_GHES:
                out.extend(self._close(next(iter(self._open))))
            self._open[key] = Record(key)
            self._open[key].fields["error_source"] = body.rsplit(":", 1)[-1].strip()
        record = self._open.get(key)
        if record is None:
            return out
        record.add(line)
        parts = re.findall(r"\b(node|card|module|rank|bank|device|row|column|bit_position|"
                           r"requestor_id|responder_id): ?(\S+)", body)
        for name, value in parts:
            record.fields.setdefault(name, value)
        field = None if len(parts) > 1 else _GHES_FIELD.match(body)
        if field is not None:
            name = field.group(1).strip().replace(" ", "_").lower()
            if name not in record.fields and len(record.fields) < 64:
                record.fields[name] = field.group(2).strip()
        elif body.startswith("Error ") and ", type: " in body:
            record.fields.setdefault("type", body.rsplit(", type: ", 1)[-1].strip())
        return out

    def _close(self, key: str) -> list[TelemetryEvent]:
        record = self._open.pop(key, None)
        if record is None or len(record.lines) < 2:
            return []
        f = record.fields
        severity = str(f.get("event_severity") or f.get("type") or "").lower() or None
        section = str(f.get("section_type", "")).lower()
        detail = {"source": "ghes", **{k: v for k, v in f.items() if isinstance(v, str)}}
        if "memory" in section:
            corrected = severity == "corrected"
            kind = EventKind.EDAC_CE if corrected else EventKind.EDAC_UE
            location = f.get("dimm_location")
            if str(location).startswith("not present"):  # cper.c: firmware named no DIMM
                location = None
            component = location or (f"node {f['node']} card {f['card']} module {f['module']}"
                                     if "module" in f else None)
            summary = f"{severity or 'unknown-severity'} memory error (APEI)" + (
                f" on {component}" if component else "")
        elif "pcie" in section:
            kind, component = EventKind.AER, f"PCIe {f.get('device_id', '?')}"
            summary = f"{severity or 'unknown-severity'} PCIe error (APEI) on {f.get('device_id', '?')}"
        elif "processor" in section:
            kind, component = EventKind.MCE, None
            summary = f"{severity or 'unknown-severity'} processor error (APEI)"
        else:
            kind, component = EventKind.OTHER, None
            summary = f"{severity or 'unknown-severity'} hardware error (APEI): {section or 'unknown section'}"
        return [make_event(self.ctx, record.lines, kind, summary, severity=severity, component=component,
                           hardware_indicative=True, detail=detail)]

    def flush(self) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        for key in list(self._open):
            out.extend(self._close(key))
        return out
