"""Turn rows read from a store into the DataFrames :mod:`coreepi.epi` reads.

Backend-independent: every store implementation reads its rows (attributes
as JSON text) and hands them here. JSON is decoded once per *distinct* text
(fleets repeat a few attribute sets millions of times), so expanding 10M
exposure intervals costs a factorize, not 10M ``json.loads``.

:class:`NodeTimeFrames` is the shape of the summed path
(:meth:`~coreepi.store.interfaces.HostStore.node_time_frames`); DuckDB's
query for it is in :mod:`coreepi.store.node_time`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from coreepi.model.limits import MAX_ATTRIBUTE_COLUMNS

__all__ = [
    "CRASH_COLUMNS",
    "DROPPED_KEYS",
    "EXPOSURE_COLUMNS",
    "TELEMETRY_COLUMNS",
    "NodeTimeFrames",
    "attribute_columns",
    "crash_frame_from",
    "exposure_frame_from",
    "json_object",
    "merged_attributes",
    "telemetry_frame_from",
]

CRASH_COLUMNS = (
    "crash_id", "host_id", "captured_at", "source", "signature", "phenotypes",
    "hardware_phenotypes", "signal", "si_code_name", "exe", "app_version", "core_status",
)  # fmt: skip
DROPPED_KEYS = "dropped_attribute_keys"
"""``frame.attrs`` key: attribute keys left out of the frame's columns
(beyond :data:`~coreepi.model.limits.MAX_ATTRIBUTE_COLUMNS`)."""
EXPOSURE_COLUMNS = ("host_id", "start", "end", "seconds")
TELEMETRY_COLUMNS = (
    "event_id", "host_id", "ts", "kind", "severity", "component", "hardware_indicative",
    "summary",
)  # fmt: skip


@dataclass
class NodeTimeFrames:
    """Crashes and exposure of ``[since, until)`` (UTC), exposure summed.

    ``crashes``: ``crash_id, host_id, captured_at`` (UTC), ``signature,
    phenotypes, hardware_phenotypes`` (lists), ``exe, app_version``, one column
    per sidecar attribute, and ``exposure_set`` (row of ``sets`` of the
    interval holding the crash, -1: none). ``sets``: one row per attribute
    set with exposure in the window: one column per attribute (hosts.csv's,
    the interval's overriding) and ``node_days`` (float, days of 86400 s).
    ``by_host``: node-days per ``host_id`` in the window. Exactly the input
    of ``coreepi.epi.tables.NodeTime``.
    """

    since: datetime
    until: datetime
    crashes: pd.DataFrame
    sets: pd.DataFrame
    by_host: pd.Series
    host_sets: pd.DataFrame | None = None
    """``host_id``, ``set`` (row of ``sets``), ``node_days``: each host's node-days per set
    (None: not offered, e.g. too many pairs)."""


def json_object(text: Any) -> dict[str, Any]:
    """The JSON object in ``text``; {} for None, empty text or a non-object."""
    if not isinstance(text, str) or not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def _as_utc(series: pd.Series) -> pd.Series:
    s = pd.to_datetime(series, utc=True)
    return s.dt.tz_convert("UTC")


def merged_attributes(pairs: Iterable[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """One dict per (host attributes JSON, interval attributes JSON): the
    host's, overridden by the interval's values that are not None."""
    out = []
    for host_text, interval_text in pairs:
        merged = json_object(host_text)
        merged.update({k: v for k, v in json_object(interval_text).items() if v is not None})
        out.append(merged)
    return out


def attribute_columns(
    codes: np.ndarray, dicts: Sequence[dict[str, Any]], reserved: Sequence[str],
    limit: int = MAX_ATTRIBUTE_COLUMNS,
) -> tuple[dict[str, pd.Series], int]:
    """One column per key of ``dicts`` (one dict per distinct attribute set),
    expanded to rows by ``codes`` (-1: no attribute set), and how many keys
    were left out. At most ``limit`` keys become columns: those on the most
    rows (ties: first seen), so a fleet sending thousands of distinct keys
    cannot widen the frame (cost stays linear in rows). A key in
    ``reserved`` gets a ``sidecar_`` prefix."""
    rows_per_set = np.bincount(codes[codes >= 0], minlength=len(dicts))
    weight: dict[str, int] = {}  # insertion order = first seen
    for d, n in zip(dicts, rows_per_set, strict=False):
        for k in d:
            weight[k] = weight.get(k, 0) + int(n)
    keys = list(weight)
    if len(keys) > limit:
        ranked = sorted(range(len(keys)), key=lambda i: -weight[keys[i]])[:limit]
        keys = [keys[i] for i in sorted(ranked)]
    out: dict[str, pd.Series] = {}
    for key in keys:
        values = np.array(
            [_scalar(d.get(key)) for d in dicts] + [None], dtype=object
        )  # the trailing None serves rows with no attribute set (code -1)
        col = pd.Series(values[codes], dtype=object)
        name = f"sidecar_{key}" if key in reserved else key
        out[name] = col.infer_objects()
    return out, len(weight) - len(keys)


def _scalar(v: Any) -> Any:
    """Attribute values are scalars; a list or object becomes its JSON text."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return v


def crash_frame_from(rows: pd.DataFrame) -> pd.DataFrame:
    """The crash frame (see :meth:`~coreepi.store.interfaces.CrashStore.crash_frame`)
    of ``rows``: CRASH_COLUMNS (lists may be numpy arrays) + ``attributes`` (JSON text)."""
    df = rows.loc[:, list(CRASH_COLUMNS)].copy()
    df["captured_at"] = _as_utc(df["captured_at"])
    for c in ("phenotypes", "hardware_phenotypes"):
        df[c] = [list(v) if v is not None else [] for v in df[c]]
    codes, uniques = pd.factorize(rows["attributes"], use_na_sentinel=True)
    dicts = [json_object(u) for u in uniques]
    # exe and app_version are columns of their own (filled from the sidecar)
    dicts = [{k: v for k, v in d.items() if k not in ("exe", "app_version")} for d in dicts]
    columns, dropped = attribute_columns(codes, dicts, CRASH_COLUMNS)
    for name, col in columns.items():
        df[name] = col.values
    df = df.reset_index(drop=True)
    df.attrs[DROPPED_KEYS] = dropped
    return df


def exposure_frame_from(
    rows: pd.DataFrame, since: datetime | None, until: datetime | None
) -> pd.DataFrame:
    """The exposure frame (see :meth:`~coreepi.store.interfaces.HostStore.exposure_frame`)
    of ``rows``: host_id, start, end, attributes (interval JSON), host_attributes
    (JSON), clipped to ``[since, until)``."""
    df = pd.DataFrame({"host_id": rows["host_id"].astype(object)})
    start = _as_utc(rows["start"])
    end = _as_utc(rows["end"])
    if since is not None:
        start = start.clip(lower=pd.Timestamp(since).tz_convert("UTC"))
    if until is not None:
        end = end.clip(upper=pd.Timestamp(until).tz_convert("UTC"))
    df["start"] = start
    df["end"] = end
    df["seconds"] = (df["end"] - df["start"]).dt.total_seconds()
    keys = pd.DataFrame({
        "h": rows["host_attributes"].astype(object).fillna(""),
        "i": rows["attributes"].astype(object).fillna(""),
    })
    # group numbers in order of first appearance == drop_duplicates' order
    codes = keys.groupby(["h", "i"], sort=False).ngroup().to_numpy()
    dicts = merged_attributes(keys.drop_duplicates().itertuples(index=False))
    columns, dropped = attribute_columns(codes, dicts, EXPOSURE_COLUMNS)
    for name, col in columns.items():
        df[name] = col.values
    df = df.reset_index(drop=True)
    df.attrs[DROPPED_KEYS] = dropped
    return df


def telemetry_frame_from(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows``: TELEMETRY_COLUMNS; ``ts`` made UTC, ``hardware_indicative`` bool."""
    df = rows.loc[:, list(TELEMETRY_COLUMNS)].copy()
    df["ts"] = _as_utc(df["ts"])
    df["hardware_indicative"] = df["hardware_indicative"].astype(bool)
    return df.reset_index(drop=True)
