"""Machine checks into ``mce`` events: kernel lines, mcelog, rasdaemon.

Four sources, each a multi-line record grouped into one event:

* **Kernel** (``arch/x86/kernel/cpu/mce/core.c``, ``__print_mce``), every
  line prefixed ``mce: [Hardware Error]: `` (``[Hardware Error]: `` on old
  kernels)::

      CPU 2: Machine Check: 0 Bank 7: cc0000f000010090
      TSC 0 ADDR 1f7fffbfc0 MISC 90840400400028c
      PROCESSOR 0:306f2 TIME 1431360573 SOCKET 0 APIC 2 microcode 2a
      Run the above through 'mcelog --ascii'
      Machine check: Processor context corrupt        (mce_panic)

  and AMD's decoder (``drivers/edac/mce_amd.c``, ``decode_smca_error`` /
  ``amd_decode_mce``)::

      [Hardware Error]: Corrected error, no action required.
      [Hardware Error]: CPU:2 (17:71:0) MC22_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2041000000011b
      [Hardware Error]: Error Addr: 0x0000000450f3b7c0
      [Hardware Error]: IPID: 0x0000009600350f00, Syndrome: 0x0000ccd10a800200

  ``mce: [Hardware Error]: Machine check events logged`` alone (details
  went to mcelog) is an event only when no detailed record is near it.
* **APEI / GHES** (``drivers/firmware/efi/cper.c``), lines prefixed
  ``{N}[Hardware Error]: ``: the record's ``section_type`` decides the kind
  (memory error -> ``edac_*``, PCIe error -> ``aer``, processor -> ``mce``).
* **mcelog** text (``mcelog --ascii``, ``/var/log/mcelog``, syslog
  ``mcelog:``), as printed by mcelog's ``dump_mce``: ``Hardware event. This
  is not a software error.`` then ``CPU n BANK b``, ``MISC … ADDR …``,
  ``TIME …``, ``MCi status:`` flags, ``MCA: …``, ``STATUS … MCGSTATUS …``,
  ``MCGCAP … APICID … SOCKETID …``, ``CPUID Vendor … Family … Model …``.
* **rasdaemon** ``ras-mc-ctl --errors`` (``util/ras-mc-ctl.in``, ``sub
  errors``): the ``Memory controller events:`` (-> ``edac_*``), ``PCIe AER
  events:`` (-> ``aer``) and ``MCE events:`` sections, one record a line.

Plus the kernel's memory-failure handler (``mm/memory-failure.c``,
``kill_proc``): ``Memory failure: 0x1234: Sending SIGBUS to app:4567 due to
hardware memory corruption`` -> a ``sigbus_mce`` event.

MCi_STATUS is decoded (VAL, OVER, UC, EN, MISCV, ADDRV, PCC, S, AR; the MCA
error code's class after the Intel SDM vol. 3B §16.9 "Interpreting the MCA
error codes") into ``severity``: ``corrected`` (UC=0), ``uncorrected``
(UC=1), ``fatal`` (UC=1 and PCC=1, or a machine-check panic).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.telemetry.base import Context, LogLine, Record, hex_int, make_event

__all__ = [
    "GhesParser",
    "KernelMceParser",
    "McelogParser",
    "MemoryFailureParser",
    "RasMcCtlParser",
    "decode_status",
    "mca_error_class",
]

GAP: Final = 8  # a record closes after this many lines without one of its own
_HW_ERR: Final = "[Hardware Error]: "
_KERNEL_START: Final = re.compile(
    r"^CPU (\d{1,5}): Machine Check( Exception)?: ([0-9a-fA-F]{1,16}) Bank (\d{1,4}): ([0-9a-fA-F]{1,16})"
)
_KERNEL_REGS: Final = re.compile(r"\b(TSC|ADDR|MISC|PPIN|SYND|IPID) ([0-9a-fA-F]{1,16})\b")
_KERNEL_RIP: Final = re.compile(r"^RIP( !INEXACT!)? ([0-9a-fA-F]{1,4}):<([0-9a-fA-F]{1,16})> ?(?:\{(.{0,200})\})?")
_KERNEL_PROC: Final = re.compile(
    r"^PROCESSOR (\d{1,3}):([0-9a-fA-F]{1,8}) TIME (\d{1,20}) SOCKET (\d{1,5}) APIC ([0-9a-fA-F]{1,8})"
    r"(?: microcode ([0-9a-fA-F]{1,16}))?"
)
_AMD_SEVERITY: Final = re.compile(
    r"^(Corrected error|Deferred error|Uncorrected|System Fatal error|Uncorrected error)[,.]? ?(.*)$"
)
_AMD_STATUS: Final = re.compile(
    r"^CPU:(\d{1,5}) \(([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4})\) MC(\d{1,4})_STATUS"
    r"\[([^\]]{0,200})\]: 0x([0-9a-fA-F]{1,16})"
)
_AMD_ADDR: Final = re.compile(r"^Error Addr: 0x([0-9a-fA-F]{1,16})")
_AMD_IPID: Final = re.compile(r"^IPID: 0x([0-9a-fA-F]{1,16})(?:, Syndrome: 0x([0-9a-fA-F]{1,16}))?")
_NOTICE: Final = "Machine check events logged"
_VENDORS: Final = {0: "Intel", 2: "AMD", 9: "Hygon", 5: "Centaur", 10: "Zhaoxin"}


def _bit(value: int, bit: int) -> bool:
    return bool(value >> bit & 1)


def mca_error_class(code: int) -> str:
    """Class of an MCA error code (MCi_STATUS bits 15:0), after the Intel
    SDM's simple and compound error codes (the filter bit 12 ignored)."""
    simple = {0x0000: "no error", 0x0001: "unclassified", 0x0002: "microcode ROM parity",
              0x0003: "external error", 0x0004: "FRC error", 0x0005: "internal parity error",
              0x0006: "SMM handler code access violation", 0x0400: "internal timer error"}
    if code in simple:
        return simple[code]
    if code & 0xFC00 == 0x0400:
        return "internal unclassified"
    code &= 0xEFFF
    if code & 0xFFF0 == 0x0010:
        return "TLB"
    if code & 0xFF80 == 0x0080:
        return "memory controller"
    if code & 0xFF00 == 0x0100:
        return "cache"
    if code & 0xF800 == 0x0800:
        return "bus/interconnect"
    return "other"


