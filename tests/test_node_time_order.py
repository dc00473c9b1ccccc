"""The store's crash rows come back in (captured_at, crash_id) order, sorted in
numpy (``coreepi.store.node_time._time_order``), not by DuckDB's ORDER BY: the
same order as a pandas sort of both keys, ties in time broken by the id in
code-point order, on random tables full of ties."""

from __future__ import annotations

import numpy as np
import pandas as pd

from coreepi.store.node_time import _time_order


def test_time_order_is_the_sort_by_time_then_id() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        at = pd.to_datetime(rng.integers(0, 6, n) * 1_000_000, unit="us", utc=True)
        ids = ["".join(rng.choice(list("abZ0é-"), 3)) + str(i) for i in range(n)]
        rows = pd.DataFrame({"captured_at": at, "crash_id": ids})
        got = rows["crash_id"].to_numpy()[_time_order(rows)].tolist()
        want = rows.sort_values(["captured_at", "crash_id"], kind="stable")["crash_id"].tolist()
        assert got == want


def test_time_order_without_ties_is_the_time_sort() -> None:
    at = pd.to_datetime([5, 1, 3], unit="s", utc=True)
    rows = pd.DataFrame({"captured_at": at, "crash_id": ["c", "a", "b"]})
    assert _time_order(rows).tolist() == [1, 2, 0]
