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
from coreepi.errors import InputError
from coreepi.store.alert_records import DrainRecord
from coreepi.store.base import Store

__all__ = ["DRAIN_CLOCK_SKEW", "drain", "drain_of", "drain_start", "recheck"]

# a drain time may run ahead of this machine's clock by this much (the
# operator's or the scheduler's clock); further ahead is a typo, and a drain
# in the future would cut node-time that has not yet passed
DRAIN_CLOCK_SKEW = timedelta(minutes=5)


def drain_start(at: datetime | None, now: datetime | None = None,
                name: str = "drain time") -> datetime:
    """When a drain starts (UTC): ``at`` (a host drained earlier, by hand
    or in the scheduler; naive means UTC), default ``now`` (default: the
    current time). Its node-time is cut from then. Raises InputError when
    ``at`` is more than :data:`DRAIN_CLOCK_SKEW` after ``now`` (the message
    names it ``name``: ``--at`` on the CLI, ``at`` in the API)."""
    now = now or datetime.now(UTC)
    if at is None:
        return now
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    if at > now + DRAIN_CLOCK_SKEW:
        raise InputError(f"{name} {at.isoformat()}",
                         f"in the future (now is {now.isoformat(timespec='seconds')}); "
                         "a drain starts at or before now")
    return at


def drain(store: Store, host_id: str, by: str, reason: str, at: datetime | None = None,
          now: datetime | None = None, name: str = "drain time") -> bool | None:
    """Drain ``host_id`` from ``at`` (:func:`drain_start`; default now) by
    ``by`` for ``reason``: True newly drained, False already drained (the
    drain kept as it was), None not in the store. Raises InputError
    (``name`` names ``at`` in the message) when ``at`` is in the future,
    falls inside one of the host's ended drains (it was drained then
    already), or is given for a host drained already from another time (a
    drain recorded "now" by mistake: undrain it, then drain with the real
    time — the new drain covers that short ended one); StoreError when the
    store fails."""
    start = drain_start(at, now, name)
    if host_id not in store.host_ids():
        return None
    for ended in store.drain_history():
        if (ended.host_id == host_id and ended.undrained_at
                and ended.drained_at <= start < ended.undrained_at):
            raise InputError(
                f"{name} {start.isoformat()}",
                f"host {host_id!r} was drained from {ended.drained_at.isoformat()} until "
                f"{ended.undrained_at.isoformat()} already; a new drain starts before or "
                "after that")
    current = drain_of(store, host_id) if at is not None else None
    if current is not None and current.drained_at != start:
        raise InputError(
            f"{name} {start.isoformat()}",
            f"host {host_id!r} is drained already, since {current.drained_at.isoformat()}; "
            "to record another start, undrain it, then drain it again with this time")
    return store.drain_host(DrainRecord(host_id, start, by, reason))


def drain_of(store: Store, host_id: str) -> DrainRecord | None:
    """The host's drain record, None when it is not drained."""
    return next((d for d in store.drained_hosts() if d.host_id == host_id), None)


def recheck(store: Store, drain: DrainRecord, params: DetectorParams,
            now: datetime | None = None) -> dict[str, float | int | str]:
    """:func:`coreepi.epi.surveillance.drain_recheck` of ``drain`` at ``now``
    (default: the current time, UTC) over the store's crashes and exposure
    from ``baseline_days`` before the drain. When the host has no crash in
    that baseline but older ones, ``host_last_crash`` (ISO, UTC) and
    ``host_last_crash_days_before`` (days before the drain) say when it last
    crashed. Raises StoreError when the store cannot be read."""
    now = now or datetime.now(UTC)
    since = drain.drained_at - timedelta(days=params.baseline_days)
    crashes = store.crash_frame(since=since, until=now + timedelta(microseconds=1))
    exposure = store.exposure_frame(since=since, until=now)
    check = drain_recheck(crashes, exposure, drain.host_id, pd.Timestamp(drain.drained_at),
                          pd.Timestamp(now), params)
    if not check["host_crashes_before"]:
        # nothing in the baseline: say whether the host crashed at all before it
        last = store.last_crash_at(drain.host_id, since)
        if last is not None:
            check["host_last_crash"] = last.isoformat()
            check["host_last_crash_days_before"] = (drain.drained_at - last).total_seconds() / 86400
    return check