_MC_TRANSACTION: Final = ("generic", "read", "write", "address/command", "scrubbing")


def decode_status(status: int) -> dict[str, Any]:
    """The architectural bits of an MCi_STATUS value."""
    code = status & 0xFFFF
    info: dict[str, Any] = {
        "valid": _bit(status, 63), "overflow": _bit(status, 62), "uncorrected": _bit(status, 61),
        "enabled": _bit(status, 60), "misc_valid": _bit(status, 59), "addr_valid": _bit(status, 58),
        "pcc": _bit(status, 57), "signaled": _bit(status, 56), "action_required": _bit(status, 55),
        "mca_code": f"0x{code:04x}", "model_code": f"0x{status >> 16 & 0xFFFF:04x}",
        "error_class": mca_error_class(code),
    }
    if info["error_class"] == "memory controller":
        transaction = code >> 4 & 0x7
        info["mc_transaction"] = _MC_TRANSACTION[transaction] if transaction < 5 else "reserved"
        if code & 0xF != 0xF:
            info["mc_channel"] = code & 0xF
    return info


def _severity(status: int | None, fatal: bool = False, text: str = "") -> str | None:
    if fatal:
        return "fatal"
    if status is not None:
        if not _bit(status, 61):
            return "deferred" if "deferred" in text.lower() else "corrected"
        return "fatal" if _bit(status, 57) else "uncorrected"
    lowered = text.lower()
    if "fatal" in lowered or "context corrupt" in lowered:
        return "fatal"
    if "uncorrected" in lowered:
        return "uncorrected"
    if "deferred" in lowered:
        return "deferred"
    if "corrected" in lowered:
        return "corrected"
    return None


