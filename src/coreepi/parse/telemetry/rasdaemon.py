"""rasdaemon's error listing into events.

* **rasdaemon** ``ras-mc-ctl --errors`` (``util/ras-mc-ctl.in``, ``sub
  errors``): the ``Memory controller events:`` (-> ``edac_*``), ``PCIe AER
  events:`` (-> ``aer``) and ``MCE events:`` sections, one record a line
  (an MCE record line pasted without its header too);
* **rasdaemon's syslog** line of each machine check (``mce_record: DATE
  bank=…, status= …, cpu= N, socketid= N, addr= …``) -> ``mce``;
* **rasdaemon's syslog** line of each memory-controller error
  (``ras-mc-handler.c``, ``ras_mc_event_handler``: ``mc_event DATE 1
  Corrected error: MSG on LABEL (mc: 0 location: 0:0:-1 address: 0x…
  grain: 6 syndrome: 0x… DRIVER DETAIL)``) -> ``edac_ce`` / ``edac_ue``,
  as the EDAC core's own ``EDAC MC0: 1 CE …`` line would.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, Record, make_event
from coreepi.parse.telemetry.mca import hex_text, mce_event

__all__ = ["RasMcCtlParser", "RasdaemonTraceParser"]

# --------------------------------------------------------------------------- rasdaemon

_RAS_DATE: Final = r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?: [+-]\d{4})?)"
_RAS_MC: Final = re.compile(r"^(\d{1,12}) " + _RAS_DATE + r" (\d{1,10}) (\w{1,20}) error\(s\): ?(.*)$")
_RAS_AER: Final = re.compile(
    r"^(\d{1,12}) " + _RAS_DATE + r" (?:([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) )?(.{1,40}?) error: ?(.*)$"
)
_RAS_MCE: Final = re.compile(r"^(\d{1,12}) " + _RAS_DATE + r" error: ?(.*)$")
_RAS_KV: Final = re.compile(
    r"\b(mcgcap|mcgstatus|status|addr|misc|ip|tsc|walltime|cpu|cpuid|apicid|socketid|cs|bank|ppin|microcode"
    r"|memory_channel|csrow)=(0x[0-9a-fA-F]{1,16}|\d{1,20})"
)
# rasdaemon's own decoding of an AMD SMCA record names the CPU and the bank
# in words: ", CPU 2, bank Unified Memory Controller (bank=17)".
_RAS_CPU: Final = re.compile(r", CPU (\d{1,5})(?:,|$)")
_RAS_BANK_NAME: Final = re.compile(r", bank ([^,=(]{1,100}?)(?: \(bank=\d{1,5}\))?(?:,|$)")
# rasdaemon's syslog line of a machine check (ras-mce-handler.c,
# report_mce_event: the trace event as text): hex without 0x, cpu and
# socketid in decimal.
_TRACE_MCE: Final = re.compile(r"\bmce_record:\s+" + _RAS_DATE + r"\s+(bank=.*)$")
_TRACE_KV: Final = re.compile(
    r"\b(bank|status|cpu|socketid|ip|misc|addr|mcgcap|apicid|cs)=\s*([0-9a-fA-F]{1,16})\b"
)
_TRACE_DECIMAL: Final = frozenset({"cpu", "socketid"})
# rasdaemon's syslog line of a memory-controller error (ras-mc-handler.c,
# ras_mc_event_handler): after the trace header, "mc_event" ("mc_event:"
# with older libtraceevent; an event level "[CRIT]" with rasdaemon's
# event-level patch), the local time (rasdaemon 0.4 added ".usec" and
# "(ts = sec.usec)"), then "N <Type> error[s]:" and the rest.
_TRACE_MC: Final = re.compile(
    r"\bmc_event:?\s+(?:\[[A-Z]{1,8}\]\s+)?(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d{1,9})?( [+-]\d{4})?"
    r"(?:\(\d{1,20} = \d{1,12}\.\d{1,9}\))?\s+(\d{1,10}) (\w{1,20}) errors?:(.*)$"
)
# "(mc: 0 location: 0:0:-1 address: 0x… grain: 6 syndrome: 0x… DETAIL)":
# layers print only when known, address and syndrome only when not 0.
_TRACE_MC_WHERE: Final = re.compile(
    r"mc: (\d{1,4})(?: location: (-?\d{1,5}(?::-?\d{1,5}){0,2}))?(?: address: (0x[0-9a-fA-F]{1,16}))?"
    r"(?: grain: (\d{1,20}))?(?: syndrome: (0x[0-9a-fA-F]{1,16}))? ?"
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
            # an MCE record pasted without its section header still says what it is
            match = _RAS_MCE.match(body) if "status=0x" in body else None
            return [self._mce(line, match)] if match is not None else []
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
        layers = location.split(":")
        return memory_event(
            self.ctx, line, _ras_time(when), source="rasdaemon", count=int(count), kind=kind,
            message=text.strip(), label=label,
            mc=int(layers[0]) if layers and layers[0].lstrip("-").isdigit() else None,
            layers=[int(x) for x in layers if x.lstrip("-").isdigit()],
            address=addr.strip() or None, grain=grain.strip() or None, syndrome=syndrome or None,
            fields=edac_fields(driver), extra={"record_id": int(rid)})

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
            f["cpuid"] = hex_text(values["cpuid"])
        cpu = _RAS_CPU.search(rest)
        if cpu is not None:
            f["cpu"] = int(cpu.group(1))
        bank_name = _RAS_BANK_NAME.search(rest)
        if bank_name is not None:
            f["bank_name"] = bank_name.group(1).strip()
        vendor = _vendor(values.get("cpuid"))
        if vendor is not None:
            f["cpu_vendor"] = vendor
        extra: dict[str, Any] = {"record_id": int(rid)}
        for key in ("memory_channel", "csrow"):
            if values.get(key) is not None:
                extra[key] = values[key]
        found = re.search(r", mci ([^,=]{1,200})(?:,|$)", rest)
        f["flags"] = [found.group(1).strip()] if found else []
        f["decoded"] = [rest.split(", ", 1)[0][:300]]
        return mce_event(self.ctx, record, "rasdaemon", ts=_ras_time(when), extra=extra)


def _vendor(cpuid: int | None) -> str | None:
    """``AMD`` for a CPUID signature (leaf 1 EAX) with an extended family:
    only AMD and Hygon (family 0xF + extension: 0x10 … 0x1A) have one among
    the CPUs rasdaemon supports; Intel's are family 6 (None: not known)."""
    if cpuid is None or (cpuid >> 8 & 0xF) != 0xF or not cpuid >> 20 & 0xFF:
        return None
    return "AMD"


