"""mcelog's machine-check records into ``mce`` events.

* **mcelog** text (``mcelog --ascii``, ``/var/log/mcelog``, syslog
  ``mcelog:``), as printed by mcelog's ``dump_mce``: ``Hardware event. This
  is not a software error.`` then ``CPU n BANK b``, ``MISC … ADDR …``,
  ``TIME …``, ``MCi status:`` flags, ``MCA: …``, ``STATUS … MCGSTATUS …``,
  ``MCGCAP … APICID … SOCKETID …``, ``CPUID Vendor … Family … Model …``.
"""

from __future__ import annotations

import re
from typing import Final

from coreepi.model.events import TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, Record, hex_int
from coreepi.parse.telemetry.mca import mce_event

__all__ = ["McelogParser"]

# --------------------------------------------------------------------------- mcelog

_MCELOG_HEADER: Final = "Hardware event. This is not a software error."
_MCELOG_CPU: Final = re.compile(r"^CPU (\d{1,5}) (?:BANK (\d{1,4})|(THERMAL EVENT))(?: TSC ([0-9a-fA-F]{1,16}))?")
_MCELOG_STATUS: Final = re.compile(r"^STATUS ([0-9a-fA-F]{1,16}) MCGSTATUS ([0-9a-fA-F]{1,16})")
_MCELOG_CAP: Final = re.compile(r"^MCGCAP ([0-9a-fA-F]{1,16}) APICID ([0-9a-fA-F]{1,8}) SOCKETID (\d{1,5})")
_MCELOG_CPUID: Final = re.compile(r"^CPUID Vendor (\w{1,20}) Family (\d{1,4}) Model (\d{1,4})")
_MCELOG_SOCKET: Final = re.compile(r"^SOCKET (\d{1,5}) APIC ([0-9a-fA-F]{1,8})(?: microcode ([0-9a-fA-F]{1,16}))?")
_MCELOG_TIME: Final = re.compile(r"^TIME (\d{1,20})")
_MCELOG_RIP: Final = re.compile(r"^RIP( !INEXACT!)? ([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,16})")
_MCELOG_FLAGS: Final = frozenset({
    "Corrected error", "Uncorrected error", "Error enabled", "MCi_MISC register valid",
    "MCi_ADDR register valid", "Processor context corrupt", "SRAR", "SRAO", "UCNA", "Error overflow",
    "Error overflowed", "Firmware updated error",
})


class McelogParser:
    """Records of mcelog's text output."""

    LIMIT: Final = 80  # lines after which an unfinished record is closed

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._open: Record | None = None

    @property
    def busy(self) -> bool:
        return self._open is not None

    def _close(self) -> list[TelemetryEvent]:
        record, self._open = self._open, None
        if record is None:
            return []
        f = record.fields
        if f.get("status") is None and f.get("bank") is None and not f.get("thermal"):
            return []
        return [mce_event(self.ctx, record, "mcelog")]

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        record = self._open
        if record is not None and line.number - record.lines[0].number > self.LIMIT:
            out.extend(self._close())
            record = None
        body = line.message.strip()
        if body.startswith("mcelog: ") and line.program != "mcelog":
            body = body[8:].strip()
        if body.startswith(_MCELOG_HEADER):
            if record is None or self._has_content(record):
                out.extend(self._close())
                self._open = Record("mcelog")
            self._open.add(line)  # type: ignore[union-attr]
            return out
        if record is None or not body:
            if record is not None and self._has_content(record):
                out.extend(self._close())  # a blank line ends a record
            return out
        if self._field(record, body):
            record.add(line)
        return out

    @staticmethod
    def _has_content(record: Record) -> bool:
        return any(k in record.fields for k in ("cpu", "status", "bank"))

    def _field(self, record: Record, body: str) -> bool:
        f = record.fields
        match = _MCELOG_CPU.match(body)
        if match is not None:
            f["cpu"] = int(match.group(1))
            if match.group(2):
                f["bank"] = int(match.group(2))
            if match.group(3):
                f["thermal"] = True
            f["tsc"] = hex_int(match.group(4))
            return True
        match = _MCELOG_STATUS.match(body)
        if match is not None:
            f["status"], f["mcg_status"] = hex_int(match.group(1)), hex_int(match.group(2))
            return True
        if body.startswith(("MISC ", "ADDR ")):
            parts = body.split()
            for key, value in zip(parts[::2], parts[1::2], strict=False):
                if key in ("MISC", "ADDR"):
                    f[key.lower()] = hex_int(value)
            return True
        match = _MCELOG_TIME.match(body)
        if match is not None:
            f["time"] = int(match.group(1))
            return True
        match = _MCELOG_CAP.match(body)
        if match is not None:
            f["mcgcap"], f["apic"], f["socket"] = hex_int(match.group(1)), int(match.group(2), 16), int(match.group(3))
            return True
        match = _MCELOG_CPUID.match(body)
        if match is not None:
            f["cpu_vendor"], f["family"], f["model"] = match.group(1), int(match.group(2)), int(match.group(3))
            return True
        match = _MCELOG_SOCKET.match(body)
        if match is not None:
            f["socket"], f["apic"] = int(match.group(1)), int(match.group(2), 16)
            f["microcode"] = hex_int(match.group(3))
            return True
        match = _MCELOG_RIP.match(body)
        if match is not None:
            f["rip"] = f"{match.group(2)}:0x{match.group(3).lower()}" + (" (inexact)" if match.group(1) else "")
            return True
        if body in _MCELOG_FLAGS:
            flags = f.setdefault("flags", [])
            if len(flags) < 16:
                flags.append(body)
            return True
        if body.startswith(("MCE ", "MCG status:", "MCi status:", "PPIN ")):
            if body.startswith("MCG status:") and body[11:].strip():
                f["mcg_flags"] = body[11:].strip()
            return True
        if body.startswith(("MCA: ", "Transaction: ", "Memory ", "RIP: ", "Processor ", "Please check",
                            "STATUS ", "Location", "DIMM ", "Running trigger", "Unknown CPU")):
            decoded = f.setdefault("decoded", [])
            if len(decoded) < 16:
                decoded.append(body[:300])
            return True
        return False

    def flush(self) -> list[TelemetryEvent]:
        return self._close()
