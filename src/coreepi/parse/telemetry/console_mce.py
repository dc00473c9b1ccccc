"""Machine checks printed on a console without ``[Hardware Error]``: the Xen
hypervisor's (``(XEN) `` lines of a serial console or ``xl dmesg``) and old
Linux kernels' (2.4 to 2.6.31), into ``mce`` events.

* **Xen** (``xen/arch/x86/cpu/mcheck/mce.c``, ``x86_mcinfo_dump``: Xen 3.x
  to 4.x, when dom0 does not take the event), a head line then one line per
  bank::

      (XEN) MCE: The hardware reports a non fatal, correctable incident occurred on CPU 1.
      (XEN) CMCI occurred on CPU 3.                       (Xen 4.1 and later)
      (XEN) POLLED occurred on CPU 3.
      (XEN) CPU0: Machine Check Exception:                5
      (XEN) Bank 2: d400400000000813[0000000000000000] at 00000001234f5000

  ``Bank N: STATUS``, then ``[MISC]`` when MISCV is set and `` at ADDR``
  when ADDRV is set (``%16`` widths: values may be space-padded).
* **Linux before 2.6.32** (``arch/x86/kernel/cpu/mcheck/non-fatal.c``,
  ``p4.c``, ``k7.c``, ``mce_64.c``): the same head lines (``occured``
  misspelt until 2.6.2x) and ``Bank N: STATUS [at ADDR]``, or on x86-64 one
  line ``CPU 1: Machine Check Exception: 4 Bank 4: b200000000070f0f``
  followed by ``RIP 10:<…> {func+0x…}`` and ``TSC … ADDR …``. (From 2.6.32 the kernel prefixes
  ``[Hardware Error]:``, read by :mod:`.mce`.)

One event per bank line (a head line without a bank line within
:data:`~coreepi.parse.telemetry.mca.GAP` lines is an event of its own); the
head gives the CPU and whether it was an exception (``exception``) or a
corrected incident found by polling or CMCI (``reported_as``). Severity comes
from the bank's MCi_STATUS (:mod:`.mca`), as for every machine check.
Capability banners (``(XEN) mce_intel.c:780: MCA Capability: …``, ``CMCI:
threshold …``) are not events.

* **skx_edac / i10nm_edac** (Intel Xeon memory controllers, kernels 4.15
  and later) print the machine check they decode before their ``EDAC MC3:
  1 UE … on DIMM`` line (an ``edac_*`` event of :mod:`.edac`)::

      EDAC skx MC3: HANDLING MCE MEMORY ERROR
      EDAC skx MC3: CPU 0: Machine Check Event: 0x0 Bank 25: 0xac00000200a00090
      EDAC skx MC3: TSC 0x18d57ce28f4f25
      EDAC skx MC3: ADDR 0x7e025e400
      EDAC skx MC3: MISC 0x9000201d809c086
      EDAC skx MC3: PROCESSOR 0:0x606a6 TIME 1628780833 SOCKET 0 APIC 0x0

  -> an ``mce`` event (``source`` ``skx_edac``) with the bank, status,
  address and socket.
"""

from __future__ import annotations

import re
from typing import Final

from coreepi.model.events import TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, Record, hex_int
from coreepi.parse.telemetry.mca import GAP, mce_event

__all__ = ["ConsoleMceParser"]

_XEN: Final = "(XEN) "
_HEAD: Final = re.compile(
    r"^(?:MCE: The hardware reports a non fatal, correctable incident occurr?ed on CPU (\d{1,5})\."
    r"|(CMCI|POLLED) occurred on CPU (\d{1,5})\."
    r"|CPU ?(\d{1,5}): Machine Check (?:Exception|Event): *(?:0x)?([0-9a-fA-F]{1,16})"
    r"(?: +Bank (\d{1,4}): *(?:0x)?([0-9a-fA-F]{1,16}))?)"
)
# skx_edac / i10nm_edac print the machine check they decode, each line
# prefixed "EDAC skx MC3: " (drivers/edac/skx_common.c, skx_mce_output_error
# and its callers, kernels 4.15 and later).
_EDAC_DRIVER: Final = re.compile(r"^EDAC (skx|i10nm) MC\d{1,3}: ")
_PROCESSOR: Final = re.compile(
    r"^PROCESSOR (\d{1,3}):(?:0x)?([0-9a-fA-F]{1,8}) TIME (\d{1,20}) SOCKET (\d{1,5})"
    r" APIC (?:0x)?([0-9a-fA-F]{1,8})"
)
_BANK: Final = re.compile(
    r"^<?Bank (\d{1,4}): *([0-9a-fA-F]{1,16})(?:\[ *([0-9a-fA-F]{1,16})\])?(?: at *([0-9a-fA-F]{1,16}))?"
)
_REGS: Final = re.compile(r"\b(TSC|ADDR|MISC) (?:0x)?([0-9a-fA-F]{1,16})\b")
_RIP: Final = re.compile(r"^RIP ([0-9a-fA-F]{1,4}):<([0-9a-fA-F]{1,16})> ?(?:\{(.{0,200})\})?")


