"""ServeConfig: the settings of ``coreepi serve`` (limits, analysis, auth)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MiB", "ServeConfig"]

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Settings of the ingest and query server.

    ``max_body_bytes``: largest JSON request body (reports, heartbeats), bytes.
    ``max_core_bytes``: largest core upload as sent (zstd-compressed), bytes.
    ``max_core_uncompressed_bytes``: largest core after decompression, bytes
    (a small zstd stream can expand to terabytes; this bounds the disk a core
    takes while it is analysed).
    ``analysis_timeout_seconds`` / ``analysis_memory_limit_mb``: limits of the
    sandboxed analysis process of one uploaded core (wall time, address space).
    ``analysis_jobs``: cores analysed at once; more uploads wait.
    ``tmp_dir``: where uploads are spooled while received (default: the data
    dir's ``tmp/``, on the same file system as the blobs).
    ``token_cache_seconds``: how long the token table is cached in memory
    (revocations through the API take effect at once).
    ``metrics_public``: serve ``/metrics`` without a token (Prometheus scrapers).
    """

    max_body_bytes: int = 16 * MiB
    max_core_bytes: int = 2048 * MiB
    max_core_uncompressed_bytes: int = 16384 * MiB
    analysis_timeout_seconds: float = 300.0
    analysis_memory_limit_mb: int | None = 4096
    analysis_jobs: int = field(default_factory=lambda: max(1, (os.cpu_count() or 2) // 2))
    symbol_dirs: tuple[Path, ...] = ()
    tmp_dir: Path | None = None
    token_cache_seconds: float = 5.0
    metrics_public: bool = True
    store_threads: int = 16
