"""Exposure heartbeats: the denominator of every incidence rate.

A heartbeat says "this host (boot) was observed from ``start`` to ``end``"
with its load over that time. ``start`` is the ``end`` of the last heartbeat
the server acknowledged in the same boot, so intervals tile the boot with no
gap and no overlap, even across server outages (the next acknowledged
heartbeat covers the outage) and agent restarts. In a new boot the first
interval starts at the boot (the collector, installed via sysctl.d, was the
core_pattern handler since then); on a host never seen before it starts when
the agent started. Host facts travel in full only when they changed since the
last acknowledged heartbeat (``facts`` is null otherwise).

Body of ``POST /api/v1/heartbeats``::

    {"host_id": "...", "boot_id": "...",
     "start": "2025-01-01T00:00:00Z", "end": "2025-01-01T00:05:00Z",
     "facts": {HostFacts} | null,
     "load": {"loadavg_1m": 0.42, "memory_pressure_some_avg10": 0.0,
              "uptime_seconds": 12345.6}}
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coreepi.capture.config import CaptureConfig
from coreepi.capture.hostfacts import host_facts
from coreepi.capture.spool import Spool, atomic_write

__all__ = ["Heartbeat", "acknowledge", "build_heartbeat", "load_figures"]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def load_figures(root: Path = Path("/")) -> dict[str, float | None]:
    """1-minute load average (/proc/loadavg), the share of the last 10 s in
    which some task stalled on memory (/proc/pressure/memory ``some avg10``,
    percent; None without PSI), and uptime in seconds (/proc/uptime)."""
    out: dict[str, float | None] = {
        "loadavg_1m": None, "memory_pressure_some_avg10": None, "uptime_seconds": None}
    if text := _read(root / "proc/loadavg"):
        out["loadavg_1m"] = float(text.split()[0])
    for line in (_read(root / "proc/pressure/memory") or "").splitlines():
        if line.startswith("some "):
            fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            if "avg10" in fields:
                out["memory_pressure_some_avg10"] = float(fields["avg10"])
    if text := _read(root / "proc/uptime"):
        out["uptime_seconds"] = float(text.split()[0])
    return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Heartbeat:
    """One heartbeat body and what to remember once the server has it."""

    def __init__(self, body: dict[str, Any], end: float, facts_sha: str) -> None:
        self.body = body
        self.end = end
        self.facts_sha = facts_sha


def _state(spool: Spool) -> dict[str, Any]:
    try:
        data = json.loads((spool.state / "heartbeat.json").read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def build_heartbeat(
    config: CaptureConfig, spool: Spool, agent_started: float, now: float | None = None
) -> Heartbeat:
    now = time.time() if now is None else now
    identity = host_facts(config, spool)
    load = load_figures()
    state = _state(spool)
    if state.get("boot_id") == identity.boot_id and isinstance(state.get("end"), (int, float)):
        start = float(state["end"])
    elif state.get("boot_id") and load["uptime_seconds"] is not None:
        start = now - load["uptime_seconds"]  # a new boot of a host seen before
    else:
        start = agent_started
    start = min(start, now - 0.001)  # the server wants start < end
    facts = identity.facts.model_dump(mode="json")
    sha = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()
    body = {
        "host_id": identity.host_id,
        "boot_id": identity.boot_id,
        "start": _iso(start),
        "end": _iso(now),
        "facts": None if state.get("facts_sha") == sha else facts,
        "load": load,
    }
    return Heartbeat(body, now, sha)


def acknowledge(spool: Spool, beat: Heartbeat) -> None:
    """The server stored ``beat``: the next interval starts at its end."""
    state = {"boot_id": beat.body["boot_id"], "end": beat.end, "facts_sha": beat.facts_sha}
    atomic_write(spool.state / "heartbeat.json", json.dumps(state).encode())