def _hex(value: int | None) -> str | None:
    return None if value is None else f"0x{value:x}"


def _epoch(seconds: int | None) -> datetime | None:
    if not seconds:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _mce_event(ctx: Context, record: Record, source: str, *, ts: datetime | None = None,
               extra: dict[str, Any] | None = None) -> TelemetryEvent:
    """An ``mce`` event from a record's fields (kernel, AMD decoder, mcelog)."""
    f = record.fields
    status = f.get("status")
    detail: dict[str, Any] = {"source": source, **(extra or {})}
    for key in ("cpu", "bank", "socket", "apic", "cpu_vendor", "cpuid", "family", "model"):
        if f.get(key) is not None:
            detail[key] = f[key]
    for key in ("status", "mcg_status", "addr", "misc", "tsc", "ppin", "synd", "ipid", "mcgcap", "microcode"):
        if f.get(key) is not None:
            detail[key] = _hex(f[key])
    for key in ("rip", "rip_symbol", "time", "exception", "panic", "amd_status_flags", "decoded", "flags",
                "thermal", "bank_name", "notice"):
        if f.get(key) not in (None, [], ""):
            detail[key] = f[key]
    if status is not None:
        detail.update(decode_status(status))
        if str(f.get("cpu_vendor", "")).startswith(("AMD", "Hygon")):
            for key in ("error_class", "mc_transaction", "mc_channel"):  # Intel SDM encodings
                detail.pop(key, None)
    text = " ".join([str(f.get("severity_text", "")), *map(str, f.get("flags", []))])
    severity = _severity(status, bool(f.get("panic")), text)
    if f.get("thermal"):
        severity = "thermal"
    cpu, bank = f.get("cpu"), f.get("bank")
    if cpu is not None and bank is not None:
        component = f"cpu {cpu} bank {bank}"
    elif cpu is not None:
        component = f"cpu {cpu}"
    elif f.get("socket") is not None:
        component = f"socket {f['socket']}"
    else:
        component = None
    what = detail.get("error_class") or (f.get("decoded") or [""])[0] or "machine check"
    summary = f"{severity or 'unknown-severity'} machine check" + (f" on {component}" if component else "")
    if what and what != "machine check":
        summary += f": {what}"
    if f.get("panic"):
        summary += f" (panic: {f['panic']})"
    if f.get("thermal"):
        summary = f"thermal event on {component or 'cpu'}: {' '.join(f.get('decoded', []))}".strip()
    line_ts = record.lines[0].ts
    return make_event(ctx, record.lines, EventKind.MCE, summary, severity=severity, component=component,
                      hardware_indicative=not f.get("thermal"), detail=detail,
                      ts=ts or line_ts or _epoch(f.get("time")))


# --------------------------------------------------------------------------- kernel