class ConsoleMceParser:
    """Xen and pre-2.6.32 Linux console machine-check lines (see module doc)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._head: Record | None = None  # the last head line, waiting for its banks
        self._open: Record | None = None  # a complete bank record, waiting for TSC/ADDR
        self._banks = 0

    @property
    def busy(self) -> bool:
        """A head is open: its ``Bank`` lines carry no keyword the scanner knows."""
        return self._head is not None or self._open is not None

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        out: list[TelemetryEvent] = []
        self._expire(line.number, out)
        body, source = _source(line.message)
        if "[Hardware Error]" in body:  # 2.6.32+: the kernel parser's
            return out
        match = _HEAD.match(body)
        if match is not None:
            out.extend(self._close_all())
            self._start_head(line, match, source)
            return out
        match = _BANK.match(body)
        if match is not None and self._head is not None:
            out.extend(self._close_open())
            self._bank(line, match)
            return out
        if self._open is not None and body.startswith(("TSC ", "RIP ", "ADDR ", "MISC ", "PROCESSOR ")):
            self._open.add(line)
            processor = _PROCESSOR.match(body)
            if processor is not None:
                _vendor, cpuid, time, socket, apic = processor.groups()
                self._open.fields.update(cpuid=f"0x{cpuid.lower()}", time=int(time),
                                         socket=int(socket), apic=int(apic, 16))
                return out
            match = _RIP.match(body)
            if match is not None:
                self._open.fields["rip"] = f"{match.group(1)}:0x{match.group(2).lower()}"
                if match.group(3):
                    self._open.fields["rip_symbol"] = match.group(3)
            for key, value in _REGS.findall(body):
                self._open.fields[key.lower()] = hex_int(value)
        return out

    def flush(self) -> list[TelemetryEvent]:
        return self._close_all()

    def _start_head(self, line: LogLine, match: re.Match[str], source: str) -> None:
        polled_cpu, how, how_cpu, exc_cpu, mcg, bank, status = match.groups()
        head = Record(source)
        head.add(line)
        if exc_cpu is not None:
            head.fields.update(cpu=int(exc_cpu), exception=source in ("xen", "kernel"),
                               mcg_status=hex_int(mcg))
        else:
            # the head's own words, for a bank whose status is not VALid
            head.fields.update(cpu=int(polled_cpu or how_cpu), exception=False,
                               reported_as=(how or "polled").lower(), severity_text="corrected")
        self._head, self._banks = head, 0
        if bank is not None:  # x86-64 2.6: the bank on the head line
            self._open = Record(source, list(head.lines), {**head.fields, "bank": int(bank),
                                                           "status": hex_int(status)}, line.number)
            self._banks = 1

    def _bank(self, line: LogLine, match: re.Match[str]) -> None:
        head = self._head
        assert head is not None
        bank, status, misc, addr = match.groups()
        record = Record(head.key, [*head.lines, line], dict(head.fields), line.number)
        record.fields.update(bank=int(bank), status=hex_int(status))
        if misc is not None:
            record.fields["misc"] = hex_int(misc)
        if addr is not None:
            record.fields["addr"] = hex_int(addr)
        head.last = line.number
        self._open, self._banks = record, self._banks + 1

    def _expire(self, number: int, out: list[TelemetryEvent]) -> None:
        if self._open is not None and number - self._open.last > 1:
            out.extend(self._close_open())
        if self._head is not None and number - self._head.last > GAP:
            out.extend(self._close_all())

    def _close_open(self) -> list[TelemetryEvent]:
        record, self._open = self._open, None
        return [] if record is None else [self._event(record)]

    def _close_all(self) -> list[TelemetryEvent]:
        out = self._close_open()
        head, self._head = self._head, None
        if head is not None and self._banks == 0:
            out.append(self._event(head))  # a head whose bank line never came
        return out

    def _event(self, record: Record) -> TelemetryEvent:
        extra = {"reported_as": record.fields.pop("reported_as")} \
            if "reported_as" in record.fields else None
        return mce_event(self.ctx, record, record.key, extra=extra)


def _source(message: str) -> tuple[str, str]:
    """(the line without its printer's prefix, who printed it: ``xen``,
    ``skx_edac``/``i10nm_edac`` or ``kernel``)."""
    if message.startswith(_XEN):
        return message[len(_XEN):], "xen"
    driver = _EDAC_DRIVER.match(message)
    if driver is not None:
        return message[driver.end():], f"{driver.group(1)}_edac"
    return message, "kernel"
