"""The analytics' heavy queries on a portable layer (Ibis): DuckDB, PostgreSQL, Spark.

``coreepi report --engine`` reads its input through :class:`EngineSource`:
the same two methods as a store (``node_time_frames``, ``telemetry_frame``),
computed by the chosen engine, so ``coreepi.reporting.build_findings`` and
the statistics (``coreepi.epi``, pure functions of the summed tables) are
the same on every engine. See ``docs/scale.md``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import duckdb
import pandas as pd

from coreepi.errors import StoreError
from coreepi.store.analytics.engines import (
    ENGINES,
    EngineTables,
    parquet_tables,
    spark_session,
    store_tables,
)
from coreepi.store.analytics.export import ExportResult, export_parquet
from coreepi.store.analytics.node_time import node_time_frames, utc_literal
from coreepi.store.frames import TELEMETRY_COLUMNS, NodeTimeFrames, telemetry_frame_from

__all__ = [
    "ENGINES",
    "EngineSource",
    "EngineTables",
    "ExportResult",
    "export_parquet",
    "node_time_frames",
    "parquet_tables",
    "spark_session",
    "store_tables",
]


class EngineSource:
    """What ``build_findings`` reads, computed by ``tables``' engine."""

    def __init__(self, tables: EngineTables) -> None:
        self.tables = tables

    def node_time_frames(self, since: datetime | None = None,
                         until: datetime | None = None) -> NodeTimeFrames:
        with self._engine_errors():
            return node_time_frames(self.tables, since, until)

    @contextmanager
    def _engine_errors(self) -> Iterator[None]:
        """A failure inside DuckDB (a corrupt Parquet part, a file gone) as
        one StoreError line naming the engine and, in DuckDB's text, the file."""
        try:
            yield
        except duckdb.Error as exc:
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise StoreError(f"the {self.tables.engine} engine failed: {first}") from None

    def telemetry_frame(self, since: datetime | None = None,
                        until: datetime | None = None) -> pd.DataFrame:
        """Telemetry events of ``[since, until)`` (see ``telemetry_frame_from``)."""
        t = self.tables.tables["telemetry"]
        if since is not None:
            t = t.filter(t.ts >= utc_literal(since))
        if until is not None:
            t = t.filter(t.ts < utc_literal(until))
        with self._engine_errors():
            rows = self.tables.backend.execute(t.select(*TELEMETRY_COLUMNS))
        # microseconds, as the stores give (Spark hands over nanoseconds)
        rows["ts"] = pd.to_datetime(rows["ts"], utc=True).astype("datetime64[us, UTC]")
        rows = rows.sort_values(["ts", "event_id"], kind="stable")
        return telemetry_frame_from(rows)
