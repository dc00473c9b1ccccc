"""TelemetryEvent: a timestamped, per-host hardware or kernel event that is not
a crash (machine check, EDAC memory error, NVIDIA Xid, PCIe AER …).

Events are the second contract beside :class:`coreepi.model.report.CrashReport`:
parsers produce them from kernel logs and tool output, the store keeps them
(the fleet directory's ``telemetry.jsonl`` holds one per line), and the
epidemiology joins them to crashes by host and time as attribution evidence.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coreepi.model.report import stable_crash_id

__all__ = ["EventKind", "TelemetryEvent", "event_id"]


class EventKind(StrEnum):
    """What kind of event. ``edac_ce``/``edac_ue``: corrected/uncorrected
    memory errors reported by an EDAC driver; ``mce``: a machine-check
    exception logged by the kernel, mcelog or rasdaemon; ``xid``: an NVIDIA
    GPU Xid error; ``aer``: a PCIe Advanced Error Reporting error;
    ``sigbus_mce``: a process killed with BUS_MCEERR_*."""

    MCE = "mce"
    EDAC_CE = "edac_ce"
    EDAC_UE = "edac_ue"
    XID = "xid"
    AER = "aer"
    SIGBUS_MCE = "sigbus_mce"
    OTHER = "other"


class TelemetryEvent(BaseModel):
    """One event on one host.

    ``ts`` is UTC when the source gives wall-clock time; kernel console lines
    carry only seconds since boot, kept in ``uptime_seconds`` (with ``ts``
    None until the boot time is known). ``detail`` holds the kind-specific
    fields (e.g. for ``xid``: code, pci_address, pid, process, meaning; for
    ``edac_*``: controller, channel, dimm_label, count). ``hardware_indicative``
    says whether the event by itself points at the host's hardware.
    """

    model_config = ConfigDict(extra="forbid")

    event_id: str = Field(description="stable id: the same line ingested twice collides")
    host_id: str | None = None
    ts: datetime | None = Field(default=None, description="UTC")
    uptime_seconds: float | None = Field(default=None, ge=0.0)
    kind: EventKind
    severity: str | None = Field(default=None, description="corrected, uncorrected, fatal, …")
    component: str | None = Field(
        default=None, description="what failed: 'cpu 3 bank 5', 'DIMM_B2', 'GPU 0000:3b:00.0'"
    )
    summary: str = Field(description="one line a person can read")
    hardware_indicative: bool = True
    detail: dict[str, Any] = Field(default_factory=dict)
    source: str | None = Field(default=None, description="file and line it came from")
    raw: str | None = Field(default=None, description="the original line(s), capped at 4 KiB")


def event_id(*parts: object) -> str:
    """A stable event id from identifying facts (host, time, kind, raw line)."""
    return stable_crash_id("event", *parts)
