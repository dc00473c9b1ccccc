"""Alert rules from a TOML file: detector parameters, receivers, delivery, schedule.

```toml
[evaluation]
interval_seconds = 300          # coreepi serve / watch: how often
kinds = ["new-group", "rising", "rollout-regression", "hardware-suspect-host"]

[detectors]                     # any field of coreepi.epi.surveillance.DetectorParams
rising_threshold = 8.0

[delivery]
retries = 4                     # attempts after the first
backoff_seconds = 1.0           # doubles each retry
timeout_seconds = 5.0

[[receiver]]
name = "ops-slack"
format = "slack"                # json | slack | alertmanager
url = "https://hooks.slack.com/services/…"
kinds = ["hardware-suspect-host"]   # optional: only these kinds
```

Every error is one :class:`~coreepi.errors.InputError` naming the file and the key
(and, for a number out of its range, the value and the range: :data:`RANGES`).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreepi.epi.surveillance import KINDS, DetectorParams, Kind
from coreepi.errors import InputError

__all__ = ["FORMATS", "Delivery", "Receiver", "Rules", "load_rules", "rules_from"]

FORMATS = ("json", "slack", "alertmanager")


@dataclass(frozen=True)
class Receiver:
    """One webhook: ``format`` one of :data:`FORMATS`; ``kinds`` empty = all."""

    name: str
    format: str
    url: str
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Delivery:
    """Retries after the first attempt, the first backoff (doubling), the per-request timeout."""

    retries: int = 4
    backoff_seconds: float = 1.0
    timeout_seconds: float = 5.0


@dataclass(frozen=True)
class Rules:
    """Everything the evaluation needs besides the store."""

    detectors: DetectorParams = field(default_factory=DetectorParams)
    kinds: tuple[Kind, ...] = KINDS
    interval_seconds: float = 300.0
    delivery: Delivery = field(default_factory=Delivery)
    receivers: tuple[Receiver, ...] = ()


# accepted ranges, (low, low included?, high, high included?), None: unbounded; a value
# outside makes a detector meaningless or a loop spin (interval 0: watch busy-loops)
_POSITIVE = (0, False, None, False)
_AT_LEAST_1 = (1, True, None, False)
_ABOVE_1 = (1, False, None, False)
_PROBABILITY = (0, False, 1, False)
RANGES: dict[str, tuple[float | None, bool, float | None, bool]] = {
    "evaluation.interval_seconds": _POSITIVE,
    "detectors.new_min_crashes": _AT_LEAST_1, "detectors.new_min_hosts": _AT_LEAST_1,
    "detectors.window_days": _POSITIVE, "detectors.baseline_days": _POSITIVE,
    "detectors.rising_ratio": _ABOVE_1, "detectors.rising_threshold": _POSITIVE,
    "detectors.rising_min_baseline": _AT_LEAST_1,
    "detectors.rollout_share": (0, False, 1, True),
    "detectors.rollout_start_share": (0, True, 1, False),
    "detectors.rollout_min_crashes": _AT_LEAST_1, "detectors.rollout_min_hosts": _AT_LEAST_1,
    "detectors.rollout_min_ratio": _POSITIVE,
    "detectors.rollout_alpha": _PROBABILITY, "detectors.host_ratio": _ABOVE_1,
    "detectors.host_hw_share": _PROBABILITY, "detectors.host_alpha": _PROBABILITY,
    "detectors.host_beta": _PROBABILITY,
    "delivery.retries": (0, True, None, False), "delivery.backoff_seconds": (0, True, None, False),
    "delivery.timeout_seconds": _POSITIVE,
}


def _in_range(value: float, bounds: tuple[float | None, bool, float | None, bool]) -> bool:
    lo, lo_in, hi, hi_in = bounds
    if math.isnan(value):  # TOML has nan
        return False
    return ((lo is None or value > lo or lo_in and value == lo)
            and (hi is None or value < hi or hi_in and value == hi))


def _range_text(bounds: tuple[float | None, bool, float | None, bool]) -> str:
    lo, lo_in, hi, hi_in = bounds
    parts = [] if lo is None else [f"{lo} {'<=' if lo_in else '<'} x"]
    if hi is not None:
        parts.append(f"x {'<=' if hi_in else '<'} {hi}")
    return " and ".join(parts).replace("x and x", "x")


def _take(src: str, section: str, table: Any, allowed: dict[str, type]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InputError(src, f"[{section}] must be a table")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in allowed:
            raise InputError(src, f"{section}.{key}: unknown key (known: {', '.join(allowed)})")
        want = allowed[key]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if want is tuple and isinstance(value, list):
            value = tuple(value)
        if not isinstance(value, want) or isinstance(value, bool) and want is not bool:
            raise InputError(src, f"{section}.{key}: expected {want.__name__}, "
                                  f"got {type(value).__name__} {value!r}")
        bounds = RANGES.get(f"{section}.{key}")
        if bounds is not None and not _in_range(value, bounds):
            raise InputError(src, f"{section}.{key}: {value!r} is out of range "
                                  f"(accepted: {_range_text(bounds)})")
        out[key] = value
    return out


def _fields(cls: type) -> dict[str, type]:
    types = {"int": int, "float": float, "str": str, "bool": bool}
    return {f.name: types.get(str(f.type), tuple) for f in dataclasses.fields(cls)}


def _receiver(src: str, i: int, table: Any) -> Receiver:
    got = _take(src, f"receiver[{i}]", table, {"name": str, "format": str, "url": str,
                                               "kinds": tuple})
    for need in ("name", "format", "url"):
        if need not in got:
            raise InputError(src, f"receiver[{i}]: missing {need}")
    if got["format"] not in FORMATS:
        raise InputError(src, f"receiver[{i}].format: {got['format']!r} is not one of "
                              f"{', '.join(FORMATS)}")
    if not got["url"].startswith(("http://", "https://")):
        raise InputError(src, f"receiver[{i}].url: {got['url']!r} is not an http(s) URL")
    _check_kinds(src, f"receiver[{i}].kinds", got.get("kinds", ()))
    return Receiver(**got)


def _check_kinds(src: str, where: str, kinds: tuple[str, ...]) -> None:
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise InputError(src, f"{where}: unknown kind {bad[0]!r} (known: {', '.join(KINDS)})")


def rules_from(data: dict[str, Any], src: str = "rules") -> Rules:
    """Rules from parsed TOML ``data``; ``src`` names it in errors."""
    unknown = sorted(set(data) - {"evaluation", "detectors", "delivery", "receiver"})
    if unknown:
        raise InputError(src, f"{unknown[0]}: unknown table (known: evaluation, detectors, "
                              "delivery, receiver)")
    ev = _take(src, "evaluation", data.get("evaluation", {}),
               {"interval_seconds": float, "kinds": tuple})
    _check_kinds(src, "evaluation.kinds", ev.get("kinds", ()))
    det = _take(src, "detectors", data.get("detectors", {}), _fields(DetectorParams))
    dl = _take(src, "delivery", data.get("delivery", {}), _fields(Delivery))
    receivers = data.get("receiver", [])
    if not isinstance(receivers, list):
        raise InputError(src, "receiver: must be an array of tables ([[receiver]])")
    recs = tuple(_receiver(src, i, r) for i, r in enumerate(receivers))
    names = [r.name for r in recs]
    if len(set(names)) != len(names):
        raise InputError(src, "receiver: names must be unique")
    try:
        return Rules(DetectorParams(**det), tuple(ev.get("kinds", KINDS)),
                     ev.get("interval_seconds", 300.0), Delivery(**dl), recs)
    except (TypeError, ValueError) as e:
        raise InputError(src, str(e)) from None


def load_rules(path: str | Path | None) -> Rules:
    """Read a rules file; ``None`` gives the defaults (no receiver). Raises
    InputError for an unreadable file, bad TOML or a bad key."""
    if path is None:
        return Rules()
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(str(p), f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InputError(str(p), f"not UTF-8 text (byte {e.start}): TOML must be UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(str(p), f"not valid TOML: {e}") from None
    return rules_from(data, str(p))
