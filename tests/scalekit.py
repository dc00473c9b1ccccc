"""Helpers of the scale tests: findings compared field by field (counts and
verdicts exact, floats to a relative 1e-9), and node-time frames compared."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from coreepi.epi import FleetFindings
from coreepi.store.frames import NodeTimeFrames

REL = 1e-9


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Where two JSON values differ: floats beyond ``REL`` (relative), anything
    else (ints, strings, bools, list lengths, keys) at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        if (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=1e-300):
            return []
        return [f"{path}: {a!r} vs {b!r}"]
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r} vs {b!r}"]
    return []


def findings_differences(a: FleetFindings, b: FleetFindings) -> list[str]:
    return differences(a.model_dump(mode="json"), b.model_dump(mode="json"))


def assert_same_frames(got: NodeTimeFrames, want: NodeTimeFrames) -> None:
    """Same window, same crashes (row order, columns, values), same attribute
    sets, node-days per host and per (host, set) (to 1e-12 relative)."""
    assert (got.since, got.until) == (want.since, want.until)
    # exposure_set numbers rows of ``sets``, whose order is each engine's own
    pd.testing.assert_frame_equal(got.crashes.drop(columns="exposure_set").reset_index(drop=True),
                                  want.crashes.drop(columns="exposure_set").reset_index(drop=True),
                                  check_dtype=False)
    # set rows may come in another order: compare them keyed by their attributes
    keys = [c for c in want.sets.columns if c != "node_days"]
    assert sorted(got.sets.columns) == sorted(want.sets.columns)
    g = got.sets.assign(_k=got.sets[keys].astype(str).agg("|".join, axis=1))
    w = want.sets.assign(_k=want.sets[keys].astype(str).agg("|".join, axis=1))
    assert g["_k"].is_unique and sorted(g["_k"]) == sorted(w["_k"])
    merged = g.merge(w, on="_k", suffixes=("_g", "_w"))
    pd.testing.assert_series_equal(merged["node_days_g"], merged["node_days_w"],
                                   check_names=False, rtol=1e-12)
    # a crash's exposure_set must name the same attribute set on both sides
    gk = g["_k"].to_numpy()[got.crashes["exposure_set"].clip(lower=0)]
    wk = w["_k"].to_numpy()[want.crashes["exposure_set"].clip(lower=0)]
    assert ((got.crashes["exposure_set"] < 0) == (want.crashes["exposure_set"] < 0)).all()
    assert (gk == wk)[want.crashes["exposure_set"].to_numpy() >= 0].all()
    pd.testing.assert_series_equal(got.by_host.sort_index(), want.by_host.sort_index(),
                                   rtol=1e-12, check_names=False)
    # each host's node-days per attribute set (the host-level statistics' input)
    assert got.host_sets is not None and want.host_sets is not None
    gh = pd.DataFrame({"host_id": got.host_sets["host_id"], "node_days": got.host_sets["node_days"],
                       "_k": g["_k"].to_numpy()[got.host_sets["set"].to_numpy()]})
    wh = pd.DataFrame({"host_id": want.host_sets["host_id"],
                       "node_days": want.host_sets["node_days"],
                       "_k": w["_k"].to_numpy()[want.host_sets["set"].to_numpy()]})
    gh, wh = (f.sort_values(["host_id", "_k"]).reset_index(drop=True) for f in (gh, wh))
    assert len(gh) == len(wh) > 0
    pd.testing.assert_frame_equal(gh, wh, check_dtype=False, rtol=1e-12)
