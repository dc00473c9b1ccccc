"""The drain loop on the store: re-check one drained host now (the host page, the API).

:func:`coreepi.surveil.evaluate` re-checks every drained host on its
schedule; a page that shows one drained host calls :func:`recheck`, which
reads only the span the re-check needs (the ``baseline_days`` before the
drain up to ``now``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

from coreepi.epi.surveillance import DetectorParams, drain_recheck
from coreepi.store.alert_records import DrainRecord
from coreepi.store.base import Store

__all__ = ["drain_of", "recheck"]


def drain_of(store: Store, host_id: str) -> DrainRecord | None:
    """The host's drain record, None when it is not drained."""
    return next((d for d in store.drained_hosts() if d.host_id == host_id), None)


def recheck(store: Store, drain: DrainRecord, params: DetectorParams,
            now: datetime | None = None) -> dict[str, float | int | str]:
    """:func:`coreepi.epi.surveillance.drain_recheck` of ``drain`` at ``now``
    (default: the current time, UTC) over the store's crashes and exposure
    from ``baseline_days`` before the drain. Raises StoreError when the
    store cannot be read."""
    now = now or datetime.now(UTC)
    since = drain.drained_at - timedelta(days=params.baseline_days)
    crashes = store.crash_frame(since=since, until=now + timedelta(microseconds=1))
    exposure = store.exposure_frame(since=since, until=now)
    return drain_recheck(crashes, exposure, drain.host_id, pd.Timestamp(drain.drained_at),
                         pd.Timestamp(now), params)