class KernelMceParser:
    """``mce: [Hardware Error]:`` records (Intel print and AMD decoder)."""


    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._open: Record | None = None
        self._last_closed = -10**9
        self._notice: LogLine | None = None

    def _expire(self, number: int, out: list[TelemetryEvent]) -> None:
        if self._open is not None and number - self._open.last > GAP:
            out.extend(self._close())
        if self._notice is not None and number - self._notice.number > 2 * GAP:
            out.append(self._notice_event(self._notice))
            self._notice = None

    def _close(self) -> list[TelemetryEvent]:
        record, self._open = self._open, None
        if record is None:
            return []
        self._last_closed = record.last
        f = record.fields
        if f.get("status") is None and f.get("bank") is None and not f.get("panic"):
            return []
        return [_mce_event(self.ctx, record, "kernel")]

    def _start(self, line: LogLine, out: list[TelemetryEvent]) -> Record:
        out.extend(self._close())
        self._open = Record("kernel")
        self._open.add(line)
        self._notice = None  # a detailed record follows the notice
        return self._open

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        if self._open is not None or self._notice is not None:
            self._expire(line.number, out)
        message = line.message
        index = message.find(_HW_ERR)
        if index < 0 or (index > 0 and message[index - 1] == "}"):
            return out
        body = message[index + len(_HW_ERR):].strip()
        self._body(line, body, out)
        return out

    def _body(self, line: LogLine, body: str, out: list[TelemetryEvent]) -> None:
        match = _KERNEL_START.match(body)
        if match is not None:
            record = self._start(line, out)
            cpu, exception, mcg, bank, status = match.groups()
            record.fields.update(cpu=int(cpu), exception=bool(exception), mcg_status=hex_int(mcg),
                                 bank=int(bank), status=hex_int(status))
            return
        match = _AMD_SEVERITY.match(body)
        if match is not None and "error" in body.lower():
            record = self._start(line, out)
            record.fields["severity_text"] = body
            return
        match = _AMD_STATUS.match(body)
        if match is not None:
            record = self._open
            if record is None or record.fields.get("bank") is not None:
                record = self._start(line, out)
            else:
                record.add(line)
            cpu, fam, mod, _step, bank, flags, status = match.groups()
            record.fields.update(cpu=int(cpu), bank=int(bank), status=hex_int(status), cpu_vendor="AMD",
                                 family=int(fam, 16), model=int(mod, 16),
                                 amd_status_flags=[x for x in flags.split("|") if x and x != "-"])
            return
        if body.startswith(_NOTICE):
            if self._open is None and line.number - self._last_closed > 2 * GAP and self._notice is None:
                self._notice = line
            return
        record = self._open
        if body.startswith("Machine check: "):
            if record is None:
                record = self._start(line, out)
            else:
                record.add(line)
            record.fields["panic"] = body[len("Machine check: "):][:300]
            return
        if record is None:
            return
        record.add(line)
        self._fields(record, body)

    def _fields(self, record: Record, body: str) -> None:
        f = record.fields
        if body.startswith("TSC "):
            for key, value in _KERNEL_REGS.findall(body):
                f[key.lower()] = hex_int(value)
            return
        match = _KERNEL_RIP.match(body)
        if match is not None:
            f["rip"] = f"{match.group(2)}:0x{match.group(3).lower()}" + (" (inexact)" if match.group(1) else "")
            if match.group(4):
                f["rip_symbol"] = match.group(4)
            return
        match = _KERNEL_PROC.match(body)
        if match is not None:
            vendor, cpuid, time, socket, apic, microcode = match.groups()
            f.update(cpu_vendor=_VENDORS.get(int(vendor), vendor), cpuid=f"0x{cpuid}", time=int(time),
                     socket=int(socket), apic=int(apic, 16), microcode=hex_int(microcode))
            return
        match = _AMD_ADDR.match(body)
        if match is not None:
            f["addr"] = hex_int(match.group(1))
            return
        match = _AMD_IPID.match(body)
        if match is not None:
            f["ipid"] = hex_int(match.group(1))
            if match.group(2):
                f["synd"] = hex_int(match.group(2))
            return
        if body.startswith("PPIN"):
            f["ppin"] = hex_int(body.split()[-1].removeprefix("0x")) if body.split() else None
            return
        if "mcelog --ascii" in body:
            return
        decoded = f.setdefault("decoded", [])
        if len(decoded) < 16:
            decoded.append(body[:300])

    def _notice_event(self, line: LogLine) -> TelemetryEvent:
        return make_event(self.ctx, [line], EventKind.MCE,
                          "machine check events logged (details went to mcelog / rasdaemon)",
                          severity=None, component=None, hardware_indicative=True,
                          detail={"source": "kernel", "notice": _NOTICE})

    def flush(self) -> list[TelemetryEvent]:
        out = self._close()
        if self._notice is not None:
            out.append(self._notice_event(self._notice))
            self._notice = None
        return out


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
            component = f.get("dimm_location") or (f"node {f['node']} card {f['card']} module {f['module']}"
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
        return [_mce_event(self.ctx, record, "mcelog")]

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


# --------------------------------------------------------------------------- rasdaemon

_RAS_DATE: Final = r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?: [+-]\d{4})?)"
_RAS_MC: Final = re.compile(r"^(\d{1,12}) " + _RAS_DATE + r" (\d{1,10}) (\w{1,20}) error\(s\): ?(.*)$")
_RAS_AER: Final = re.compile(
    r"^(\d{1,12}) " + _RAS_DATE + r" (?:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) )?(.{1,40}?) error: ?(.*)$"
)
_RAS_MCE: Final = re.compile(r"^(\d{1,12}) " + _RAS_DATE + r" error: ?(.*)$")
_RAS_KV: Final = re.compile(
    r"\b(mcgcap|mcgstatus|status|addr|misc|ip|tsc|walltime|cpu|cpuid|apicid|socketid|cs|bank|ppin|microcode)"
    r"=(0x[0-9a-fA-F]{1,16}|\d{1,20})"
)
_RAS_SECTIONS: Final = {"Memory controller events:": "mc", "PCIe AER events:": "aer", "MCE events:": "mce"}


