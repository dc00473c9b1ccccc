"""The input tables of the epidemiology engine, and their validation.

``coreepi.epi`` never opens a database or a file: the store (or a test)
hands it three pandas DataFrames. This module is their contract.

crashes — one row per crash (every crash, even when its core was dropped)
-------------------------------------------------------------------------
=====================  ==========================================================
column                 type and meaning
=====================  ==========================================================
``crash_id``           str, unique
``host_id``            str
``captured_at``        timezone-aware datetime (UTC), when the crash happened
``signature``          str, or None/NaN when no signature could be made
``phenotypes``         list of str: names of every phenotype that fired
                       (None/NaN is read as the empty list)
``hardware_phenotypes`` list of str: the subset of ``phenotypes`` whose
                       ``Phenotype.hardware_indicative`` is true
*any other column*     an **attribute** from the crash's sidecar (e.g.
                       ``app_version``); see "attributes" below
=====================  ==========================================================

exposure — one row per exposure interval (node-time under one attribute set)
------------------------------------------------------------------------------
=====================  ==========================================================
column                 type and meaning
=====================  ==========================================================
``host_id``            str
``start``, ``end``     timezone-aware datetimes (UTC); ``end`` > ``start``;
                       intervals of one host should not overlap (the store
                       rejects overlaps; overlapping rows are counted twice)
``seconds``,           optional: the interval's length, as the store reports
``node_days``          it; a measure of exposure, never an attribute (the
                       engine clips and measures the intervals itself)
*any other column*     an **attribute** in effect during the interval. The
                       store merges the static ``hosts.csv`` attributes into
                       every interval row, so each row carries the full set.
=====================  ==========================================================

telemetry (optional) — one row per hardware/kernel event
--------------------------------------------------------
=======================  ========================================================
column                   type and meaning
=======================  ========================================================
``host_id``              str
``ts``                   timezone-aware datetime (UTC); rows with NaT are ignored
``kind``                 str: ``mce``, ``edac_ce``, ``edac_ue``, ``xid``,
                         ``aer``, ``sigbus_mce`` or ``other``
                         (:class:`coreepi.model.events.EventKind`)
``hardware_indicative``  bool
``summary``              str, one line a person can read
=======================  ========================================================

node-time (alternative to exposure) — exposure summed by the store
------------------------------------------------------------------
A :class:`NodeTime`: the store (which can sum 10M intervals in SQL far
faster than pandas) hands over the exposure already clipped to one window and
summed, instead of the intervals:

=====================  ==========================================================
field                  type and meaning
=====================  ==========================================================
``since``, ``until``   the window (timezone-aware); it *is* the analysis window
``sets``               DataFrame, one row per distinct attribute set seen in the
                       window: one column per attribute plus ``node_days``
                       (float, node-days with exactly that set)
``by_host``            Series of node-days per host, indexed by ``host_id``
``host_sets``          optional DataFrame ``host_id, set, node_days``: node-days
                       per (host, row of ``sets``)
=====================  ==========================================================

The crashes table then carries ``exposure_set`` (int): the row of ``sets``
(by position) of the interval holding the crash, -1 when none does (the store
did the interval join). Its attribute values are taken from that row, falling
back to the crash's own column where the set has none, exactly as for
intervals.

Attributes
----------
An attribute is any column that is not in a table's fixed set. Only
attributes present in ``exposure`` have a denominator, so only they are
tested for association; a crash takes the attribute values of the exposure
interval that contains its ``(host_id, captured_at)``
(:func:`coreepi.epi.exposure.attach_attributes`). Numeric attributes with many
distinct values (load, memory pressure, uptime) are binned into strata
(:func:`coreepi.epi.exposure.bin_numeric`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pandas as pd

from coreepi.errors import InputError

__all__ = [
    "CRASH_COLUMNS",
    "EXPOSURE_COLUMNS",
    "EXPOSURE_MEASURES",
    "EXPOSURE_SET",
    "TELEMETRY_COLUMNS",
    "NodeTime",
    "TableError",
    "attribute_columns",
    "validate_crashes",
    "validate_exposure",
    "validate_node_time",
    "validate_telemetry",
]

CRASH_COLUMNS: tuple[str, ...] = (
    "crash_id",
    "host_id",
    "captured_at",
    "signature",
    "phenotypes",
    "hardware_phenotypes",
)
"""Fixed columns of the crashes table; every other column is an attribute."""

EXPOSURE_COLUMNS: tuple[str, ...] = ("host_id", "start", "end")
"""Fixed columns of the exposure table; every other column but the measures is an attribute."""

EXPOSURE_MEASURES: tuple[str, ...] = ("seconds", "node_days")
"""Optional exposure columns that measure an interval: never tested as attributes, so the
interval path tests the same attributes as the summed path (:class:`NodeTime`)."""

TELEMETRY_COLUMNS: tuple[str, ...] = ("host_id", "ts", "kind", "hardware_indicative", "summary")
"""Columns of the telemetry table."""

EXPOSURE_SET = "exposure_set"
"""Crash column naming its row of :attr:`NodeTime.sets` (-1: in no exposure interval)."""


@dataclass(frozen=True)
class NodeTime:
    """Exposure summed over one window by the store (see the module docstring)."""

    since: datetime
    until: datetime
    sets: pd.DataFrame
    by_host: pd.Series
    host_sets: pd.DataFrame | None = None
    """Optional: ``host_id``, ``set`` (row of ``sets`` by position), ``node_days`` — each
    host's node-days per attribute set. With it the host-level statistics (stratified
    SIR, hosts exposed per attribute value) are exact; without it the SIR uses the
    fleet-wide rate and the host-level comparison is not made (a note says so)."""


# Columns the engine adds to its working copies; an input attribute must not use them.
_RESERVED = frozenset({"node_days", "_group", "_kind"})


class TableError(InputError, ValueError):
    """An input table breaks its contract (missing column, wrong type).

    A ``ValueError`` too, so callers that only know pandas-style errors catch it.
    """


def attribute_columns(table: pd.DataFrame, fixed: Iterable[str]) -> list[str]:
    """The attribute columns of ``table``: every column not in ``fixed``, in table order."""
    fixed_set = set(fixed)
    return [str(c) for c in table.columns if c not in fixed_set]


def _require(table: pd.DataFrame, name: str, columns: Iterable[str]) -> None:
    if not isinstance(table, pd.DataFrame):
        raise TableError(name, f"expected a pandas DataFrame, got {type(table).__name__}")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise TableError(
            name,
            f"missing column {missing[0]!r}"
            + (f" (and {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else "")
            + f"; the table has {', '.join(map(repr, map(str, table.columns))) or 'no columns'}",
        )
    reserved = sorted(_RESERVED.intersection(map(str, table.columns)))
    if reserved:
        raise TableError(name, f"column {reserved[0]!r} is reserved for the engine's own use")


def _require_utc(table: pd.DataFrame, name: str, column: str) -> None:
    dtype = table[column].dtype
    if not isinstance(dtype, pd.DatetimeTZDtype):
        raise TableError(
            name,
            f"column {column!r} must hold timezone-aware UTC datetimes, got dtype {dtype}",
        )


def validate_crashes(crashes: pd.DataFrame) -> None:
    """Check the crashes table's fixed columns and types; raise :class:`TableError`."""
    _require(crashes, "crashes", CRASH_COLUMNS)
    _require_utc(crashes, "crashes", "captured_at")
    if crashes["captured_at"].isna().any():
        n = int(crashes["captured_at"].isna().sum())
        raise TableError("crashes", f"column 'captured_at' has {n} missing value(s)")
    if crashes["host_id"].isna().any():
        n = int(crashes["host_id"].isna().sum())
        raise TableError("crashes", f"column 'host_id' has {n} missing value(s)")


