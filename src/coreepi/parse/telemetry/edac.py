"""EDAC memory-error lines into ``edac_ce`` / ``edac_ue`` events.

The format is the one of the Linux EDAC core, ``drivers/edac/edac_mc.c``
(``edac_ce_error`` / ``edac_ue_error``, kernels 3.5 and later)::

    EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345 offset:0x0 grain:32 syndrome:0x0 - area:DRAM err_code:0001:0090 socket:0 ha:0 channel_mask:2 rank:0)
    EDAC MC1: 1 UE memory scrubbing error on DIMM_B2 (channel:0 slot:1 page:0x0 offset:0x0 grain:32 - …)

i.e. ``"%d CE %s%son %s (%s page:0x%lx offset:0x%lx grain:%ld syndrome:0x%lx%s%s)"``
(error count, message, DIMM label(s), location, then the driver's detail
after `` - ``), for every driver that reports through the core (sb_edac,
skx_edac, i10nm, amd64_edac, ghes_edac …). Older kernels (2.6 / 3.0,
``edac_mc_handle_ce``) printed ``EDAC MC0: CE page 0x2c8e7, offset 0x640,
grain 8, syndrome 0x47d4, row 1, channel 0, label "DIMM_B1": i5000 CE``;
both are read.

Driver banners and debug lines (``EDAC MC: Ver: 3.0.0``, ``EDAC MC0:
Giving out device to module …``, ``EDAC amd64: …``, ``EDAC sbridge MC0:
HANDLING MCE MEMORY ERROR``) are not events.
"""

from __future__ import annotations

import re
from typing import Any, Final

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.parse.kernel.prefixes import LogLine
from coreepi.parse.telemetry.base import Context, make_event

__all__ = ["EdacParser", "edac_fields"]

_MODERN: Final = re.compile(r"\bEDAC MC(\d{1,4}): (\d{1,10}) (CE|UE)\b ?")
_OLD: Final = re.compile(r"\bEDAC MC(\d{1,4}): (CE|UE)\b[ ,:-]*(.*)$")
_LABEL_OLD: Final = re.compile(r'labels? "([^"]*)"')
# ``key:value`` (sb/skx/i10nm/amd64) or, from ghes_edac's CPER text (kernels
# 4.x-6.x, drivers/edac/ghes_edac.c), ``key: value``.
_KV: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,40})(?:[:=](\S+)|: (\S+))")
_OLD_KV: Final = re.compile(r"\b(page|offset|grain|syndrome|row|channel) (0x[0-9a-fA-F]+|\d+)")
_INTEL_LABEL: Final = re.compile(r"CPU_SrcID#(\d+)_(Ha|MC)#(\d+)_Chan#(\d+)_DIMM#(\d+)")
_CSROW_LABEL: Final = re.compile(r"mc#(\d+)csrow#(\d+)channel#(\d+)")
# What the EDAC core writes when it knows no DIMM ("any memory", "unknown
# memory"), and ghes_edac's "unknown label" when the firmware gave none.
_NO_LABEL: Final = frozenset({"any memory", "unknown memory", "unknown label", "-", ""})


def _number(text: str) -> int | str:
    text = text.rstrip(",;)")
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return text


def edac_fields(location: str) -> dict[str, Any]:
    """``channel:1 slot:0 page:0x12 … - area:DRAM …`` as a dict (numbers
    parsed, hex kept as ints); the part after `` - `` goes in as well."""
    fields: dict[str, Any] = {}
    for key, value, spaced in _KV.findall(location[:2000]):
        if key not in fields and len(fields) < 64:
            fields[key] = _number(value or spaced)
    _, sep, other = location.partition(" - ")
    if sep:
        fields["driver_detail"] = other.strip()[:500]
    return fields


def _labels(label: str) -> list[str]:
    return [part.strip() for part in label.split(" or ") if part.strip() not in _NO_LABEL]


