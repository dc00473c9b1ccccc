"""The limits coreepi puts on what it accepts: one name, one default, one check each.

Every limit that protects the store, the disk or the read path from odd or
hostile input is defined here and listed (same names, same defaults) in
``docs/limits.md``; a test keeps the two in step. A limit whose default must
fit the machine (:data:`MAX_CORE_BYTES`) or the site can be overridden by the
environment variable of its ``env`` field.

What happens beyond a limit:

- a time outside [:data:`EARLIEST_TIME`, now + :data:`MAX_CLOCK_SKEW_SECONDS`]:
  the row is rejected (HTTP 422, an ingest rejection naming the limit);
- crash or interval attributes beyond the key count or key/value lengths:
  rejected by the HTTP API (422 naming the limit); from files (sidecars, a
  fleet directory) the crash is kept, the extra keys dropped and counted
  (one "kept with a problem" line naming the limit) — the crash must still
  count in the numerator;
- writes (crash reports, heartbeats) waiting for the store beyond
  :data:`MAX_WRITE_BACKLOG` on one server: refused with HTTP 503 and
  ``Retry-After`` (nothing stored; the agent keeps it and comes back);
- distinct attribute keys of a fleet beyond :data:`MAX_ATTRIBUTE_COLUMNS`:
  the crash frame keeps the most frequent keys as columns and counts the
  rest in ``frame.attrs["dropped_attribute_keys"]``;
- a server read past :data:`READ_CPU_SECONDS`: its store queries are
  cancelled and the client gets 503 naming the limit
  (:mod:`coreepi.serve.budget`).

Pure values and checks: no I/O besides reading the environment (and
:func:`max_core_bytes`'s ``statvfs`` of the scratch directory).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

__all__ = [
    "CORE_SCRATCH_RESERVE_BYTES",
    "EARLIEST_TIME",
    "LIMITS",
    "MAX_ATTRIBUTE_COLUMNS",
    "MAX_ATTRIBUTE_KEYS",
    "MAX_ATTRIBUTE_KEY_CHARS",
    "MAX_ATTRIBUTE_VALUE_CHARS",
    "MAX_CLOCK_SKEW_SECONDS",
    "MAX_CORE_BYTES_CEILING",
    "MAX_WRITE_BACKLOG",
    "READ_CPU_SECONDS",
    "AttributeLimitError",
    "Limit",
    "LimitEnvError",
    "TimeRangeError",
    "check_attributes",
    "check_environment",
    "check_time",
    "duckdb_threads",
    "max_core_bytes",
    "max_write_backlog",
    "trim_attributes",
]

GiB = 1 << 30
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Limit:
    """One named limit: ``name`` (as in docs/limits.md), its ``default``
    (display text), ``env`` (the variable overriding it, or None) and what it
    bounds (``what``, with the unit)."""

    name: str
    default: str
    env: str | None
    what: str


EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=UTC)
"""No crash, interval or event is dated before this (UTC): a clock that says
year 0001 or 1970 is wrong, and such a row would stretch every report window."""
MAX_CLOCK_SKEW_SECONDS = 86400.0
"""How far past this machine's clock a time may lie (node clocks drift)."""
MAX_ATTRIBUTE_KEYS = 64
"""Attribute keys of one crash (sidecar / report ``attributes``) or one
interval (heartbeat ``load``, hosts.csv columns, host facts flattened)."""
MAX_ATTRIBUTE_KEY_CHARS = 64
MAX_ATTRIBUTE_VALUE_CHARS = 256
MAX_ATTRIBUTE_COLUMNS = 256
"""Distinct attribute keys of a fleet that become crash-frame columns."""
MAX_CORE_BYTES_CEILING = 32 * GiB
CORE_SCRATCH_RESERVE_BYTES = 2 * GiB
"""Free space left on the scratch file system when a core is decompressed."""
MAX_WRITE_BACKLOG = 512
"""Crash reports (and, counted apart, heartbeats) waiting for their group
commit on one server process. Beyond it a request is refused with 503 +
Retry-After: at the ~1,000 writes/s of a replica on PostgreSQL, 512 waiting
is already half a second of queueing on top of the request's own time."""
READ_CPU_SECONDS = 10.0
"""CPU seconds one read request of the server (API, page) may spend in the
thread that serves it before its store queries are cancelled (503). Waiting
(for a lock, for the findings refresh) costs no CPU and does not count."""

