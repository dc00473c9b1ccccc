"""Exposure (node-time, the denominator) and the attributes crashes inherit from it.

* :func:`clip_exposure` — node-days of every interval inside a time window;
* :func:`attach_attributes` — each crash takes the attributes of the exposure
  interval holding its ``(host_id, captured_at)``;
* :func:`bin_numeric` — numeric attributes (load, memory pressure, uptime) are
  cut into strata, by node-time-weighted quantiles or configured edges, so a
  finding such as "crashes only under high load" is a rate ratio like any other;
* :func:`prepare_attributes` — all of the above for every attribute, giving
  categorical columns with the same levels in both tables.

All functions are vectorized (sort + ``merge_asof`` + ``groupby``); none loops
over rows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Literal

import numpy as np
import pandas as pd

from coreepi.epi.config import EpiConfig
from coreepi.epi.tables import EXPOSURE_COLUMNS, EXPOSURE_MEASURES, attribute_columns

__all__ = [
    "NODE_DAY_SECONDS",
    "OTHER_LEVEL",
    "AttributeInfo",
    "attach_attributes",
    "attach_sets",
    "attribute_class",
    "bin_numeric",
    "clip_exposure",
    "node_days_by",
    "prepare_attributes",
    "weighted_quantile_edges",
]

NODE_DAY_SECONDS = 86400.0
"""Seconds in one node-day."""

OTHER_LEVEL = "(other)"
"""The level rare values of an attribute are pooled into (see ``EpiConfig.max_levels``)."""

AttributeClass = Literal["environment", "hardware", "other"]


@dataclass(frozen=True)
class AttributeInfo:
    """How one attribute was prepared for testing."""

    name: str
    attribute_class: AttributeClass
    kind: Literal["categorical", "strata"]
    edges: tuple[float, ...] = ()
    """Inner bin edges of a numeric attribute (strata are [-inf, e0), [e0, e1), …)."""
    levels: tuple[str, ...] = field(default=())
    pooled_levels: int = 0
    """How many rare values were pooled into ``(other)``."""


def attribute_class(name: str, config: EpiConfig) -> AttributeClass:
    """Environment, hardware or other, from the words of the attribute's name."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    if words & {w.lower() for w in config.environment_attributes}:
        return "environment"
    if words & {w.lower() for w in config.hardware_attributes}:
        return "hardware"
    return "other"


def clip_exposure(
    exposure: pd.DataFrame, since: datetime | pd.Timestamp, until: datetime | pd.Timestamp
) -> pd.DataFrame:
    """Intervals clipped to ``[since, until)`` with a ``node_days`` column (float days).

    Intervals wholly outside the window are dropped; ``start``/``end`` of the
    returned rows are the clipped bounds. The input is not modified.
    """
    lo = pd.Timestamp(since)
    hi = pd.Timestamp(until)
    start = exposure["start"].clip(lower=lo)
    end = exposure["end"].clip(upper=hi)
    seconds = (end - start).dt.total_seconds().to_numpy()
    keep = seconds > 0
    out = exposure.loc[keep].copy()
    out["start"] = start[keep]
    out["end"] = end[keep]
    out["node_days"] = seconds[keep] / NODE_DAY_SECONDS
    return out


def node_days_by(exposure: pd.DataFrame, by: str | Sequence[str]) -> pd.Series:
    """Total node-days per value (or combination of values) of ``by``; unknown values dropped."""
    keys = [by] if isinstance(by, str) else list(by)
    return exposure.groupby(keys, observed=True, sort=False)["node_days"].sum()


def attach_attributes(
    crashes: pd.DataFrame, exposure: pd.DataFrame, attributes: Sequence[str]
) -> pd.DataFrame:
    """Crashes with the ``attributes`` of the exposure interval holding them.

    The interval of a crash is the one of its host with ``start <= captured_at
    < end`` (the latest-starting such interval if the store let overlaps
    through). Adds a bool column ``in_exposure``. A crash outside every
    interval keeps the values its own sidecar gave for those attributes (NaN
    otherwise); a crash inside one takes the interval's values, falling back to
    its sidecar's where the interval has none. Row order is preserved.
    """
    attrs = [a for a in attributes if a in exposure.columns]
    left = crashes.reset_index(drop=True)
    left["_row"] = np.arange(len(left))
    left_sorted = left[["_row", "host_id", "captured_at"]].sort_values("captured_at")
    right = exposure[["host_id", "start", "end", *attrs]].sort_values("start")
    # merge_asof needs the same dtype on both sides of the "by" key.
    left_sorted["host_id"] = left_sorted["host_id"].astype(object)
    right = right.assign(host_id=right["host_id"].astype(object))
    merged = pd.merge_asof(
        left_sorted,
        right,
        left_on="captured_at",
        right_on="start",
        by="host_id",
        direction="backward",
        allow_exact_matches=True,
    ).sort_values("_row")
    inside = (merged["end"] > merged["captured_at"]).to_numpy()
    out = left.drop(columns=["_row"])
    out["in_exposure"] = inside
    for a in attrs:
        values = merged[a].where(inside).reset_index(drop=True)
        if a in out.columns:
            values = values.astype(object)
            values = values.where(values.notna(), out[a].astype(object))
        out[a] = values
    out.index = crashes.index
    return out


