"""The report's heavy part written once as Ibis expressions: any engine sums it.

Same output as the DuckDB store's SQL (:mod:`coreepi.store.node_time`,
:class:`~coreepi.store.frames.NodeTimeFrames`), computed by whichever engine
holds the tables (:mod:`.engines`: DuckDB, PostgreSQL, Spark):

- node-seconds of the intervals overlapping ``[lo, hi)``, clipped to it,
  summed per (host, interval attributes): one scan of the exposure;
- from that, node-days per host and per attribute set (hosts.csv's JSON,
  the interval's JSON), and per (host, attribute set) for the host-level
  statistics: small aggregations;
- each crash of the window matched to the interval holding it (equi-join on
  the host plus ``start <= captured_at < end``: intervals of one host never
  overlap, so at most one matches) and to that interval's attribute set.

Only what the engines agree on is left to them: sorting strings (collations
differ: PostgreSQL's locale vs byte order) and decoding JSON happen here, on
the small distinct values; the crash rows come back as Arrow columns whose
repeated strings are dictionary-encoded, then decoded like the store's path.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import ibis
from ibis import _
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from coreepi.store.analytics.engines import EngineTables
from coreepi.store.frames import (
    NodeTimeFrames,
)
from coreepi.store.node_time import MAX_HOST_SETS, SEP, _decoded_crashes, set_columns

__all__ = ["host_sets", "matched_crashes", "node_time_frames", "summed_exposure", "utc_literal", "window"]

_TS = "timestamp('UTC')"


def utc_literal(value: datetime) -> ibis.Scalar:
    """``value`` as an Ibis timestamp literal in UTC (every engine compares it the same)."""
    return ibis.literal(value.astimezone(UTC), type=_TS)


def window(et: EngineTables, since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    """The analytics' default window: the exposure's span, widened to every
    crash (one second past the last); ``since``/``until`` override each end."""
    if since is not None and until is not None:
        return since.astimezone(UTC), until.astimezone(UTC)
    x, c = et.tables["exposure"], et.tables["crashes"]
    e = et.backend.execute(x.aggregate(lo=x.start_ts.min(), hi=x.end_ts.max()))
    k = et.backend.execute(c.aggregate(lo=c.captured_at.min(), hi=c.captured_at.max()))
    los = [t for t in (e["lo"][0], k["lo"][0]) if not pd.isna(t)]
    his = [t for t in (e["hi"][0], k["hi"][0] + timedelta(seconds=1)
                       if not pd.isna(k["hi"][0]) else None) if t is not None and not pd.isna(t)]
    lo = since if since is not None else (min(map(_utc, los)) if los else None)
    hi = until if until is not None else (max(map(_utc, his)) if his else None)
    if lo is None or hi is None:
        lo = hi = datetime.now(UTC)
    return lo.astimezone(UTC), hi.astimezone(UTC)


def _utc(t: Any) -> datetime:
    ts = pd.Timestamp(t)
    return (ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")).to_pydatetime()


def _overlapping(et: EngineTables, lo: datetime, hi: datetime) -> ibis.Table:
    x = et.tables["exposure"]
    return x.filter(x.end_ts > utc_literal(lo), x.start_ts < utc_literal(hi))


def _micros(x: ibis.Table, lo: datetime, hi: datetime) -> ibis.Value:
    """Microseconds of each interval of ``x`` inside ``[lo, hi)``: exact integers on
    every engine (epoch seconds are truncated to whole seconds by some)."""
    end = ibis.least(x.end_ts, utc_literal(hi))
    return end.delta(ibis.greatest(x.start_ts, utc_literal(lo)), unit="microsecond")


def _per_host_set(et: EngineTables, lo: datetime, hi: datetime) -> ibis.Table:
    """``host_id, ia, us``: microseconds of the intervals overlapping ``[lo,
    hi)``, clipped to it, per (host, interval attributes JSON)."""
    x = _overlapping(et, lo, hi)
    return x.group_by(host_id=x.host_id, ia=x.attributes).aggregate(us=_micros(x, lo, hi).sum())


def summed_exposure(et: EngineTables, lo: datetime, hi: datetime) -> tuple[pd.DataFrame, pd.Series]:
    """Node-days per attribute set and per host over ``[lo, hi)``.

    Two plain aggregates of the overlapping intervals (by host attributes ×
    interval attributes, and by host): not through the per-(host, interval
    attributes) aggregate, which holds millions of groups on a large fleet (see
    the store's SQL path, :mod:`coreepi.store.node_time`). Returns (set rows
    ``ha, ia, node_days`` — hosts.csv JSON ('' for a host without a row),
    interval JSON — sorted by (ha, ia) in code-point order, node-days by
    ``host_id`` sorted by host). Units: days of 86400 s."""
    x = _overlapping(et, lo, hi)
    h = et.tables["hosts"].select(hh=_.host_id, ha=_.attributes)
    joined = x.left_join(h, x.host_id == h.hh)
    sets = joined.group_by(ha=joined.ha.fill_null(""), ia=joined.attributes).aggregate(
        us=_micros(joined, lo, hi).sum())
    by_host = x.group_by("host_id").aggregate(us=_micros(x, lo, hi).sum())
    set_rows = et.backend.execute(sets)
    set_rows = set_rows.sort_values(["ha", "ia"], kind="stable").reset_index(drop=True)
    set_rows["node_days"] = set_rows.pop("us").to_numpy(np.float64) / 1e6 / 86400.0
    host_rows = et.backend.execute(by_host).sort_values("host_id", kind="stable")
    series = pd.Series(host_rows["us"].to_numpy(np.float64) / 1e6 / 86400.0,
                       index=pd.Index(host_rows["host_id"].astype(object), name="host_id"),
                       name="node_days")
    return set_rows, series


def host_sets(et: EngineTables, set_rows: pd.DataFrame, lo: datetime,
              hi: datetime) -> pd.DataFrame | None:
    """Each host's node-days per row of ``set_rows`` over ``[lo, hi)``:
    ``host_id, set, node_days`` sorted by (host, set), what
    ``NodeTime.host_sets`` holds for the host-level statistics; None past
    :data:`~coreepi.store.node_time.MAX_HOST_SETS` (host, interval attributes)
    pairs, as the store's SQL path does. Units: days of 86400 s."""
    x = _overlapping(et, lo, hi)
    # the pairs are at most the intervals: counted only when those exceed the limit
    if int(et.backend.execute(x.count())) > MAX_HOST_SETS and int(et.backend.execute(
            x.select("host_id", "attributes").distinct().count())) > MAX_HOST_SETS:
        return None
    per = _per_host_set(et, lo, hi)
    h = et.tables["hosts"].select(hh=_.host_id, ha=_.attributes)
    keys = _set_keys(set_rows)
    m = per.left_join(h, per.host_id == h.hh)
    m = m.inner_join(keys, [m.ha.fill_null("") == keys.sha, m.ia == keys.sia])
    rows = et.backend.execute(m.select("host_id", set=m.k, us=m.us))
    rows = rows.sort_values(["host_id", "set"], kind="stable").reset_index(drop=True)
    return pd.DataFrame({"host_id": rows["host_id"].astype(object),
                         "set": rows["set"].to_numpy(np.int64),
                         "node_days": rows["us"].to_numpy(np.float64) / 1e6 / 86400.0})


