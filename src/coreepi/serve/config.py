"""ServeConfig: the settings of ``coreepi serve`` (limits, analysis, auth)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from coreepi.model.limits import READ_CPU_SECONDS, check_environment, max_write_backlog
from coreepi.serve.budget import POLL_SECONDS

if TYPE_CHECKING:
    from coreepi.surveil.rules import Rules

__all__ = ["MiB", "ServeConfig"]

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Settings of the ingest and query server.

    ``max_body_bytes``: largest JSON request body (reports, heartbeats), bytes.
    ``max_core_bytes``: largest core upload as sent (zstd-compressed), bytes.
    The decompressed size of a core is capped by the one limit
    ``max_core_bytes`` of docs/limits.md (``COREEPI_MAX_CORE_BYTES``, else
    the smaller of 32 GiB and the free space of the scratch dir minus 2 GiB):
    a small zstd stream can expand to terabytes; this bounds the disk a core
    takes while it is analysed.
    ``max_core_ratio`` / ``core_ratio_min_bytes``: the zstd-bomb rule. An
    upload is refused (413) once its decompressed size exceeds *both*
    ``core_ratio_min_bytes`` (default 1 GiB) and ``max_core_ratio`` times its
    compressed size (default 1000:1). Real cores compress well, but rarely
    beyond 1000:1 at gigabyte sizes; a stream of zeros compresses ~30000:1.
    Every upload is checked by decompressing it into a byte counter (nothing
    written); it must start with the ELF magic ``\\x7fELF`` (else 422). It is
    decompressed to disk (under ``tmp_dir``) only when it must be analysed
    here, and then only within the ``analysis_jobs`` limit.
    ``analysis_timeout_seconds`` / ``analysis_memory_limit_mb``: limits of the
    sandboxed analysis process of one uploaded core (wall time, address space).
    ``analysis_jobs``: cores analysed at once by this server's own worker
    threads (:mod:`coreepi.serve.analysis`); 0: none, ``coreepi worker``
    processes do it (a PostgreSQL store). Uploads never wait for analysis.
    ``warm_analysis``: fork each analysis child from a pre-imported zygote
    per worker thread (:class:`coreepi.reanalysis.warm.WarmLauncher`, the
    same sandbox limits; ``coreepi worker`` does the same); False: a new
    Python per core (``coreepi worker --cold``'s path).
    ``max_clock_skew_seconds``: how far in the future (past the server's
    clock) a heartbeat's ``end`` or a crash report's ``captured_at`` may lie;
    further is refused (422). Default one day.
    ``tmp_dir``: where uploads are spooled while received (default: the data
    dir's ``tmp/``, on the same file system as the blobs).
    ``token_cache_seconds``: how long the token table is cached in memory
    (revocations through the API take effect at once).
    ``metrics_public``: serve ``/metrics`` without a token (Prometheus scrapers).
    ``findings_debounce_seconds`` / ``findings_max_delay_seconds``: the report
    (findings) is recomputed once writes have been quiet this long, and at
    the latest this long after the first write it has not seen.
    ``max_write_backlog``: crash reports (and, apart, heartbeats) waiting for
    their group commit beyond which a new one is refused with 503 and
    ``Retry-After`` (:data:`~coreepi.model.limits.MAX_WRITE_BACKLOG`,
    ``$COREEPI_MAX_WRITE_BACKLOG``).
    ``metrics_top_groups``: ``/metrics`` has per-group gauges for this many
    groups (highest rate first) plus one ``other`` series: bounded cardinality.
    ``read_cpu_seconds``: CPU seconds one read request may use before its
    store queries are cancelled (503 naming the limit; docs/limits.md); at
    least :data:`~coreepi.serve.budget.POLL_SECONDS` (ValueError below it).
    ``alert_rules``: when given, the surveillance rules evaluated on their
    schedule in a background thread (:mod:`coreepi.surveil`).
    """

    max_body_bytes: int = 16 * MiB
    max_core_bytes: int = 2048 * MiB
    max_core_ratio: int = 1000
    core_ratio_min_bytes: int = 1024 * MiB
    max_clock_skew_seconds: float = 86400.0
    analysis_timeout_seconds: float = 300.0
    analysis_memory_limit_mb: int | None = 4096
    analysis_jobs: int = field(default_factory=lambda: max(1, (os.cpu_count() or 2) // 2))
    warm_analysis: bool = True
    symbol_dirs: tuple[Path, ...] = ()
    tmp_dir: Path | None = None
    token_cache_seconds: float = 5.0
    metrics_public: bool = True
    store_threads: int = 16
    findings_debounce_seconds: float = 2.0
    findings_max_delay_seconds: float = 30.0
    max_write_backlog: int = field(default_factory=max_write_backlog)
    metrics_top_groups: int = 20
    read_cpu_seconds: float = READ_CPU_SECONDS
    alert_rules: Rules | None = None

    def __post_init__(self) -> None:
        """LimitEnvError for a bad ``COREEPI_*`` limit variable (checked here,
        not when the first core arrives); ValueError for a ``read_cpu_seconds``
        below the budget's poll interval, which no read could be held to."""
        check_environment()
        if self.read_cpu_seconds < POLL_SECONDS:
            raise ValueError(f"{self.read_cpu_seconds:g} s is below the {POLL_SECONDS * 1000:g} "
                             "ms at which a read's CPU time is checked, so it could not be kept "
                             f"(give at least {POLL_SECONDS:g})")
