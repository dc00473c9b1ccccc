"""The DuckDB :class:`~coreepi.store.interfaces.TelemetryStore`: the ``telemetry`` table."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.duckdb_store.gateway import DuckDBGateway, Where
from coreepi.store.interfaces.telemetry import TelemetryStore
from coreepi.store.rows import event_row

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.events import TelemetryEvent
    from coreepi.store.frames import TELEMETRY_COLUMNS, telemetry_frame_from

__all__ = ["DuckDBTelemetryStore"]

_EVENT_CASTS = {c: "VARCHAR" for c in ("host_id", "severity", "component", "source", "raw")}
_EVENT_CASTS |= {"ts": "TIMESTAMPTZ", "uptime_seconds": "DOUBLE PRECISION"}


class DuckDBTelemetryStore(DuckDBGateway, TelemetryStore):
    """Telemetry events in DuckDB (one batch = one statement)."""

    def add_events(self, events: Iterable[TelemetryEvent]) -> int:
        import pandas as pd

        rows: dict[str, dict[str, Any]] = {}
        for ev in events:
            rows.setdefault(ev.event_id, event_row(ev))
        return self._insert_frame("telemetry", pd.DataFrame(list(rows.values())),
                                  casts=_EVENT_CASTS)

    def telemetry_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        from coreepi.store.frames import TELEMETRY_COLUMNS, telemetry_frame_from

        where = Where().since_until("ts", since, until)
        rows = self._query(
            f"SELECT {', '.join(TELEMETRY_COLUMNS)} FROM telemetry{where.sql} "
            "ORDER BY ts, event_id",
            where.params,
        ).df()
        return telemetry_frame_from(rows)
