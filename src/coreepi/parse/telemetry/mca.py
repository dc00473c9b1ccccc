"""Machine-check architecture: decoding MCi_STATUS and making ``mce`` events,
shared by every machine-check source (:mod:`.mce` kernel lines, :mod:`.ghes`,
:mod:`.mcelog`, :mod:`.rasdaemon`).

MCi_STATUS is decoded (VAL, OVER, UC, EN, MISCV, ADDRV, PCC, S, AR; the MCA
error code's class after the Intel SDM vol. 3B §16.9 "Interpreting the MCA
error codes") into ``severity``: ``corrected`` (UC=0), ``uncorrected``
(UC=1), ``fatal`` (UC=1 and PCC=1, or a machine-check panic).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.telemetry.base import Context, Record, make_event

__all__ = [
    "GAP",
    "decode_status",
    "epoch",
    "hex_text",
    "mca_error_class",
    "mca_severity",
    "mce_event",
    "status_bit",
]

GAP: Final = 8  # a record closes after this many lines without one of its own


def status_bit(value: int, bit: int) -> bool:
    """Bit ``bit`` (0 = least significant) of ``value``."""
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
        "valid": status_bit(status, 63), "overflow": status_bit(status, 62), "uncorrected": status_bit(status, 61),
        "enabled": status_bit(status, 60), "misc_valid": status_bit(status, 59), "addr_valid": status_bit(status, 58),
        "pcc": status_bit(status, 57), "signaled": status_bit(status, 56), "action_required": status_bit(status, 55),
        "mca_code": f"0x{code:04x}", "model_code": f"0x{status >> 16 & 0xFFFF:04x}",
        "error_class": mca_error_class(code),
    }
    if info["error_class"] == "memory controller":
        transaction = code >> 4 & 0x7
        info["mc_transaction"] = _MC_TRANSACTION[transaction] if transaction < 5 else "reserved"
        if code & 0xF != 0xF:
            info["mc_channel"] = code & 0xF
    return info


def mca_severity(status: int | None, fatal: bool = False, text: str = "") -> str | None:
    """``corrected`` / ``deferred`` / ``uncorrected`` / ``fatal`` from the
    MCi_STATUS bits (UC, PCC) when known and valid (VAL, bit 63: without it
    the other bits mean nothing), else from the words of ``text``; ``fatal``
    when the record says the machine panicked; None when nothing tells."""
    if fatal:
        return "fatal"
    if status is not None and status_bit(status, 63):
        if not status_bit(status, 61):
            return "deferred" if "deferred" in text.lower() else "corrected"
        return "fatal" if status_bit(status, 57) else "uncorrected"
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


def hex_text(value: int | None) -> str | None:
    """``0x…`` or None."""
    return None if value is None else f"0x{value:x}"


def epoch(seconds: int | None) -> datetime | None:
    """A UTC time from seconds since the epoch; None for 0, None or out of range."""
    if not seconds:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def mce_event(ctx: Context, record: Record, source: str, *, ts: datetime | None = None,
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
            detail[key] = hex_text(f[key])
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
    severity = mca_severity(status, bool(f.get("panic")), text)
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
                      ts=ts or line_ts or epoch(f.get("time")))

