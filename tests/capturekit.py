"""Helpers for the capture and agent tests: configs, running ``collect`` as a
real process fed through a real pipe, reading spool entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

DEFAULTS: dict[str, dict[str, Any]] = {
    "collect": {"edge_analysis_seconds": 0, "edge_analysis_detach": False},
    "rate_limit": {"executable_burst": 100, "host_burst": 100},
    "agent": {"heartbeat_seconds": 3600, "poll_seconds": 0.2,
              "backoff_initial_seconds": 0.1, "backoff_max_seconds": 0.5,
              "request_timeout_seconds": 10},
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def write_config(directory: Path, top: dict[str, Any] | None = None,
                 **tables: dict[str, Any]) -> Path:
    """Write ``directory/c.toml`` with a spool in ``directory/spool``;
    ``tables`` override :data:`DEFAULTS` per table."""
    lines = [f"spool_dir = {_toml_value(directory / 'spool')}"]
    for key, value in (top or {}).items():
        lines.append(f"{key} = {_toml_value(value)}")
    for table in sorted(set(DEFAULTS) | set(tables)):
        merged = {**DEFAULTS.get(table, {}), **tables.get(table, {})}
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in merged.items()]
    path = directory / "c.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def kernel_args(pid: int = 0, signal: int = 11, when: int = 1_700_000_000,
                comm: str = "crasher", tid: int | None = None) -> list[str]:
    """%P %i %I %s %t %h %e %u %g %c as the kernel would expand them."""
    tid = pid if tid is None else tid
    return [str(pid), str(tid), str(tid), str(signal), str(when), "testhost", comm, "0", "0",
            "0"]


def collect_cmd(config: Path, args: list[str]) -> list[str]:
    return [PYTHON, "-m", "coreepi", "collect", "--config", str(config), "--", *args]


def run_collect(config: Path, args: list[str], stdin_path: Path | None = None,
                data: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """Run ``collect`` as its own process with a real pipe on stdin."""
    proc = subprocess.Popen(collect_cmd(config, args), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    if stdin_path is not None:
        with open(stdin_path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                proc.stdin.write(chunk)
    elif data is not None:
        proc.stdin.write(data)
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() only reads
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def queued(spool: Path) -> list[Path]:
    queue = spool / "queue"
    return sorted(p for p in queue.iterdir() if (p / "report.json").exists()) \
        if queue.exists() else []


def report_of(entry: Path) -> dict[str, Any]:
    return json.loads((entry / "report.json").read_text())


def wait_ready(spool: Path, count: int, timeout: float = 120) -> list[Path]:
    """Wait until ``count`` entries are queued and none is pending analysis."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = queued(spool)
        if len(entries) >= count and not any((e / ".analysis-pending").exists() for e in entries):
            return entries
        time.sleep(0.1)
    raise AssertionError(f"spool {spool}: {len(queued(spool))} entries, wanted {count} ready")


def env_without_coreepi() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("COREEPI_")}
