"""The analytics' input summed in SQL: what a 10M-interval fleet needs in seconds.

:meth:`Store.crash_frame` and :meth:`Store.exposure_frame` hand over every
row; for 1M crashes and 10M exposure intervals that is minutes of pandas and
gigabytes of Python objects. The analytics need far less of the exposure:
node-days per *attribute set* (distinct hosts.csv attributes × interval
attributes), node-days per host, and, for each crash, which attribute set was
in effect when it happened. DuckDB computes all three in one scan of the
exposure (microseconds summed as integers) plus one hash join of the crashes
to their intervals, and the crashes come back with their repeated
strings (host, signature, phenotype lists, attribute JSON) as integer codes
into small dictionaries, so pandas never decodes a million copies of the same
text. The result (:class:`~coreepi.store.frames.NodeTimeFrames`) is exactly
the input of ``coreepi.epi.NodeTime`` (see ``coreepi/epi/tables.py``).

The SQL is DuckDB's (``GROUPING SETS``, registered frames); the PostgreSQL store's
(:mod:`coreepi.store.postgres_store.node_time`) finds the interval with a
``LATERAL`` subquery and shares the window, the sets' columns and the decoding.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from coreepi.store.frames import (
    CRASH_COLUMNS,
    DROPPED_KEYS,
    EXPOSURE_COLUMNS,
    NodeTimeFrames,
    attribute_columns,
    json_object,
    merged_attributes,
)

__all__ = ["duckdb_node_time_frames"]

SEP = "\x1f"  # joins a phenotype list into one string (unit separator: never in a name)


def _window(con: Any, since: datetime | None, until: datetime | None) -> tuple[datetime, datetime]:
    """The analytics' default window: the exposure's span, widened to every crash.
    ``con``: a DuckDB cursor or a psycopg connection (the query is portable SQL)."""
    if since is not None and until is not None:
        return since, until
    row = con.execute(
        "SELECT (SELECT min(start_ts) FROM exposure), (SELECT max(end_ts) FROM exposure), "
        "(SELECT min(captured_at) FROM crashes), (SELECT max(captured_at) FROM crashes)"
    ).fetchone()
    e_lo, e_hi, c_lo, c_hi = row if row else (None, None, None, None)
    if c_hi is not None:
        c_hi = c_hi + timedelta(seconds=1)
    los = [t for t in (e_lo, c_lo) if t is not None]
    his = [t for t in (e_hi, c_hi) if t is not None]
    lo = since if since is not None else (min(los) if los else None)
    hi = until if until is not None else (max(his) if his else None)
    if lo is None or hi is None:
        lo = hi = datetime.now(UTC)
    return lo.astimezone(UTC), hi.astimezone(UTC)


def _dictionary(con: duckdb.DuckDBPyConnection, name: str, sql: str, params: list[Any]) -> list[Any]:
    """Distinct values of one column (``sql`` selects them as ``v``), registered as
    table ``name`` (v, k) for joins; returns the values, index = code."""
    values = [r[0] for r in con.execute(sql, params).fetchall()]
    frame = pd.DataFrame({"v": pd.Series(values, dtype=object), "k": np.arange(len(values))})
    con.register(name, frame)
    return values


def _codes(column: pd.Series) -> np.ndarray:
    """A column of dictionary codes as int64; a missing code (NaN after a
    LEFT JOIN) becomes -1."""
    codes = column.to_numpy()
    if codes.dtype.kind == "f":
        return np.where(np.isnan(codes), -1, codes).astype(np.int64)
    return codes.astype(np.int64)


def _take(values: list[Any], column: pd.Series) -> np.ndarray:
    """``values[code]`` for every code of ``column``; a missing code (NaN, -1) gives None."""
    table = np.empty(len(values) + 1, dtype=object)
    table[: len(values)] = values
    table[len(values)] = None
    return table[_codes(column)]


def _shared(column: pd.Series) -> np.ndarray:
    """``column`` as an object array whose equal texts are one Python string (None
    where missing): a fleet runs a few executables a million times."""
    codes, uniques = pd.factorize(column)
    table = np.empty(len(uniques) + 1, dtype=object)
    table[: len(uniques)] = np.asarray(uniques, dtype=object)
    table[len(uniques)] = None
    return table[codes]


def _take_str(values: list[Any], column: pd.Series) -> pd.Series:
    """``values[code]`` for every code of ``column`` as pandas' ``str`` column (the
    dtype a frame infers for text); a missing code gives NA. Taken in Arrow from
    the small dictionary: a million Python strings converted to Arrow cost ~0.5 s."""
    return pd.Series(pd.array(values, dtype="str").take(_codes(column), allow_fill=True))


# microseconds of each interval inside [lo, hi): exact integers (DuckDB's
# epoch() of an interval is a double and costs twice the CPU); params: hi, lo
_CLIPPED_US = "epoch_us(least(end_ts, ?)) - epoch_us(greatest(start_ts, ?))"
_PER_HOST_IA = (
    f"WITH a AS (SELECT host_id, attributes AS ia, sum({_CLIPPED_US})::BIGINT AS us "
    "FROM exposure WHERE end_ts > ? AND start_ts < ? GROUP BY host_id, attributes) "
)


def _days(us: pd.Series) -> np.ndarray:
    """Summed microseconds as node-days (days of 86400 s), as the Ibis path computes them."""
    return us.to_numpy(np.float64) / 1e6 / 86400.0


def _summed_exposure(
    con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, int]:
    """Node-days per (host attributes, interval attributes) and per host of the
    intervals overlapping ``[lo, hi)``, clipped to it, and how many (host, interval
    attributes) pairs they hold.

    Two plain GROUP BYs (a hundred thousand hosts; thousands of sets): their hash
    tables are small. Grouping by (host, interval attributes) first, as this did
    before, held millions of groups (3.7M on the 10M-interval benchmark fleet:
    ~500 MB more peak memory and 2.6× the CPU, measured in ``docs/scale.md``). The
    pairs decide whether :func:`_host_sets` is asked at all: they are at most the
    intervals, so they are counted (:func:`_pair_count`) only when the intervals
    exceed :data:`MAX_HOST_SETS`. Returns (set rows: ``ha,
    ia, node_days`` with the attribute JSON texts, sets: one column per merged
    attribute + ``node_days``, node-days by host, pairs — or the interval count
    when that is the smaller bound)."""
    hosts = con.execute(
        f"SELECT host_id, sum({_CLIPPED_US})::BIGINT AS us, count(*) AS n FROM exposure "
        "WHERE end_ts > ? AND start_ts < ? GROUP BY host_id",
        [hi, lo, lo, hi],
    ).df()
    summed = con.execute(
        f"SELECT coalesce(h.attributes, '') AS ha, e.attributes AS ia, "
        f"sum({_CLIPPED_US})::BIGINT AS us FROM exposure e "
        "LEFT JOIN hosts h ON h.host_id = e.host_id "
        "WHERE e.end_ts > ? AND e.start_ts < ? GROUP BY ALL",
        [hi, lo, lo, hi],
    ).df()
    pairs = int(hosts["n"].sum())
    if pairs > MAX_HOST_SETS:
        pairs = _pair_count(con, lo, hi)
    by_host = pd.Series(
        _days(hosts["us"]),
        index=pd.Index(hosts["host_id"].astype(object), name="host_id"),
        name="node_days",
    ).sort_index(kind="stable")
    set_rows = pd.DataFrame({"ha": summed["ha"].to_numpy(object),
                             "ia": summed["ia"].to_numpy(object),
                             "node_days": _days(summed["us"])})
    # in code-point order, as the Ibis path sorts them: the sums are exact
    # integers, so a fixed order makes the report the same bytes on every run
    # (the statistics sum over the sets in this order)
    set_rows = set_rows.sort_values(["ha", "ia"], kind="stable").reset_index(drop=True)
    return set_rows, set_columns(set_rows), by_host, pairs


def _pair_count(con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime) -> int:
    """The distinct (host, interval attributes) pairs of the intervals overlapping
    ``[lo, hi)`` — or an estimate, when the estimate is far past
    :data:`MAX_HOST_SETS`: HyperLogLog (``approx_count_distinct``, a few percent of
    error) costs a tenth of the exact DISTINCT (0.08 vs 0.9 CPU-s on 10M intervals),
    and the count only decides whether the host sets are fetched. Near the limit the
    exact count decides; a 64-bit hash collision (odds ~4e-7 at 3.7M pairs) would
    undercount it by one."""
    where = "FROM exposure WHERE end_ts > ? AND start_ts < ?"
    approx = int(con.execute(f"SELECT approx_count_distinct(hash(host_id, attributes)) {where}",
                             [lo, hi]).fetchall()[0][0])
    if approx > 1.25 * MAX_HOST_SETS:
        return approx
    return int(con.execute(f"SELECT count(*) FROM (SELECT DISTINCT hash(host_id, attributes) "
                           f"{where})", [lo, hi]).fetchall()[0][0])


def set_columns(set_rows: pd.DataFrame) -> pd.DataFrame:
    """The exposure sets as a frame: one column per merged attribute (hosts.csv's
    JSON ``ha``, the interval's overriding ``ia``; at most the frames' column
    limit, the keys left out counted in ``attrs[DROPPED_KEYS]``) and
    ``node_days``, one row per row of ``set_rows``."""
    dicts = merged_attributes(zip(set_rows["ha"], set_rows["ia"], strict=True))
    sets = pd.DataFrame(index=range(len(set_rows)))
    columns, dropped = attribute_columns(
        np.arange(len(set_rows)), dicts, (*EXPOSURE_COLUMNS, "node_days"))
    for name, col in columns.items():
        sets[name] = col.values
    sets.attrs[DROPPED_KEYS] = dropped
    sets["node_days"] = set_rows["node_days"].to_numpy(np.float64)
    return sets


MAX_HOST_SETS = 2_000_000
"""Per-host sets are returned up to this many (host, interval attributes) pairs; beyond,
the engine falls back to fleet-wide host statistics (it says so in a note)."""


def _host_sets(
    con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime, set_rows: pd.DataFrame,
    pairs: int,
) -> pd.DataFrame | None:
    """Node-days per (host, row of the sets) in ``[lo, hi)``: ``host_id``, ``set``,
    ``node_days``; None, without a query, when the ``pairs`` (host, interval
    attributes) of :func:`_summed_exposure` exceed :data:`MAX_HOST_SETS` (the
    engine's stratified SIR and host-level tests need them: ``NodeTime.host_sets``)."""
    if pairs > MAX_HOST_SETS:
        return None
    con.register("_hs_sets", pd.DataFrame({"ha": set_rows["ha"], "ia": set_rows["ia"],
                                           "k": np.arange(len(set_rows), dtype=np.int64)}))
    try:
        rows = con.execute(
            _PER_HOST_IA + "SELECT a.host_id, st.k AS set, a.us FROM a "
            "LEFT JOIN hosts h ON h.host_id = a.host_id "
            "JOIN _hs_sets st ON st.ha = coalesce(h.attributes, '') "
            "AND st.ia IS NOT DISTINCT FROM a.ia ORDER BY a.host_id, st.k",
            [hi, lo, lo, hi],
        ).df()
    finally:
        con.unregister("_hs_sets")
    return pd.DataFrame({"host_id": rows["host_id"].astype(object),
                         "set": rows["set"].to_numpy(np.int64), "node_days": _days(rows["us"])})


_DICTIONARIES = ("_d_host", "_d_sig", "_d_phen", "_d_hw", "_d_attr", "_sets")


def _crash_codes(
    con: duckdb.DuckDBPyConnection, set_rows: pd.DataFrame, win: list[datetime]
) -> tuple[pd.DataFrame, dict[str, list[Any]]]:
    """The crashes of ``win`` as integer codes into dictionaries of their
    repeated strings, each with the attribute set in effect.

    The interval holding a crash is found by a hash join on the host with the
    time range as its residual condition (intervals of one host never
    overlap, so at most one matches): the hash table is built on the crashes
    and probed once by each interval, a quarter of the CPU of an ASOF join,
    which sorts all 10M intervals (measured in ``docs/scale.md``). Returns
    (the coded rows, {dictionary: values, index = code})."""
    con.register("_sets", pd.DataFrame({
        "ha": set_rows["ha"].astype(object), "ia": set_rows["ia"].astype(object),
        "k": np.arange(len(set_rows)),
    }))
    where = "captured_at >= ? AND captured_at < ?"
    try:
        values = {
            "host": _dictionary(con, "_d_host", f"SELECT DISTINCT host_id AS v FROM crashes "
                                f"WHERE {where} AND host_id IS NOT NULL", win),
            "sig": _dictionary(con, "_d_sig", f"SELECT DISTINCT signature AS v FROM crashes "
                               f"WHERE {where} AND signature IS NOT NULL", win),
            "phen": _dictionary(con, "_d_phen", "SELECT DISTINCT array_to_string(phenotypes, ?) "
                                f"AS v FROM crashes WHERE {where}", [SEP, *win]),
            "hw": _dictionary(con, "_d_hw", "SELECT DISTINCT array_to_string("
                              f"hardware_phenotypes, ?) AS v FROM crashes WHERE {where}",
                              [SEP, *win]),
            "attr": _dictionary(con, "_d_attr", "SELECT DISTINCT attributes AS v FROM crashes "
                                f"WHERE {where}", win),
        }
        # fetched as Arrow: ids and texts stay in Arrow buffers, not one Python
        # string per crash (the ids and executables alone were ~125 MB so)
        rows = con.sql(
            "SELECT c._r, c.crash_id, c.captured_at, dh.k AS host_k, ds.k AS sig_k, "
            "dp.k AS phen_k, dw.k AS hw_k, da.k AS attr_k, c.exe, c.app_version "
            f"FROM (SELECT rowid AS _r, * FROM crashes WHERE {where}) c "
            "LEFT JOIN _d_host dh ON dh.v = c.host_id "
            "LEFT JOIN _d_sig ds ON ds.v = c.signature "
            "LEFT JOIN _d_phen dp ON dp.v = array_to_string(c.phenotypes, ?) "
            "LEFT JOIN _d_hw dw ON dw.v = array_to_string(c.hardware_phenotypes, ?) "
            "LEFT JOIN _d_attr da ON da.v = c.attributes",
            params=[*win, SEP, SEP],
        ).to_arrow_table().to_pandas()
        # the interval match apart, carrying only the row id: its hash table holds
        # every crash of the window, and with the codes and texts beside it the
        # query's peak was ~100 MB higher (docs/scale.md)
        matched = con.sql(
            "SELECT c._r, coalesce(st.k, -1) AS exposure_set "
            f"FROM (SELECT rowid AS _r, host_id, captured_at FROM crashes WHERE {where}) c "
            "LEFT JOIN exposure x ON x.host_id = c.host_id "
            "AND c.captured_at >= x.start_ts AND c.captured_at < x.end_ts "
            "LEFT JOIN hosts h ON h.host_id = c.host_id "
            "LEFT JOIN _sets st ON st.ha = coalesce(h.attributes, '') AND st.ia = x.attributes",
            params=win,
        ).to_arrow_table().to_pandas()
    finally:
        for name in _DICTIONARIES:
            try:
                con.unregister(name)
            except duckdb.Error:
                pass  # never registered: a dictionary query failed first
    if len(matched) == len(rows):  # one interval at most per crash, as the store keeps them
        row_ids = matched["_r"].to_numpy(np.int64)
        set_of = np.full(int(row_ids.max()) + 1 if len(row_ids) else 0, -1, dtype=np.int64)
        set_of[row_ids] = matched["exposure_set"].to_numpy(np.int64)
        rows["exposure_set"] = set_of[rows["_r"].to_numpy(np.int64)]
    else:  # overlapping intervals of one host: a row per match, as one join gave
        rows = rows.merge(matched, on="_r", how="left")
    rows = rows.drop(columns="_r")
    return rows.take(_time_order(rows)).reset_index(drop=True), values


def _time_order(rows: pd.DataFrame) -> np.ndarray:
    """Row positions in (captured_at, crash_id) order, the order of every store's
    crash frames. Sorted here, not by an ORDER BY: DuckDB's sort of the million
    coded rows with their ids held ~190 MB more at the query's peak than the
    join alone (docs/scale.md); a stable sort of the times plus the ids of
    equal times (few) costs tens of milliseconds. Ids compare by code point, as
    DuckDB's binary collation does."""
    at = rows["captured_at"].to_numpy("datetime64[us]").view(np.int64)
    order = np.argsort(at, kind="stable")
    sorted_at = at[order]
    tie = np.zeros(len(at), dtype=bool)
    same = sorted_at[1:] == sorted_at[:-1]
    tie[1:] |= same
    tie[:-1] |= same
    if not tie.any():
        return order
    # rank the ids of the rows that share a time with another, then one lexsort
    tied = order[tie]
    ids = rows["crash_id"].to_numpy(object)[tied].astype(str)
    rank = np.zeros(len(at), dtype=np.int64)
    rank[tied[np.argsort(ids, kind="stable")]] = np.arange(1, len(tied) + 1)
    return np.lexsort((rank, at))


def _decoded_crashes(rows: pd.DataFrame, values: dict[str, list[Any]]) -> pd.DataFrame:
    """The crashes of :func:`_crash_codes` with their codes turned back into values."""
    crashes = pd.DataFrame({
        "crash_id": rows["crash_id"].astype("str"),
        "host_id": _take_str(values["host"], rows["host_k"]),
        "captured_at": pd.to_datetime(rows["captured_at"], utc=True),
        "signature": _take_str(values["sig"], rows["sig_k"]),
        "phenotypes": _take([v.split(SEP) if v else [] for v in values["phen"]],
                            rows["phen_k"]),
        "hardware_phenotypes": _take([v.split(SEP) if v else [] for v in values["hw"]],
                                     rows["hw_k"]),
        "exe": _shared(rows["exe"]),
        "app_version": _shared(rows["app_version"]),
    })
    # shared list objects: a missing code (no phenotypes at all) is the empty list
    for c in ("phenotypes", "hardware_phenotypes"):
        missing = crashes[c].isna().to_numpy()
        if missing.any():
            crashes.loc[missing, c] = pd.Series([[] for _ in range(int(missing.sum()))],
                                                index=crashes.index[missing], dtype=object)
    # exe and app_version are columns of their own (filled from the sidecar)
    attr_dicts = [
        {k: v for k, v in json_object(a).items() if k not in ("exe", "app_version")}
        for a in values["attr"]
    ]
    columns, dropped = attribute_columns(_codes(rows["attr_k"]), attr_dicts, CRASH_COLUMNS)
    for name, col in columns.items():
        crashes[name] = col.values
    crashes.attrs[DROPPED_KEYS] = dropped
    crashes["exposure_set"] = rows["exposure_set"].to_numpy(np.int64)
    return crashes


def duckdb_node_time_frames(
    con: duckdb.DuckDBPyConnection, since: datetime | None, until: datetime | None
) -> NodeTimeFrames:
    """Build :class:`~coreepi.store.frames.NodeTimeFrames` on ``con`` (a cursor
    of the store in a UTC session; it registers temporary views on it)."""
    lo, hi = _window(con, since, until)
    set_rows, sets, by_host, pairs = _summed_exposure(con, lo, hi)
    host_sets = _host_sets(con, lo, hi, set_rows, pairs)
    rows, values = _crash_codes(con, set_rows, [lo, hi])
    return NodeTimeFrames(lo, hi, _decoded_crashes(rows, values), sets, by_host, host_sets)
