"""Exposure clipping, attribute attachment, strata and table validation (coreepi.epi)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from coreepi.epi import EpiConfig, TableError, validate_crashes, validate_exposure
from coreepi.epi.exposure import (
    attach_attributes,
    attribute_class,
    bin_numeric,
    clip_exposure,
    node_days_by,
    prepare_attributes,
    weighted_quantile_edges,
)

T0 = pd.Timestamp("2024-01-01", tz="UTC")


def d(days: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(days=days)


def _exposure() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "host_id": ["a", "a", "b"],
            "start": [d(0), d(10), d(0)],
            "end": [d(10), d(20), d(20)],
            "kernel": ["5.15", "6.1", "5.15"],
        }
    )


def _crashes(rows: list[tuple[str, float]], **extra: list[object]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "crash_id": [f"c{i}" for i in range(len(rows))],
            "host_id": [h for h, _ in rows],
            "captured_at": [d(t) for _, t in rows],
            "signature": ["s"] * len(rows),
            "phenotypes": [[] for _ in rows],
            "hardware_phenotypes": [[] for _ in rows],
        }
    )
    for k, v in extra.items():
        frame[k] = v
    return frame


def test_clip_exposure_node_days() -> None:
    out = clip_exposure(_exposure(), d(5), d(15))
    # a: [5,10) 5 days and [10,15) 5 days; b: [5,15) 10 days
    assert list(out["node_days"]) == pytest.approx([5.0, 5.0, 10.0])
    assert node_days_by(out, "kernel").to_dict() == pytest.approx({"5.15": 15.0, "6.1": 5.0})
    assert len(clip_exposure(_exposure(), d(30), d(40))) == 0


def test_attach_attributes_takes_the_interval_holding_the_crash() -> None:
    crashes = _crashes([("a", 12), ("a", 3), ("b", 25), ("a", 10)], kernel=["x", "x", "7.0", None])
    out = attach_attributes(crashes, _exposure(), ["kernel"])
    assert list(out["kernel"]) == ["6.1", "5.15", "7.0", "6.1"]  # c2: outside, keeps its sidecar's
    assert list(out["in_exposure"]) == [True, True, False, True]
    assert list(out["crash_id"]) == ["c0", "c1", "c2", "c3"]  # order kept


def test_weighted_quantile_edges_cut_exposure_not_rows() -> None:
    # values 1..4 with node-days 1, 1, 1, 97: the median of node-time is in value 4,
    # so a 2-bin cut puts everything below 4 in the first stratum.
    edges = weighted_quantile_edges(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 1, 1, 97.0]), 2)
    assert edges == (4.0,)
    # equal weights, quartiles of 1..8: edges at 3, 5, 7
    edges = weighted_quantile_edges(np.arange(1.0, 9.0), np.ones(8), 4)
    assert edges == (3.0, 5.0, 7.0)
    labels = bin_numeric(pd.Series([0.5, 3.0, 6.9, 7.0, np.nan]), edges)
    assert list(labels.astype(object)) == ["<3", "[3, 5)", "[5, 7)", "≥7", np.nan]


def test_prepare_attributes_bins_numeric_and_pools_rare_levels() -> None:
    rng = np.random.default_rng(0)
    n = 400
    exposure = pd.DataFrame(
        {
            "host_id": [f"h{i}" for i in range(n)],
            "start": [d(0)] * n,
            "end": [d(1)] * n,
            "load1": rng.uniform(0, 20, n),
            "zone": [f"z{i % 5}" for i in range(n - 3)] + ["rare1", "rare2", "rare3"],
            "numa_nodes": [1, 2] * (n // 2),
            "constant": ["same"] * n,
        }
    )
    exposure["node_days"] = 1.0
    crashes = _crashes([("h1", 0.5), ("h398", 0.5)])
    cfg = EpiConfig(max_levels=5, numeric_bins=4)
    cr, ex, infos = prepare_attributes(crashes, exposure, cfg)
    by_name = {i.name: i for i in infos}
    assert by_name["load1"].kind == "strata" and len(by_name["load1"].edges) == 3
    assert by_name["numa_nodes"].kind == "categorical"  # 2 distinct values: levels, not strata
    assert by_name["zone"].pooled_levels == 3 and "(other)" in by_name["zone"].levels
    assert "constant" not in by_name  # one value: nothing to compare
    assert cr.loc[1, "zone"] == "(other)"  # h398 is in zone rare2
    assert ex["load1"].value_counts().to_numpy() == pytest.approx([100] * 4)


def test_prepare_attributes_honours_configured_edges() -> None:
    exposure = pd.DataFrame(
        {
            "host_id": ["a", "b", "c"],
            "start": [d(0)] * 3,
            "end": [d(2)] * 3,
            "load1": [1.0, 8.0, 30.0],
        }
    )
    exposure["node_days"] = 2.0
    cfg = EpiConfig(strata_edges={"load1": (16.0, 4.0)})
    cr, ex, infos = prepare_attributes(_crashes([("c", 1)]), exposure, cfg)
    assert infos[0].edges == (4.0, 16.0)
    assert list(ex["load1"].astype(str)) == ["<4", "[4, 16)", "≥16"]
    assert cr.loc[0, "load1"] == "≥16"


def test_attribute_classes_from_name_words() -> None:
    cfg = EpiConfig()
    assert attribute_class("kernel", cfg) == "environment"
    assert attribute_class("gpu_driver", cfg) == "environment"
    assert attribute_class("gpu_model", cfg) == "hardware"
    assert attribute_class("cpu_model", cfg) == "hardware"
    assert attribute_class("app_version", cfg) == "other"
    assert attribute_class("cost_center", cfg) == "other"  # "os" is a word, not a substring


def test_validation_names_the_missing_column() -> None:
    crashes = _crashes([("a", 1)]).drop(columns=["hardware_phenotypes"])
    with pytest.raises(ValueError, match="crashes: missing column 'hardware_phenotypes'"):
        validate_crashes(crashes)
    with pytest.raises(TableError, match="exposure: missing column 'end'"):
        validate_exposure(_exposure().drop(columns=["end"]))


def test_validation_rejects_naive_times_and_reversed_intervals() -> None:
    naive = _exposure().assign(start=lambda f: f["start"].dt.tz_localize(None))
    with pytest.raises(TableError, match="'start' must hold timezone-aware UTC datetimes"):
        validate_exposure(naive)
    reversed_ = _exposure()
    reversed_.loc[1, "end"] = d(5)
    with pytest.raises(TableError, match="1 interval\\(s\\) end before they start"):
        validate_exposure(reversed_)
