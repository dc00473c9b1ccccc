"""The summed path (:class:`~coreepi.store.frames.NodeTimeFrames`) in PostgreSQL.

The same three results as DuckDB's :mod:`coreepi.store.node_time`, in the
same shapes, so the analytics cannot tell the stores apart:

- node-days per attribute set and per host: one scan of the exposure
  overlapping the window, summed per (host, interval attributes) first, then
  ``GROUPING SETS`` (PostgreSQL has them too);
- node-days per (host, set) for the host-level tests, up to
  :data:`~coreepi.store.node_time.MAX_HOST_SETS` pairs;
- each crash of the window with the attribute set in effect when it
  happened. DuckDB finds the interval with an ``ASOF JOIN``; PostgreSQL has
  none, so a ``LATERAL`` subquery takes the host's latest interval starting at
  or before the crash (one backward step of the ``(host_id, start_ts)``
  primary-key index per crash) and keeps it when it has not ended yet
  (intervals of one host never overlap, so that is the one holding it).

Repeated strings become dictionary codes with :func:`pandas.factorize` here
(DuckDB does it in SQL with registered frames, which PostgreSQL cannot join),
then both stores decode them with the one
:func:`~coreepi.store.node_time._decoded_crashes`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from coreepi.store.frames import NodeTimeFrames
from coreepi.store.node_time import (
    MAX_HOST_SETS,
    SEP,
    _decoded_crashes,
    _window,
    set_columns,
)

if TYPE_CHECKING:
    from coreepi.store.postgres_store.gateway import PostgresGateway

__all__ = ["postgres_node_time_frames"]

# node-seconds of each (host, interval attributes) inside [lo, hi); params: hi, lo, lo, hi
_PER_HOST_IA = (
    "WITH a AS (SELECT host_id, attributes AS ia, "
    "sum(extract(epoch FROM least(end_ts, ?) - greatest(start_ts, ?)))::float8 AS s "
    "FROM exposure WHERE end_ts > ? AND start_ts < ? GROUP BY host_id, attributes) "
)


def _summed_exposure(
    gw: PostgresGateway, lo: datetime, hi: datetime
) -> tuple[pd.DataFrame, pd.Series]:
    """(set rows ``ha, ia, node_days``: hosts.csv JSON ('' for a host without
    a row), the interval's JSON, days; node-days by ``host_id``)."""
    summed = gw._frame(
        _PER_HOST_IA + "SELECT a.host_id, coalesce(h.attributes, '') AS ha, a.ia, "
        "sum(a.s) / 86400.0 AS node_days, grouping(a.host_id) AS per_set "
        "FROM a LEFT JOIN hosts h ON h.host_id = a.host_id "
        "GROUP BY GROUPING SETS ((a.host_id), (coalesce(h.attributes, ''), a.ia))",
        [hi, lo, lo, hi])
    if summed.empty:
        summed = pd.DataFrame({c: pd.Series(dtype=object) for c in
                               ("host_id", "ha", "ia", "node_days", "per_set")})
    per_host = summed["per_set"].to_numpy() == 0
    by_host = pd.Series(
        summed.loc[per_host, "node_days"].to_numpy(np.float64),
        index=pd.Index(summed.loc[per_host, "host_id"].astype(object), name="host_id"),
        name="node_days",
    )
    set_rows = summed.loc[~per_host, ["ha", "ia", "node_days"]].reset_index(drop=True)
    set_rows["node_days"] = set_rows["node_days"].astype(np.float64)
    # code-point order, as the DuckDB store and the Ibis path give them (the
    # attribute columns follow the first set holding each key)
    set_rows = set_rows.sort_values(["ha", "ia"], kind="stable").reset_index(drop=True)
    return set_rows, by_host.sort_index(kind="stable")


def _set_index(set_rows: pd.DataFrame) -> dict[tuple[Any, Any], int]:
    """{(ha, ia): row of the sets}."""
    return {(ha, ia): k for k, (ha, ia) in enumerate(zip(set_rows["ha"], set_rows["ia"],
                                                         strict=True))}


def _host_sets(
    gw: PostgresGateway, lo: datetime, hi: datetime, set_rows: pd.DataFrame
) -> pd.DataFrame | None:
    """``host_id, set, node_days`` per (host, row of the sets) in ``[lo, hi)``;
    None beyond :data:`MAX_HOST_SETS` pairs (counted before any is fetched)."""
    pairs = gw._query("SELECT count(*) FROM (SELECT DISTINCT host_id, attributes FROM exposure "
                      "WHERE end_ts > ? AND start_ts < ?) AS p", [lo, hi])
    if int(pairs[0][0]) > MAX_HOST_SETS:
        return None
    rows = gw._frame(
        _PER_HOST_IA + "SELECT a.host_id, coalesce(h.attributes, '') AS ha, a.ia, "
        "a.s / 86400.0 AS node_days FROM a LEFT JOIN hosts h ON h.host_id = a.host_id",
        [hi, lo, lo, hi])
    index = _set_index(set_rows)
    sets = [index[(ha, ia)] for ha, ia in zip(rows.get("ha", ()), rows.get("ia", ()),
                                               strict=True)]
    return pd.DataFrame({
        "host_id": rows["host_id"].astype(object) if len(rows) else pd.Series(dtype=object),
        "set": np.asarray(sets, dtype=np.int64),
        "node_days": rows["node_days"].to_numpy(np.float64) if len(rows) else np.empty(0),
    })


_CRASHES = (
    "SELECT c.crash_id, c.host_id, c.captured_at, c.signature, "
    "array_to_string(c.phenotypes, ?) AS phen, array_to_string(c.hardware_phenotypes, ?) AS hw, "
    "c.attributes, c.exe, c.app_version, coalesce(h.attributes, '') AS ha, e.attributes AS ia "
    "FROM crashes c "
    "LEFT JOIN LATERAL (SELECT x.attributes, x.end_ts FROM exposure x "
    "WHERE x.host_id = c.host_id AND x.start_ts <= c.captured_at "
    "ORDER BY x.start_ts DESC LIMIT 1) AS e ON e.end_ts > c.captured_at "
    "LEFT JOIN hosts h ON h.host_id = c.host_id "
    "WHERE c.captured_at >= ? AND c.captured_at < ? ORDER BY c.captured_at, c.crash_id"
)
_CRASH_COLUMNS = ("crash_id", "host_id", "captured_at", "signature", "phen", "hw", "attributes",
                  "exe", "app_version", "ha", "ia")


def _crash_codes(
    gw: PostgresGateway, set_rows: pd.DataFrame, lo: datetime, hi: datetime
) -> tuple[pd.DataFrame, dict[str, list[Any]]]:
    """The crashes of ``[lo, hi)`` in the coded shape of DuckDB's
    ``_crash_codes`` (``host_k, sig_k, phen_k, hw_k, attr_k``: codes, -1 for
    None; ``exposure_set``: row of the sets, -1 when no interval holds it),
    with the dictionaries ({name: values, index = code})."""
    got = gw._frame(_CRASHES, [SEP, SEP, lo, hi])
    if got.empty:
        got = pd.DataFrame({c: pd.Series(dtype=object) for c in _CRASH_COLUMNS})
    values: dict[str, list[Any]] = {}
    rows = pd.DataFrame({"crash_id": got["crash_id"], "captured_at": got["captured_at"]})
    for name, column in (("host", "host_id"), ("sig", "signature"), ("phen", "phen"),
                         ("hw", "hw"), ("attr", "attributes")):
        codes, uniques = pd.factorize(got[column].astype(object), use_na_sentinel=True)
        rows[f"{name}_k"] = codes.astype(np.int64)
        values[name] = list(uniques)
    rows["exe"] = got["exe"]
    rows["app_version"] = got["app_version"]
    index = _set_index(set_rows)
    rows["exposure_set"] = np.asarray(
        [index.get((ha, ia), -1) if ia is not None else -1
         for ha, ia in zip(got["ha"], got["ia"], strict=True)], dtype=np.int64)
    return rows, values


def postgres_node_time_frames(
    gw: PostgresGateway, since: datetime | None, until: datetime | None
) -> NodeTimeFrames:
    """:class:`~coreepi.store.frames.NodeTimeFrames` of ``[since, until)`` (default:
    the exposure's span widened to every crash) from the database of ``gw``."""
    with gw._connection() as con:
        lo, hi = _window(con, since, until)
    set_rows, by_host = _summed_exposure(gw, lo, hi)
    host_sets = _host_sets(gw, lo, hi, set_rows)
    rows, values = _crash_codes(gw, set_rows, lo, hi)
    return NodeTimeFrames(lo, hi, _decoded_crashes(rows, values), set_columns(set_rows), by_host,
                          host_sets)