def _set_keys(set_rows: pd.DataFrame) -> ibis.Table:
    """``set_rows``' attribute JSON texts and row numbers as an in-memory table
    ``sha, sia, k`` on the engine, for joining back to set rows."""
    return ibis.memtable(pd.DataFrame({"sha": set_rows["ha"].astype(str),
                                       "sia": set_rows["ia"].astype(str),
                                       "k": np.arange(len(set_rows), dtype=np.int64)}))


def matched_crashes(et: EngineTables, set_rows: pd.DataFrame, lo: datetime, hi: datetime) -> ibis.Table:
    """The crashes of ``[lo, hi)`` with ``exposure_set``: the row of
    ``set_rows`` of the interval holding each crash, -1 when none does."""
    c = et.tables["crashes"]
    c = c.filter(c.captured_at >= utc_literal(lo), c.captured_at < utc_literal(hi))
    x = _overlapping(et, lo, hi).select(xh=_.host_id, xs=_.start_ts, xe=_.end_ts, ia=_.attributes)
    m = c.left_join(x, [c.host_id == x.xh, c.captured_at >= x.xs, c.captured_at < x.xe])
    h = et.tables["hosts"].select(hh=_.host_id, ha=_.attributes)
    m = m.left_join(h, m.host_id == h.hh)
    keys = _set_keys(set_rows)
    m = m.left_join(keys, [m.ha.fill_null("") == keys.sha, m.ia == keys.sia])
    return m.select(
        "crash_id", "host_id", "captured_at", "signature", "exe", "app_version",
        attr=m.attributes,
        phen=m.phenotypes.join(SEP), hw=m.hardware_phenotypes.join(SEP),
        exposure_set=ibis.coalesce(m.k, -1),
    )


def _codes(column: pa.ChunkedArray) -> tuple[pd.Series, list[Any]]:
    """Dictionary codes (float, NaN for null) and the distinct values of one Arrow column."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    codes = encoded.indices.to_pandas()
    return codes, encoded.dictionary.to_pylist()


def node_time_frames(et: EngineTables, since: datetime | None, until: datetime | None) -> NodeTimeFrames:
    """:class:`~coreepi.store.frames.NodeTimeFrames` of ``[since, until)``
    (default: :func:`window`) computed by ``et``'s engine."""
    lo, hi = window(et, since, until)
    set_rows, by_host = summed_exposure(et, lo, hi)
    table = et.backend.to_pyarrow(matched_crashes(et, set_rows, lo, hi))
    order = pc.sort_indices(table, [("captured_at", "ascending"), ("crash_id", "ascending")])
    table = table.take(order)
    # strings as object arrays with None for null (as the store's path gives),
    # not pandas' NaN-holding string dtype
    rows = pd.DataFrame({
        "crash_id": table["crash_id"].to_numpy(zero_copy_only=False),
        "captured_at": table["captured_at"].cast(pa.timestamp("us", "UTC")).to_pandas(),
        "exe": table["exe"].to_numpy(zero_copy_only=False),
        "app_version": table["app_version"].to_numpy(zero_copy_only=False),
        "exposure_set": table["exposure_set"].to_numpy(),
    })
    values: dict[str, list[Any]] = {}
    for name, column in (("host", "host_id"), ("sig", "signature"), ("phen", "phen"),
                         ("hw", "hw"), ("attr", "attr")):
        rows[f"{name}_k"], values[name] = _codes(table[column])
    return NodeTimeFrames(lo, hi, _decoded_crashes(rows, values), set_columns(set_rows), by_host,
                          host_sets(et, set_rows, lo, hi))
