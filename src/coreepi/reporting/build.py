"""From the store to FleetFindings: the one place ``coreepi report`` reads data."""

from __future__ import annotations

from datetime import datetime, timedelta

from coreepi.epi import EpiConfig, FleetFindings, analyze_fleet
from coreepi.epi.tables import NodeTime
from coreepi.store import Store

__all__ = ["build_findings"]


def build_findings(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    config: EpiConfig | None = None,
) -> FleetFindings:
    """Study the store's crashes over ``[since, until)`` (see :func:`coreepi.epi.analyze_fleet`).

    Uses the store's summed path (:meth:`Store.node_time_frames`: exposure
    summed in SQL, crashes matched to their interval there) when it has one,
    else the crash and exposure frames. Telemetry is read from
    ``config.telemetry_days`` before ``since``, since events just before the
    window explain crashes just inside it.
    """
    config = config or EpiConfig()
    frames = store.node_time_frames(since, until)
    if frames is not None:
        lo: datetime | None = frames.since
        hi: datetime | None = frames.until
        crashes = frames.crashes
        exposure: NodeTime | object = NodeTime(frames.since, frames.until, frames.sets,
                                               frames.by_host, frames.host_sets)
    else:
        crashes = store.crash_frame(since, until)
        exposure = store.exposure_frame(since, until)
        lo, hi = since, until
    try:
        tel_since = lo - timedelta(days=config.telemetry_days) if lo is not None else None
    except OverflowError:  # a window from near year 1 (a row stored before the time limits)
        tel_since = None
    telemetry = store.telemetry_frame(tel_since, hi)
    return analyze_fleet(
        crashes,
        exposure,
        telemetry if len(telemetry) else None,
        since=lo,
        until=hi,
        config=config,
    )