def memory_event(ctx: Context, line: LogLine, when: datetime | None, *, source: str, count: int, kind: str,
                 message: str, label: str, mc: int | None, layers: list[int], address: str | None,
                 grain: str | None, syndrome: str | None, fields: dict[str, Any],
                 extra: dict[str, Any]) -> TelemetryEvent:
    """A memory-controller error as rasdaemon records it (``source``:
    ``rasdaemon`` for ras-mc-ctl's listing, ``rasdaemon-syslog`` for its
    line of the event; ``kind``: its error type, ``Corrected`` /
    ``Uncorrected`` / ``Fatal`` / ``Deferred``; ``label``: the DIMM
    label(s), "or"-separated) -> ``edac_ce`` (corrected) or ``edac_ue``
    (anything else)."""
    corrected = kind.lower() == "corrected"
    labels = [x.strip() for x in label.split(" or ") if x.strip() and x.strip() not in ("any memory", "unknown memory")]
    detail: dict[str, Any] = {
        "source": source, **extra, "count": count, "error_type": kind,
        "corrected": corrected, "message": message or None,
        "dimm_label": labels[0] if labels else None, "dimm_labels": labels,
        "controller": f"MC{mc}" if mc is not None else None, "layers": layers,
        "address": address, "grain": grain, "syndrome": syndrome, "fields": fields,
    }
    component = labels[0] if labels else detail["controller"]
    what = "corrected" if corrected else kind.lower()
    summary = f"{count} {what} memory error(s) on {component or 'unknown memory'} (rasdaemon)"
    return make_event(ctx, [line], EventKind.EDAC_CE if corrected else EventKind.EDAC_UE, summary,
                      severity=what, component=component, detail=detail, ts=when)


def _trace_mc(ctx: Context, line: LogLine, match: re.Match[str]) -> TelemetryEvent:
    """rasdaemon's syslog line of a memory-controller error -> its event."""
    from coreepi.parse.telemetry.edac import edac_fields

    when, zone, count, kind, rest = match.groups()
    head, paren, where = rest.partition("(mc: ")
    message, _, label = head.strip().partition(" on ")
    if message.startswith("on "):  # no message, a label
        message, label = "", message[3:]
    where = "mc: " + where.rstrip().removesuffix(")") if paren else ""
    found = _TRACE_MC_WHERE.match(where)
    groups: tuple[str | None, ...] = found.groups() if found is not None else (None,) * 5
    mc_text, location, address, grain, syndrome = groups
    detail_text = where[found.end():] if found is not None else where
    return memory_event(ctx, line, _ras_time(when + (zone or "")), source="rasdaemon-syslog", count=int(count),
                        kind=kind, message=message.strip(), label=label.strip(),
                        mc=int(mc_text) if mc_text is not None else None,
                        layers=[int(x) for x in location.split(":")] if location else [],
                        address=address, grain=grain, syndrome=syndrome, fields=edac_fields(detail_text),
                        extra={"driver_detail": detail_text.strip()[:500] or None})


class RasdaemonTraceParser:
    """rasdaemon's syslog line of each machine check (``rasdaemon[PID]:
    <...>-TID [CPU] SECS: mce_record: DATE bank=2, status= 9400…, …``) and
    of each memory-controller error (``… mc_event DATE 1 Corrected error:
    … (mc: 0 …)``)."""

    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        if "mc_event" in line.message:
            match = _TRACE_MC.search(line.message)
            return [_trace_mc(self.ctx, line, match)] if match is not None else []
        if "mce_record:" not in line.message:
            return []
        match = _TRACE_MCE.search(line.message)
        if match is None:
            return []
        when, rest = match.groups()
        record = Record("rasdaemon")
        record.add(line)
        for key, value in _TRACE_KV.findall(rest):
            name = {"socketid": "socket", "apicid": "apic"}.get(key, key)
            record.fields.setdefault(name, int(value, 10 if key in _TRACE_DECIMAL else 16))
        texts = [part.strip() for part in rest.split(",")]
        mci = next((t[4:] for t in texts if t.startswith("mci=")), None)
        record.fields["flags"] = [" ".join(mci.split())] if mci else []
        record.fields["decoded"] = [t for t in texts[2:3] if t and "=" not in t]
        return [mce_event(self.ctx, record, "rasdaemon-syslog", ts=_ras_time(when))]

    def flush(self) -> list[TelemetryEvent]:
        return []