def validate_exposure(exposure: pd.DataFrame) -> None:
    """Check the exposure table's fixed columns and types; raise :class:`TableError`."""
    _require(exposure, "exposure", EXPOSURE_COLUMNS)
    _require_utc(exposure, "exposure", "start")
    _require_utc(exposure, "exposure", "end")
    bad = exposure["end"] < exposure["start"]
    if bad.any():
        first = exposure.index[bad.to_numpy()][0]
        raise TableError(
            "exposure",
            f"{int(bad.sum())} interval(s) end before they start (first at index {first!r})",
        )


def validate_telemetry(telemetry: pd.DataFrame) -> None:
    """Check the telemetry table's columns and types; raise :class:`TableError`."""
    _require(telemetry, "telemetry", TELEMETRY_COLUMNS)
    _require_utc(telemetry, "telemetry", "ts")


def validate_node_time(node_time: NodeTime, crashes: pd.DataFrame) -> None:
    """Check a :class:`NodeTime` and the ``exposure_set`` column of ``crashes``."""
    if not isinstance(node_time.sets, pd.DataFrame) or "node_days" not in node_time.sets.columns:
        raise TableError("node-time", "sets must be a DataFrame with a 'node_days' column")
    if EXPOSURE_SET not in crashes.columns:
        raise TableError(
            "crashes", f"missing column {EXPOSURE_SET!r} (needed with node-time exposure)"
        )
    codes = crashes[EXPOSURE_SET].to_numpy()
    if len(codes) and (codes.min() < -1 or codes.max() >= len(node_time.sets)):
        raise TableError("crashes", f"column {EXPOSURE_SET!r} points outside the node-time sets")
    hs = node_time.host_sets
    if hs is not None and not {"host_id", "set", "node_days"} <= set(hs.columns):
        raise TableError("node-time", "host_sets needs the columns host_id, set, node_days")
    for name, ts in (("since", node_time.since), ("until", node_time.until)):
        if pd.Timestamp(ts).tzinfo is None:
            raise TableError("node-time", f"{name} must be timezone-aware")
