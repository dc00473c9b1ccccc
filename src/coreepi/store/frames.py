"""Turn rows read from a store into the DataFrames :mod:`coreepi.epi` reads.

Backend-independent: every store implementation reads its rows (attributes
as JSON text) and hands them here. JSON is decoded once per *distinct* text
(fleets repeat a few attribute sets millions of times), so expanding 10M
exposure intervals costs a factorize, not 10M ``json.loads``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "CRASH_COLUMNS",
    "EXPOSURE_COLUMNS",
    "TELEMETRY_COLUMNS",
    "crash_frame_from",
    "exposure_frame_from",
    "telemetry_frame_from",
]

CRASH_COLUMNS = (
    "crash_id", "host_id", "captured_at", "source", "signature", "phenotypes",
    "hardware_phenotypes", "signal", "si_code_name", "exe", "app_version", "core_status",
)  # fmt: skip
EXPOSURE_COLUMNS = ("host_id", "start", "end", "seconds")
TELEMETRY_COLUMNS = (
    "event_id", "host_id", "ts", "kind", "severity", "component", "hardware_indicative",
    "summary",
)  # fmt: skip


def _loads(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def _as_utc(series: pd.Series) -> pd.Series:
    s = pd.to_datetime(series, utc=True)
    return s.dt.tz_convert("UTC")


def _attribute_columns(
    codes: np.ndarray, dicts: Sequence[dict[str, Any]], reserved: Sequence[str]
) -> dict[str, pd.Series]:
    """One column per key of ``dicts`` (one dict per distinct attribute set),
    expanded to rows by ``codes``. A key in ``reserved`` gets a ``sidecar_`` prefix."""
    keys: list[str] = []
    for d in dicts:
        keys.extend(k for k in d if k not in keys)
    out: dict[str, pd.Series] = {}
    for key in keys:
        values = np.array(
            [_scalar(d.get(key)) for d in dicts] + [None], dtype=object
        )  # the trailing None serves rows with no attribute set (code -1)
        col = pd.Series(values[codes], dtype=object)
        name = f"sidecar_{key}" if key in reserved else key
        out[name] = col.infer_objects()
    return out


def _scalar(v: Any) -> Any:
    """Attribute values are scalars; a list or object becomes its JSON text."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return v


def crash_frame_from(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows``: CRASH_COLUMNS (lists may be numpy arrays) + ``attributes`` (JSON text)."""
    df = rows.loc[:, list(CRASH_COLUMNS)].copy()
    df["captured_at"] = _as_utc(df["captured_at"])
    for c in ("phenotypes", "hardware_phenotypes"):
        df[c] = [list(v) if v is not None else [] for v in df[c]]
    codes, uniques = pd.factorize(rows["attributes"], use_na_sentinel=True)
    dicts = [_loads(u) for u in uniques]
    # exe and app_version are columns of their own (filled from the sidecar)
    dicts = [{k: v for k, v in d.items() if k not in ("exe", "app_version")} for d in dicts]
    for name, col in _attribute_columns(codes, dicts, CRASH_COLUMNS).items():
        df[name] = col.values
    return df.reset_index(drop=True)


def exposure_frame_from(
    rows: pd.DataFrame, since: datetime | None, until: datetime | None
) -> pd.DataFrame:
    """``rows``: host_id, start, end, attributes (interval JSON), host_attributes (JSON)."""
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
    dicts = []
    for host_text, interval_text in keys.drop_duplicates().itertuples(index=False):
        merged = _loads(host_text)
        merged.update({k: v for k, v in _loads(interval_text).items() if v is not None})
        dicts.append(merged)
    for name, col in _attribute_columns(codes, dicts, EXPOSURE_COLUMNS).items():
        df[name] = col.values
    return df.reset_index(drop=True)


def telemetry_frame_from(rows: pd.DataFrame) -> pd.DataFrame:
    df = rows.loc[:, list(TELEMETRY_COLUMNS)].copy()
    df["ts"] = _as_utc(df["ts"])
    df["hardware_indicative"] = df["hardware_indicative"].astype(bool)
    return df.reset_index(drop=True)