def _label_facts(labels: list[str]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for label in labels[:1]:
        match = _INTEL_LABEL.search(label)
        if match is not None:
            facts.update(socket=int(match.group(1)), channel=int(match.group(4)), dimm=int(match.group(5)))
            facts["ha" if match.group(2) == "Ha" else "imc"] = int(match.group(3))
        match = _CSROW_LABEL.search(label)
        if match is not None:
            facts.update(csrow=int(match.group(2)), channel=int(match.group(3)))
    return facts


class EdacParser:
    """Feeds on log lines; one event per EDAC CE/UE line."""


    busy = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def feed(self, line: LogLine) -> list[TelemetryEvent]:
        message = line.message
        if "EDAC MC" not in message:
            return []
        match = _MODERN.search(message)
        if match is not None:
            return [self._modern(line, match)]
        match = _OLD.search(message)
        if match is not None:
            return [self._old(line, match)]
        return []

    def flush(self) -> list[TelemetryEvent]:
        return []

    def _modern(self, line: LogLine, match: re.Match[str]) -> TelemetryEvent:
        mc, count, kind = match.groups()
        text, label, location = split_modern(line.message[match.end():])
        fields = edac_fields(location or "")
        labels = _labels(label)
        return self._event(line, int(mc), int(count), kind, text, labels, fields,
                           truncated=location is None or not message_closed(line.message))

    def _old(self, line: LogLine, match: re.Match[str]) -> TelemetryEvent:
        mc, kind, rest = match.groups()
        fields: dict[str, Any] = {k: _number(v) for k, v in _OLD_KV.findall(rest)}
        label = _LABEL_OLD.search(rest)
        labels = _labels(label.group(1)) if label else []
        text = rest.rsplit(": ", 1)[-1].strip() if ": " in rest else ""
        return self._event(line, int(mc), 1, kind, text, labels, fields, truncated=False)

    def _event(self, line: LogLine, mc: int, count: int, kind: str, text: str, labels: list[str],
               fields: dict[str, Any], *, truncated: bool) -> TelemetryEvent:
        corrected = kind == "CE"
        detail: dict[str, Any] = {
            "source": "kernel",  # the EDAC core's line (rasdaemon may print the same error: fold.py)
            "controller": f"MC{mc}",
            "mc": mc,
            "count": count,
            "error_type": kind,
            "corrected": corrected,
            "message": text[:500] or None,
            "dimm_label": labels[0] if labels else None,
            "dimm_labels": labels,
        }
        detail.update(_label_facts(labels))
        for key in ("channel", "slot", "csrow", "rank", "socket", "ha", "page", "offset", "grain", "syndrome",
                    "row", "area", "err_code", "node", "card", "module", "bank"):
            if key in fields:
                detail[key] = fields[key]
        page, offset = fields.get("page"), fields.get("offset")
        if isinstance(page, int) and isinstance(offset, int) and (page or offset):
            detail["physical_address"] = f"0x{(page << 12) + offset:x}"  # 4 KiB pages
        detail["fields"] = fields
        if truncated:
            detail["truncated"] = True
        if "socket" not in detail and isinstance(fields.get("node"), int):
            detail["socket"] = fields["node"]  # ghes_edac: the firmware's node is the socket
        if labels:
            component = labels[0]
        elif all(isinstance(fields.get(k), int) for k in ("node", "card", "module")):
            # ghes_edac without a DIMM label: node/card/module name the DIMM
            component = f"MC{mc} node {fields['node']} card {fields['card']} module {fields['module']}"
        elif "channel" in detail:
            component = f"MC{mc} channel {detail['channel']}"
        else:
            component = f"MC{mc}"
        what = "corrected" if corrected else "uncorrected"
        summary = f"{count} {what} memory error{'s' if count != 1 else ''} on {component} (EDAC MC{mc})"
        if text:
            summary += f": {text}"
        return make_event(
            self.ctx, [line], EventKind.EDAC_CE if corrected else EventKind.EDAC_UE, summary,
            severity=what, component=component, hardware_indicative=True, detail=detail,
        )


def split_modern(rest: str) -> tuple[str, str, str | None]:
    """``memory read error on LABEL (LOCATION)`` -> (message, label,
    location or None when the line was cut before it). Linear time."""
    if rest.startswith("on "):
        text, after = "", rest[3:]
    else:
        index = rest.find(" on ")
        if index < 0:
            return rest.strip(), "", None
        text, after = rest[:index], rest[index + 4:]
    paren = after.find(" (")
    if paren < 0:
        return text.strip(), after.strip(), None
    location = after[paren + 2:].rstrip().removesuffix(")")
    return text.strip(), after[:paren].strip(), location


def message_closed(message: str) -> bool:
    """Does an EDAC line end with its closing parenthesis (not cut)?"""
    return message.rstrip().endswith(")")
