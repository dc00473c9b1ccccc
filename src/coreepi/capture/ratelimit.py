"""Token buckets (per executable, per host) and the per-signature daily core budget.

State lives in the spool's ``state/`` as small JSON files, read and written
under an exclusive flock, so concurrent collectors (a crash storm runs many at
once) agree. A bucket holds at most ``burst`` tokens and regains
``per_hour / 3600`` tokens per second; keeping a core costs one token from the
executable's bucket and one from the host's. A crash whose core is refused is
still recorded: only the core is dropped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from coreepi.capture.config import RateLimitConfig
from coreepi.capture.spool import Spool, atomic_write

__all__ = ["Decision", "SignatureBudget", "take_core_tokens"]

MAX_EXECUTABLES = 4096  # bucket table size bound (least recently used are dropped)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str | None = None


def _load(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _level(bucket: object, burst: float, per_second: float, now: float) -> float:
    if not (isinstance(bucket, list) and len(bucket) == 2):
        return burst
    tokens, stamp = float(bucket[0]), float(bucket[1])
    return min(burst, tokens + max(0.0, now - stamp) * per_second)


def take_core_tokens(
    spool: Spool, limits: RateLimitConfig, exe: str | None, now: float | None = None
) -> Decision:
    """Take one token for ``exe`` and one for the host, or neither.

    Returns ``Decision(False, reason)`` naming the bucket that was empty.
    """
    now = time.time() if now is None else now
    key = exe or "<unknown>"
    with spool.locked("ratelimit.json") as path:
        state = _load(path)
        exes = state.get("executables")
        if not isinstance(exes, dict):
            exes = {}
        exe_level = _level(exes.get(key), limits.executable_burst,
                           limits.executable_per_hour / 3600.0, now)
        host_level = _level(state.get("host"), limits.host_burst, limits.host_per_hour / 3600.0, now)
        if exe_level < 1.0:
            return Decision(False, f"rate-limit: executable {key} over "
                            f"{limits.executable_per_hour:g}/h (burst {limits.executable_burst:g})")
        if host_level < 1.0:
            return Decision(False, f"rate-limit: host over {limits.host_per_hour:g}/h "
                            f"(burst {limits.host_burst:g})")
        exes[key] = [exe_level - 1.0, now]
        if len(exes) > MAX_EXECUTABLES:
            for old in sorted(exes, key=lambda k: exes[k][1])[: len(exes) - MAX_EXECUTABLES]:
                del exes[old]
        state = {"executables": exes, "host": [host_level - 1.0, now]}
        atomic_write(path, json.dumps(state).encode())
    return Decision(True)


class SignatureBudget:
    """Cores kept for the first ``per_day`` crashes of each signature per UTC day."""

    def __init__(self, spool: Spool, per_day: int) -> None:
        self.spool = spool
        self.per_day = per_day

    def take(self, signature: str, now: float | None = None) -> Decision:
        day = datetime.fromtimestamp(time.time() if now is None else now, UTC).strftime("%Y-%m-%d")
        with self.spool.locked("signatures.json") as path:
            state = _load(path)
            counts = state.get(day)
            if not isinstance(counts, dict):
                counts = {}
            seen = int(counts.get(signature, 0))
            counts[signature] = seen + 1
            atomic_write(path, json.dumps({day: counts}).encode())  # yesterday is forgotten
        if seen >= self.per_day:
            return Decision(False, f"signature-budget: {self.per_day} cores of this signature "
                            f"already kept today ({day})")
        return Decision(True)