LIMITS: tuple[Limit, ...] = (
    Limit("earliest_time", "2000-01-01T00:00:00Z", None,
          "earliest accepted captured_at / interval start / event time"),
    Limit("max_clock_skew_seconds", "86400", None,
          "latest accepted time, seconds past the receiver's clock"),
    Limit("max_attribute_keys", "64", None, "attribute keys per crash or per interval"),
    Limit("max_attribute_key_chars", "64", None, "characters of one attribute key"),
    Limit("max_attribute_value_chars", "256", None, "characters of one attribute value"),
    Limit("max_attribute_columns", "256", None,
          "distinct attribute keys of a fleet promoted to crash-frame columns"),
    Limit("max_core_bytes", "min(32 GiB, free space of the scratch dir - 2 GiB)",
          "COREEPI_MAX_CORE_BYTES", "decompressed size of one core, bytes"),
    Limit("max_write_backlog", "512", "COREEPI_MAX_WRITE_BACKLOG",
          "crash reports (and, apart, heartbeats) waiting for their commit on one server"),
    Limit("read_cpu_seconds", "10", "ServeConfig.read_cpu_seconds",
          "CPU time of one read request of the server, seconds"),
    Limit("duckdb_threads", "DuckDB's default (the CPUs)", "COREEPI_DUCKDB_THREADS",
          "threads DuckDB runs one query on; 1 makes read_cpu_seconds bound a read's "
          "whole CPU (the budget counts the request's own thread)"),
)


class LimitEnvError(ValueError):
    """A ``COREEPI_*`` limit variable whose value is not usable: ``variable``
    names it, ``str()`` is the reason alone (callers that name the variable
    themselves, as :func:`coreepi.parse.open_input.max_decompressed_bytes`
    does, keep their wording); :meth:`line` is both, one line."""

    def __init__(self, variable: str, reason: str) -> None:
        super().__init__(reason)
        self.variable = variable

    def line(self) -> str:
        """``"COREEPI_X: 'lots' is not a positive number of bytes"``."""
        return f"{self.variable}: {self}"


class TimeRangeError(ValueError):
    """A time outside the accepted range; ``str()`` names the field and the limit."""


