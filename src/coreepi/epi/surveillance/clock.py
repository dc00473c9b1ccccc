"""Node-time as a function of time: the exposure offset of every detector.

An exposure frame (``host_id, start, end`` as UTC datetimes; the columns of
:meth:`coreepi.store.interfaces.HostStore.exposure_frame`) says which host
was observed when. The detectors need the node-time accumulated up to any
instant — the fleet's, a subset's, or one host's — because a count is only
"high" against the node-time it came from. Both clocks here are exact
(piecewise linear between interval bounds), vectorized, and measured in
node-days; times are float days since the Unix epoch (:func:`days`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["FleetClock", "HostClocks", "days", "to_timestamp"]

FloatArray = npt.NDArray[np.float64]
_NS_PER_DAY = 86_400e9


def days(ts: pd.Series | pd.DatetimeIndex | Sequence[pd.Timestamp] | pd.Timestamp) -> FloatArray:
    """UTC timestamps as float days since 1970-01-01 (the clocks' time axis)."""
    if isinstance(ts, pd.Timestamp):
        ts = pd.DatetimeIndex([ts])
    idx = pd.DatetimeIndex(ts)
    if idx.tz is None:
        idx = idx.tz_localize("UTC")
    return np.asarray(idx.tz_convert("UTC").as_unit("ns").asi8, dtype=np.float64) / _NS_PER_DAY


def to_timestamp(day: float) -> pd.Timestamp:
    """The inverse of :func:`days` for one value (UTC)."""
    return pd.Timestamp(round(day * _NS_PER_DAY), unit="ns", tz="UTC")


@dataclass(frozen=True)
class FleetClock:
    """Cumulative node-days of a set of intervals: ``E(t) = ∫ hosts observed at s ds``.

    ``breaks`` are the sorted interval bounds (days), ``cumulative`` the
    node-days accumulated at each; between bounds E grows linearly with
    the number of hosts observed, so ``E(b) - E(a)`` is the node-time of
    ``[a, b)`` exactly.
    """

    breaks: FloatArray
    cumulative: FloatArray

    @classmethod
    def from_exposure(cls, exposure: pd.DataFrame) -> FleetClock:
        """Build from an exposure frame (``start``, ``end``); empty gives E ≡ 0."""
        if exposure.empty:
            return cls(np.zeros(1), np.zeros(1))
        start, end = days(exposure["start"]), days(exposure["end"])
        t = np.concatenate([start, end])
        step = np.concatenate([np.ones(len(start)), -np.ones(len(end))])
        order = np.argsort(t, kind="stable")
        t, step = t[order], step[order]
        active = np.cumsum(step)
        cumulative = np.concatenate([[0.0], np.cumsum(active[:-1] * np.diff(t))])
        return cls(t, cumulative)

    def at(self, t: npt.ArrayLike) -> FloatArray:
        """Node-days accumulated up to each time ``t`` (days); constant outside the intervals."""
        return np.interp(np.asarray(t, dtype=np.float64), self.breaks, self.cumulative)

    def between(self, a: float, b: float) -> float:
        """Node-days of ``[a, b)``."""
        lo, hi = self.at([a, b])
        return float(hi - lo)


@dataclass(frozen=True)
class HostClocks:
    """Each host's own cumulative node-days (its intervals never overlap).

    Hosts are coded by their position in ``hosts``; an interval's key is
    ``code * SPAN + start`` so one ``searchsorted`` finds, for any (host,
    time), the host's interval at or before that time.
    """

    hosts: pd.Index
    keys: FloatArray
    codes: npt.NDArray[np.int64]
    starts: FloatArray
    durations: FloatArray
    before: FloatArray
    """Node-days of the host's earlier intervals, for each interval."""

    SPAN = 1e6  # days: keys of different hosts never interleave (dates < year 4700)

    @classmethod
    def from_exposure(cls, exposure: pd.DataFrame) -> HostClocks:
        """Build from an exposure frame (``host_id``, ``start``, ``end``)."""
        hosts = pd.Index(pd.unique(exposure["host_id"])) if len(exposure) else pd.Index([])
        code = hosts.get_indexer(exposure["host_id"]).astype(np.float64)
        start, end = days(exposure["start"]), days(exposure["end"])
        keys = code * cls.SPAN + start
        order = np.argsort(keys, kind="stable")
        keys, start, dur, code = keys[order], start[order], (end - start)[order], code[order]
        cum = np.cumsum(dur)
        first_of_host = np.r_[True, code[1:] != code[:-1]] if len(code) else np.zeros(0, bool)
        host_base = np.maximum.accumulate(np.where(first_of_host, cum - dur, 0.0)) if len(code) else cum
        return cls(hosts, keys, code.astype(np.int64), start, dur, cum - dur - host_base)

    def at(self, host_ids: npt.ArrayLike, t: npt.ArrayLike) -> FloatArray:
        """Each ``host_ids[i]``'s node-days up to ``t[i]`` (0 for a host without exposure)."""
        t = np.asarray(t, dtype=np.float64)
        code = self.hosts.get_indexer(pd.Index(np.asarray(host_ids, dtype=object)))
        key = code * self.SPAN + t
        i = np.searchsorted(self.keys, key, side="right") - 1
        ok = (code >= 0) & (i >= 0)
        i = np.clip(i, 0, max(len(self.keys) - 1, 0))
        if not len(self.keys):
            return np.zeros(len(t))
        same = ok & (self.codes[i] == code)
        inside = np.clip(t - self.starts[i], 0.0, self.durations[i])
        return np.where(same, self.before[i] + inside, 0.0)
