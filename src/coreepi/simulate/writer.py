"""Write a simulated fleet as a fleet directory (``docs/fleet-directory.md``)
plus the answers: ``truth.json`` (deterministic given scenario and seed) and
``run.json`` (what this run observed: where injected faults landed, where
each program crashed, timings — these vary run to run).

::

    FLEET/
      hosts.csv            host_id + the scenario's host attributes
      exposure.csv         host_id, start, end, app_version
      telemetry.jsonl      planted hardware events and background noise
      crashes/NAME.core.zst + NAME.core.json (sidecar)
      symbols/WORKLOAD-VERSION/WORKLOAD   the binaries (found by build-id)
      truth.json, run.json
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coreepi.simulate.exposure import Interval
from coreepi.simulate.hosts import Host
from coreepi.simulate.sampling import PlannedCrash

__all__ = [
    "TRUTH_FORMAT",
    "core_file",
    "iso",
    "sidecar_file",
    "write_exposure",
    "write_hosts",
    "write_json",
    "write_sidecar",
    "write_telemetry",
]

TRUTH_FORMAT = "coreepi-truth/1"


def iso(t: int) -> str:
    """Epoch seconds as ISO-8601 UTC with a ``Z``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def core_file(name: str) -> str:
    """Path of a crash's core, relative to the fleet directory."""
    return f"crashes/{name}.core.zst"


def sidecar_file(name: str) -> str:
    """Path of a crash's sidecar (``NAME.core.json``: the reader pairs it with
    ``NAME.core.zst`` by dropping the compression suffix)."""
    return f"crashes/{name}.core.json"


def write_hosts(root: Path, hosts: list[Host], columns: list[str]) -> None:
    with open(root / "hosts.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["host_id", *columns])
        for h in hosts:
            w.writerow([h.host_id, *(h.attributes.get(c, "") for c in columns)])


def write_exposure(root: Path, intervals: Iterable[Interval], columns: list[str]) -> None:
    with open(root / "exposure.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["host_id", "start", "end", *columns])
        for iv in intervals:
            w.writerow(
                [
                    iv.host_id,
                    iso(iv.start),
                    iso(iv.end),
                    *(iv.overrides.get(c, "") for c in columns),
                ]
            )


def write_telemetry(root: Path, events: Iterable[Mapping[str, Any]]) -> int:
    """telemetry.jsonl: one TelemetryEvent-compatible object a line. What
    planted an event stays out of the file (it is in truth.json)."""
    n = 0
    with open(root / "telemetry.jsonl", "w", encoding="utf-8") as fh:
        for ev in events:
            obj: dict[str, Any] = {
                "host_id": ev["host_id"],
                "ts": iso(ev["ts"]),
                "kind": ev["kind"],
            }
            for key in ("severity", "component"):
                if ev.get(key):
                    obj[key] = ev[key]
            obj["hardware_indicative"] = ev["hardware_indicative"]
            what = ev["kind"].replace("_", " ").upper()
            where = f" ({ev['component']})" if ev.get("component") else ""
            obj["summary"] = f"{what}{where} on {ev['host_id']}"
            fh.write(json.dumps(obj, sort_keys=True) + "\n")
            n += 1
    return n


def write_sidecar(root: Path, crash: PlannedCrash) -> None:
    sidecar = {
        "host_id": crash.host_id,
        "captured_at": iso(crash.time),
        "app_version": crash.version,
        "workload": crash.workload,
        "exe": crash.workload,
    }
    (root / sidecar_file(crash.name)).write_text(json.dumps(sidecar, sort_keys=True) + "\n")


def write_symbols(root: Path, binaries: Mapping[tuple[str, str], Path]) -> None:
    for (workload, version), path in sorted(binaries.items()):
        d = root / "symbols" / f"{workload}-{version}"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, d / path.name)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