def attach_sets(crashes: pd.DataFrame, sets: pd.DataFrame, attributes: Sequence[str]) -> pd.DataFrame:
    """Crashes with the ``attributes`` of their node-time set (column ``exposure_set``).

    The node-time form of :func:`attach_attributes`: the store already found
    each crash's interval and names its attribute set (a row of ``sets`` by
    position; -1 when the crash is in no interval). Same result: a bool
    ``in_exposure`` column; a set's value wins, the crash's own value fills in
    where the set has none (and outside every interval).
    """
    codes = crashes["exposure_set"].to_numpy(dtype=np.int64)
    inside = codes >= 0
    out = crashes.copy()
    out["in_exposure"] = inside
    for a in attributes:
        if a not in sets.columns:
            continue
        col = sets[a]
        if _is_numeric(col):
            table = np.append(col.to_numpy(dtype=np.float64, na_value=np.nan), np.nan)
        else:
            table = np.append(col.to_numpy(dtype=object), None)
        values = pd.Series(table[codes], index=out.index)  # -1 picks the trailing missing value
        if a in out.columns:
            values = values.astype(object)
            values = values.where(values.notna(), out[a].astype(object))
        out[a] = values
    return out


def weighted_quantile_edges(
    values: np.ndarray, weights: np.ndarray, bins: int
) -> tuple[float, ...]:
    """Inner edges cutting ``values`` into ``bins`` strata of (about) equal total weight.

    With node-days as weights, each stratum holds the same node-time: quartiles
    of *exposure*, not of intervals. Each cut falls just before or just after
    the value holding the quantile, whichever is nearer in weight (edges are
    values: stratum ``[e_i, e_i+1)``). Duplicate edges (a value holding more
    than one bin's weight) collapse, so fewer strata may result.
    """
    ok = np.isfinite(values) & np.isfinite(weights) & (weights > 0)
    v = values[ok]
    w = weights[ok]
    if v.size == 0 or bins < 2:
        return ()
    order = np.argsort(v, kind="stable")
    v = v[order]
    uniq, first = np.unique(v, return_index=True)
    cum_after = np.cumsum(np.add.reduceat(w[order], first))  # weight up to and including uniq[i]
    cum_before = cum_after - np.add.reduceat(w[order], first)
    total = cum_after[-1]
    edges: list[float] = []
    for i in range(1, bins):
        target = total * i / bins
        j = int(np.searchsorted(cum_after, target, side="left"))  # value holding the target
        j = min(j, uniq.size - 1)
        # cut before or after that value, whichever leaves the lower strata nearer the target
        if abs(cum_before[j] - target) < abs(cum_after[j] - target):
            cut = j
        else:
            cut = j + 1
        if 0 < cut < uniq.size:
            edge = float(uniq[cut])
            if not edges or edge > edges[-1]:
                edges.append(edge)
    return tuple(edges)


def _fmt(x: float) -> str:
    return f"{x:g}"


def strata_labels(edges: Sequence[float]) -> list[str]:
    """Readable labels of the strata cut by ``edges``: ``<4``, ``[4, 16)``, ``≥16``."""
    if not edges:
        return ["all"]
    labels = [f"<{_fmt(edges[0])}"]
    labels += [f"[{_fmt(a)}, {_fmt(b)})" for a, b in pairwise(edges)]
    labels.append(f"≥{_fmt(edges[-1])}")
    return labels


def bin_numeric(values: pd.Series, edges: Sequence[float]) -> pd.Series:
    """Cut a numeric series into the strata of :func:`strata_labels` (categorical; NaN stays NaN)."""
    bounds = [-np.inf, *edges, np.inf]
    return pd.cut(
        pd.to_numeric(values, errors="coerce"),
        bins=bounds,
        right=False,
        labels=strata_labels(edges),
    )


def _numbers(series: pd.Series) -> pd.Series:
    """``series`` as numbers when every known value is one (hosts.csv and heartbeats carry
    text: ``"912"``, ``"30.5"``), so measures such as exceptions per second are binned
    into strata; else ``series`` itself (``"6.1.0-13"``, ``"0xa0011d1"`` stay labels)."""
    if _is_numeric(series) or isinstance(series.dtype, pd.CategoricalDtype):
        return series
    known = series.notna()
    if not known.any():
        return series
    parsed = pd.to_numeric(series.where(known), errors="coerce")
    return parsed if bool(parsed[known].notna().all()) else series