class AttributeLimitError(ValueError):
    """Attributes beyond a limit; ``limit`` is the limit's name, ``str()`` says which key."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


def check_time(when: datetime, what: str, now: datetime | None = None,
               skew_seconds: float = MAX_CLOCK_SKEW_SECONDS) -> datetime:
    """``when`` (aware) if it lies in [EARLIEST_TIME, now + skew_seconds];
    else TimeRangeError naming ``what`` and the limit."""
    if when < EARLIEST_TIME:
        raise TimeRangeError(f"{what} {when.isoformat()} is before {EARLIEST_TIME.year} "
                             f"(limit earliest_time={EARLIEST_TIME.date().isoformat()})")
    now = now or datetime.now(UTC)
    if when > now + timedelta(seconds=skew_seconds):
        raise TimeRangeError(f"{what} {when.isoformat()} is in the future (this clock says "
                             f"{now.isoformat(timespec='seconds')}; limit "
                             f"max_clock_skew_seconds={skew_seconds:g})")
    return when


def _problem(key: object, value: object) -> AttributeLimitError | None:
    if len(str(key)) > MAX_ATTRIBUTE_KEY_CHARS:
        return AttributeLimitError("max_attribute_key_chars", f"attribute key {str(key)[:40]!r}… "
                                   f"is longer than {MAX_ATTRIBUTE_KEY_CHARS} characters "
                                   f"(limit max_attribute_key_chars)")
    if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_VALUE_CHARS:
        return AttributeLimitError("max_attribute_value_chars", f"attribute {key!s}'s value is "
                                   f"longer than {MAX_ATTRIBUTE_VALUE_CHARS} characters "
                                   f"(limit max_attribute_value_chars)")
    return None


def check_attributes(attributes: Mapping[str, object], what: str = "attributes") -> None:
    """AttributeLimitError (naming the limit) when ``attributes`` has more than
    MAX_ATTRIBUTE_KEYS keys, or a key / text value over its length limit."""
    if len(attributes) > MAX_ATTRIBUTE_KEYS:
        raise AttributeLimitError("max_attribute_keys", f"{what}: {len(attributes)} keys, more "
                                  f"than {MAX_ATTRIBUTE_KEYS} (limit max_attribute_keys)")
    for key, value in attributes.items():
        if (problem := _problem(key, value)) is not None:
            raise AttributeLimitError(problem.limit, f"{what}: {problem}")


def trim_attributes(attributes: Mapping[str, V]) -> tuple[dict[str, V], int, str | None]:
    """The attributes within the limits (the first MAX_ATTRIBUTE_KEYS keys in
    order whose key and value fit), how many were dropped, and the name of
    the first limit that dropped one (None: nothing dropped)."""
    kept: dict[str, V] = {}
    limit: str | None = None
    for key, value in attributes.items():
        problem = _problem(key, value)
        if problem is None and len(kept) < MAX_ATTRIBUTE_KEYS:
            kept[key] = value
        elif limit is None:
            limit = problem.limit if problem is not None else "max_attribute_keys"
    return kept, len(attributes) - len(kept), limit


def max_core_bytes(scratch: Path | None = None) -> int:
    """The largest decompressed core, bytes: ``$COREEPI_MAX_CORE_BYTES`` when
    set (LimitEnvError "'x' is not a positive number of bytes" when it is not a
    positive integer), else the smaller of
    32 GiB and, when the core is written to the directory ``scratch``, that
    file system's free space minus a 2 GiB reserve (at least 0). None: the
    content is only streamed (a log read as it is decompressed): 32 GiB."""
    value = _positive_env("COREEPI_MAX_CORE_BYTES")
    if value is not None:
        return value
    if scratch is None:
        return MAX_CORE_BYTES_CEILING
    free = shutil.disk_usage(scratch).free
    return max(0, min(MAX_CORE_BYTES_CEILING, free - CORE_SCRATCH_RESERVE_BYTES))


def max_write_backlog() -> int:
    """:data:`MAX_WRITE_BACKLOG`, or ``$COREEPI_MAX_WRITE_BACKLOG`` when set
    (LimitEnvError "'x' is not a positive number of writes" when it is not a
    positive integer)."""
    value = _positive_env("COREEPI_MAX_WRITE_BACKLOG")
    return MAX_WRITE_BACKLOG if value is None else value


def duckdb_threads() -> int | None:
    """``$COREEPI_DUCKDB_THREADS`` (a positive integer), None when unset:
    DuckDB's own default. LimitEnvError when set to anything else."""
    return _positive_env("COREEPI_DUCKDB_THREADS")


ENV_UNITS = {"COREEPI_MAX_CORE_BYTES": "bytes", "COREEPI_MAX_WRITE_BACKLOG": "writes",
             "COREEPI_DUCKDB_THREADS": "threads"}
"""The unit of each ``COREEPI_*`` limit variable (every ``env`` of :data:`LIMITS`
that is an environment variable; a test keeps the two in step)."""


def check_environment() -> None:
    """LimitEnvError for the first ``COREEPI_*`` limit variable set to
    something that is not a positive whole number: a command checks them all
    when it starts, so a typo is one line at once rather than a server that
    runs and then fails every core it is sent."""
    for name in ENV_UNITS:
        _positive_env(name)


def _positive_env(name: str) -> int | None:
    """The positive integer in ``$name``; None when unset or blank; LimitEnvError
    "'x' is not a positive number of <unit>" otherwise."""
    unit = ENV_UNITS[name]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise LimitEnvError(name, f"{raw!r} is not a positive number of {unit}")
    return value
