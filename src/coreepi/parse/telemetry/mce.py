"""Machine checks into ``mce`` events: the kernel's own lines (and its
memory-failure handler's).

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

  ``mce: [Hardware Error]: Machine check events logged`` is a ``notice``
  event, folded into the record of the same machine check by
  :mod:`coreepi.parse.telemetry.fold` (an event of its own only when no
  printer's record is near it: the details went to mcelog).

The kernel's memory-failure handler (``mm/memory-failure.c``,
``kill_proc``): ``Memory failure: 0x1234: Sending SIGBUS to app:4567 due to
hardware memory corruption`` -> a ``sigbus_mce`` event.

MCi_STATUS decoding: :mod:`coreepi.parse.telemetry.mca`. Other sources of
machine checks: :mod:`.ghes`, :mod:`.mcelog`, :mod:`.rasdaemon`.
"""

from __future__ import annotations

import re
from typing import Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, Record, hex_int, make_event
from coreepi.parse.telemetry.mca import GAP, mce_event

__all__ = ["KernelMceParser", "MemoryFailureParser"]

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



# --------------------------------------------------------------------------- kernel


class KernelMceParser:
    """``mce: [Hardware Error]:`` records (Intel print and AMD decoder)."""


    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._open: Record | None = None

    def _expire(self, number: int, out: list[TelemetryEvent]) -> None:
        if self._open is not None and number - self._open.last > GAP:
            out.extend(self._close())

    def _close(self) -> list[TelemetryEvent]:
        record, self._open = self._open, None
        if record is None:
            return []
        f = record.fields
        if f.get("status") is None and f.get("bank") is None and not f.get("panic"):
            return []
        return [mce_event(self.ctx, record, "kernel")]

    def _start(self, line: LogLine, out: list[TelemetryEvent]) -> Record:
        out.extend(self._close())
        self._open = Record("kernel")
        self._open.add(line)
        return self._open

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        if self._open is not None:
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
            out.append(self._notice_event(line))
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
        return self._close()


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