def _ras_time(text: str) -> datetime | None:
    for fmt in ("%Y-%m-%d %H:%M:%S %z", "%Y-%m-%d %H:%M:%S"):
        try:
            when = datetime.strptime(text, fmt)
        except ValueError:
            continue
        return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    return None


def _ras_int(text: str) -> int | None:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


class RasMcCtlParser:
    """``ras-mc-ctl --errors`` output: one event per record line."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._section: str | None = None

    @property
    def busy(self) -> bool:
        return self._section is not None

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        body = line.message.strip()
        if body in _RAS_SECTIONS:
            self._section = _RAS_SECTIONS[body]
            return []
        if self._section is None:
            return []
        if not body or (body[0].isalpha() and body.endswith(":")):
            self._section = None  # a blank line or another section ends this one
            return []
        if self._section == "mc":
            match = _RAS_MC.match(body)
            return [self._mc(line, match)] if match is not None else []
        if self._section == "aer":
            match = _RAS_AER.match(body)
            return [self._aer(line, match)] if match is not None else []
        match = _RAS_MCE.match(body)
        return [self._mce(line, match)] if match is not None else []

    def flush(self) -> list[TelemetryEvent]:
        return []

    def _mc(self, line: LogLine, match: re.Match[str]) -> TelemetryEvent:
        from coreepi.parse.telemetry.edac import edac_fields

        rid, when, count, kind, rest = match.groups()
        text, _, after = rest.partition(" at ")
        label, _, after = after.partition(" location: ")
        location, _, after = after.partition(", addr ")
        addr, _, after = after.partition(", grain ")
        grain, _, after = after.partition(", syndrome ")
        syndrome, _, driver = after.strip().partition(" ")
        corrected = kind.lower() == "corrected"
        layers = location.split(":")
        labels = [x.strip() for x in label.split(" or ") if x.strip() and x.strip() not in ("any memory", "unknown memory")]
        detail: dict[str, Any] = {
            "source": "rasdaemon", "record_id": int(rid), "count": int(count), "error_type": kind,
            "corrected": corrected, "message": text.strip() or None,
            "dimm_label": labels[0] if labels else None, "dimm_labels": labels,
            "controller": f"MC{layers[0]}" if layers and layers[0].lstrip("-").isdigit() else None,
            "layers": [int(x) for x in layers if x.lstrip("-").isdigit()],
            "address": addr.strip() or None, "grain": grain.strip() or None, "syndrome": syndrome or None,
            "fields": edac_fields(driver),
        }
        component = labels[0] if labels else detail["controller"]
        what = "corrected" if corrected else kind.lower()
        summary = f"{count} {what} memory error(s) on {component or 'unknown memory'} (rasdaemon)"
        return make_event(self.ctx, [line], EventKind.EDAC_CE if corrected else EventKind.EDAC_UE, summary,
                          severity=what, component=component, detail=detail, ts=_ras_time(when))

    def _aer(self, line: LogLine, match: re.Match[str]) -> TelemetryEvent:
        rid, when, device, kind, message = match.groups()
        from coreepi.parse.telemetry.aer import aer_severity

        severity = aer_severity(kind)
        detail = {"source": "rasdaemon", "record_id": int(rid), "device": device, "error_type": kind,
                  "errors": [x.strip() for x in message.split(",") if x.strip()][:32]}
        component = f"PCIe {device}" if device else None
        summary = f"PCIe AER {kind} error" + (f" on {device}" if device else "") + f": {message.strip()}"
        return make_event(self.ctx, [line], EventKind.AER, summary, severity=severity, component=component,
                          detail=detail, ts=_ras_time(when))

    def _mce(self, line: LogLine, match: re.Match[str]) -> TelemetryEvent:
        rid, when, rest = match.groups()
        record = Record("rasdaemon")
        record.add(line)
        f = record.fields
        values = {k: _ras_int(v) for k, v in _RAS_KV.findall(rest)}
        f["status"] = values.get("status")
        f["mcg_status"] = values.get("mcgstatus")
        for key in ("addr", "misc", "tsc", "mcgcap", "ppin", "microcode"):
            f[key] = values.get(key)
        full = f["status"] is not None  # ras-mc-ctl leaves out fields that are 0
        for key, name in (("cpu", "cpu"), ("bank", "bank"), ("socketid", "socket"), ("apicid", "apic")):
            f[name] = values.get(key, 0 if full else None)
        if values.get("cpuid") is not None:
            f["cpuid"] = _hex(values["cpuid"])
        for label, key in (("CPU", "cpu_vendor"), ("bank", "bank_name")):
            found = re.search(rf", {label} ([^,=]{{1,100}})(?:,|$)", rest)
            if found is not None:
                f[key] = found.group(1).strip()
        found = re.search(r", mci ([^,=]{1,200})(?:,|$)", rest)
        f["flags"] = [found.group(1).strip()] if found else []
        f["decoded"] = [rest.split(", ", 1)[0][:300]]
        return _mce_event(self.ctx, record, "rasdaemon", ts=_ras_time(when), extra={"record_id": int(rid)})


# --------------------------------------------------------------------------- memory failure

_MEMORY_FAILURE: Final = re.compile(
    r"(?:Memory failure|MCE):? ?(?:0x)?([0-9a-fA-F]{1,16}): (?:Sending SIGBUS to|Killing|forcibly killing) "
    r"(.{0,64}):(\d{1,10}) (?:due to|because of) (.{0,200})$"
)


class MemoryFailureParser:
    """``Memory failure: PFN: Sending SIGBUS to comm:pid due to hardware
    memory corruption`` -> ``sigbus_mce`` events."""


    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        message = line.message
        if "SIGBUS" not in message and "illing" not in message:
            return []
        match = _MEMORY_FAILURE.search(message)
        if match is None:
            return []
        pfn, comm, pid, reason = match.groups()
        detail = {"source": "kernel", "pfn": f"0x{pfn.lower()}", "physical_address": f"0x{int(pfn, 16) << 12:x}",
                  "pid": int(pid), "process": comm, "reason": reason.strip()}
        summary = f"SIGBUS to {comm}:{pid} after a memory error at pfn 0x{pfn.lower()}"
        return [make_event(self.ctx, [line], EventKind.SIGBUS_MCE, summary, severity="uncorrected",
                           component=f"memory pfn 0x{pfn.lower()}", hardware_indicative=True, detail=detail)]

    def flush(self) -> list[TelemetryEvent]:
        return []
