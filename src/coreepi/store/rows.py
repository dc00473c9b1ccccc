"""The table rows of the store's records, shared by every backend (one place
decides what a ``crashes`` or ``telemetry`` row holds)."""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from coreepi.store.records import CrashRecord
from coreepi.store.sqlbuild import to_json, utc_now

if TYPE_CHECKING:
    from coreepi.model.events import TelemetryEvent

__all__ = ["crash_row", "event_row"]


def crash_row(rec: CrashRecord) -> dict[str, Any]:
    """The ``crashes`` row of a record: every column, ``phenotypes`` lists, times UTC."""
    r = rec.report
    attrs = rec.attributes
    exe = attrs.get("exe") if attrs.get("exe") is not None else r.process.exe
    return {
        "crash_id": r.crash_id,
        "host_id": r.host_id,
        "captured_at": r.captured_at,
        "source": str(r.source),
        "signature": r.signature.signature if r.signature else None,
        "phenotypes": [p.name for p in r.phenotypes],
        "hardware_phenotypes": [p.name for p in r.phenotypes if p.hardware_indicative],
        "signal": r.signal.name if r.signal else None,
        "signal_number": r.signal.number if r.signal else None,
        "si_code_name": r.signal.si_code_name if r.signal else None,
        "exe": None if exe is None else str(exe),
        "app_version": None if attrs.get("app_version") is None
        else str(attrs["app_version"]),
        "attributes": to_json(attrs),
        "core_status": str(rec.core_status),
        "core_reason": rec.core_reason,
        "core_sha256": r.core.sha256,
        "blob_key": r.core.blob_key,
        "artifact": rec.artifact,
        "report": r.model_dump_json(),
        "ingested_at": utc_now(),
    }


def event_row(ev: TelemetryEvent) -> dict[str, Any]:
    """The ``telemetry`` row of an event (every column)."""
    return {
        "event_id": ev.event_id, "host_id": ev.host_id, "ts": ev.ts,
        "uptime_seconds": ev.uptime_seconds, "kind": str(ev.kind),
        "severity": ev.severity, "component": ev.component,
        "hardware_indicative": ev.hardware_indicative, "summary": ev.summary,
        "detail": to_json(ev.detail), "source": ev.source, "raw": ev.raw,
    }