def _is_numeric(series: pd.Series) -> bool:
    return bool(
        pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)
    )


def _as_labels(series: pd.Series) -> pd.Series:
    """A categorical with string categories (NaN stays NaN)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cat = series
    else:
        cat = series.astype("category")
    cats = [str(c) for c in cat.cat.categories]
    if len(set(cats)) == len(cats):
        return cat.cat.rename_categories(cats)
    return (
        series.astype(object).where(series.notna()).map(str, na_action="ignore").astype("category")
    )


def prepare_attributes(
    crashes: pd.DataFrame, exposure: pd.DataFrame, config: EpiConfig, *, attach: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame, list[AttributeInfo]]:
    """Attach, bin and level-cap every exposure attribute; return new tables and the plan.

    ``exposure`` must already carry ``node_days`` (see :func:`clip_exposure`).
    Returns ``(crashes, exposure, infos)``: both tables hold every attribute as
    a categorical column with the same string levels; ``crashes`` gains
    ``in_exposure``. Attributes that carry a single known value (nothing to
    compare) are dropped from the plan. ``attach=False``: the crashes already
    carry their interval's values and ``in_exposure`` (see :func:`attach_sets`).
    """
    attrs = attribute_columns(exposure, (*EXPOSURE_COLUMNS, *EXPOSURE_MEASURES))
    if attach:
        crashes = attach_attributes(crashes, exposure, attrs)
    exposure = exposure.copy()
    infos: list[AttributeInfo] = []
    weights = exposure["node_days"].to_numpy(dtype=np.float64)
    for a in attrs:
        raw = exposure[a]
        ecol = _numbers(raw)
        ccol = crashes[a] if ecol is raw else pd.to_numeric(crashes[a], errors="coerce")
        kind: Literal["categorical", "strata"] = "categorical"
        edges: tuple[float, ...] = ()
        if _is_numeric(ecol) and (
            a in config.strata_edges or ecol.nunique() >= config.numeric_min_distinct
        ):
            kind = "strata"
            if a in config.strata_edges:
                edges = tuple(sorted(float(e) for e in config.strata_edges[a]))
            else:
                edges = weighted_quantile_edges(
                    ecol.to_numpy(dtype=np.float64, na_value=np.nan), weights, config.numeric_bins
                )
            elab = bin_numeric(ecol, edges)
            clab = bin_numeric(ccol, edges)
        else:
            elab = _as_labels(exposure[a])
            clab = _as_labels(crashes[a])
        # Cap the levels: the most exposed ones stay, the rest pool into "(other)".
        by_level = pd.Series(weights).groupby(elab.to_numpy(), sort=False).sum()
        # Most exposed first; equal exposure in level order, so the plan does not depend on
        # the row order of the exposure (the store's summed sets come in no fixed order).
        order = pd.DataFrame(
            {"w": by_level.to_numpy(), "k": [str(v) for v in by_level.index]}
        ).sort_values(["w", "k"], ascending=[False, True]).index.to_numpy()
        by_level = by_level.iloc[order]
        keep = [str(v) for v in by_level.index[: config.max_levels]]
        pooled = max(0, len(by_level) - len(keep))
        levels = keep + ([OTHER_LEVEL] if pooled else [])
        if kind == "strata":
            levels = [lv for lv in strata_labels(edges) if lv in set(keep)]
        elab = _recode(elab, levels, pooled)
        clab = _recode(clab, levels, pooled)
        if len(levels) < 2:
            exposure = exposure.drop(columns=[a])
            crashes = crashes.drop(columns=[a])
            continue
        exposure[a] = elab
        crashes[a] = clab
        infos.append(
            AttributeInfo(
                name=a,
                attribute_class=attribute_class(a, config),
                kind=kind,
                edges=edges,
                levels=tuple(levels),
                pooled_levels=pooled,
            )
        )
    return crashes, exposure, infos


def _recode(labels: pd.Series, levels: list[str], pooled: int) -> pd.Series:
    """Categorical over ``levels``; known values outside them become ``(other)`` (or NaN)."""
    cat = labels if isinstance(labels.dtype, pd.CategoricalDtype) else _as_labels(labels)
    index = {lv: i for i, lv in enumerate(levels)}
    fallback = index.get(OTHER_LEVEL, -1) if pooled else -1
    mapping = np.array(
        [index.get(str(c), fallback) for c in cat.cat.categories] + [-1], dtype=np.int64
    )
    codes = cat.cat.codes.to_numpy().astype(np.int64)  # -1 (NaN) picks the trailing -1
    return pd.Series(
        pd.Categorical.from_codes(mapping[codes], categories=levels), index=labels.index
    )
