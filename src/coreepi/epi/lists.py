"""List cells (a crash's phenotypes) exploded without a Python step per crash.

The store hands the phenotype lists of a million crashes as a few hundred
shared list objects (one per distinct list); pandas' ``explode`` still walks
every cell. :func:`explode_lists` explodes each distinct cell once and
repeats the result by integer codes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["explode_lists"]


def explode_lists(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, items)``: each non-null item of each cell of ``series`` with the
    cell's position (0..n-1), cells in order and items in list order — the
    values of ``series.reset_index(drop=True).explode().dropna()`` and its index.

    Cells are told apart by identity, so equal lists that are different objects
    are exploded separately (correct, only slower); any cell pandas' ``explode``
    takes (list, tuple, None, NaN, a scalar) is taken the same way.
    """
    cells = series.to_numpy(dtype=object)
    n = len(cells)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=object)
    code, _ = pd.factorize(np.fromiter(map(id, cells), dtype=np.int64, count=n))
    # codes are numbered in first-seen order: a cell is a new one where its code
    # exceeds every code before it
    seen = np.maximum.accumulate(np.r_[-1, code[:-1]])
    reps = cells[code > seen]
    exploded = pd.Series(reps, dtype=object).explode().dropna()
    owner = exploded.index.to_numpy(np.int64)
    items = exploded.to_numpy(dtype=object)
    length = np.bincount(owner, minlength=len(reps))
    offset = np.cumsum(length) - length
    per_cell = length[code]
    positions = np.repeat(np.arange(n, dtype=np.int64), per_cell)
    before = np.repeat(np.cumsum(per_cell) - per_cell, per_cell)
    take = np.repeat(offset[code], per_cell) + (np.arange(len(positions)) - before)
    return positions, items[take]
