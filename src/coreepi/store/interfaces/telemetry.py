"""TelemetryStore: hardware and kernel events (MCE, EDAC, AER, GPU Xid …).

Rows are :class:`~coreepi.model.events.TelemetryEvent`, identified by
``event_id`` (writes are idempotent by it). Times are UTC.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import abc
from collections.abc import Iterable
from datetime import datetime

from coreepi.store.interfaces.session import Transactional

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.events import TelemetryEvent

__all__ = ["TelemetryStore"]


class TelemetryStore(Transactional):
    """Telemetry events: write idempotently, read as a frame."""

    @abc.abstractmethod
    def add_events(self, events: Iterable[TelemetryEvent]) -> int:
        """Insert events, idempotent by ``event_id`` (a stored event is kept as
        first written; one given twice is stored once); returns how many
        were new. Every field of the event is kept (``detail`` as JSON)."""

    @abc.abstractmethod
    def telemetry_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        """Events with ``since <= ts < until`` (None: unbounded), by ``ts`` then
        ``event_id``. Columns (:data:`coreepi.store.frames.TELEMETRY_COLUMNS`):
        ``event_id, host_id`` (str), ``ts`` (datetime64[…, UTC]), ``kind,
        severity, component`` (str or None), ``hardware_indicative`` (bool),
        ``summary`` (str)."""
