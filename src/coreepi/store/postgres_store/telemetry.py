"""The PostgreSQL :class:`~coreepi.store.interfaces.TelemetryStore`: the ``telemetry`` table."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.interfaces.telemetry import TelemetryStore
from coreepi.store.postgres_store.gateway import PostgresGateway
from coreepi.store.rows import event_row
from coreepi.store.sqlbuild import Where

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.events import TelemetryEvent
    from coreepi.store.frames import TELEMETRY_COLUMNS, telemetry_frame_from

__all__ = ["PostgresTelemetryStore"]

EVENT_TYPES = {
    "event_id": "VARCHAR", "host_id": "VARCHAR", "ts": "TIMESTAMPTZ",
    "uptime_seconds": "DOUBLE PRECISION", "kind": "VARCHAR", "severity": "VARCHAR",
    "component": "VARCHAR", "hardware_indicative": "BOOLEAN", "summary": "VARCHAR",
    "detail": "TEXT", "source": "VARCHAR", "raw": "TEXT",
}


class PostgresTelemetryStore(PostgresGateway, TelemetryStore):
    """Telemetry events in PostgreSQL (one batch = one statement)."""

    def add_events(self, events: Iterable[TelemetryEvent]) -> int:
        rows: dict[str, tuple[Any, ...]] = {}
        for ev in events:
            if ev.event_id not in rows:
                row = event_row(ev)
                rows[ev.event_id] = tuple(row[c] for c in EVENT_TYPES)
        if not rows:
            return 0
        return self._insert_rows("telemetry", EVENT_TYPES, list(rows.values())).rowcount

    def telemetry_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        from coreepi.store.frames import TELEMETRY_COLUMNS, telemetry_frame_from

        where = Where().since_until("ts", since, until)
        rows = self._frame(f"SELECT {', '.join(TELEMETRY_COLUMNS)} FROM telemetry{where.sql} "
                           "ORDER BY ts, event_id", where.params)
        return telemetry_frame_from(rows)
