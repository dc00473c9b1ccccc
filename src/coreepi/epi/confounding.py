"""Adjusted rate ratios: a Poisson GLM with offset log(exposure).

A crude rate ratio can blame the wrong attribute: a version rolled out mostly
on one hardware generation makes that hardware look crash-prone. Fitting

    log E[crashes_cell] = log(node_days_cell) + β0 + β·[attribute = value] + Σ γ_b,level

over the cells of the cross-classified exposure (one cell per combination of
candidate attribute values) gives ``exp(β)``, the rate ratio of ``value`` vs
the rest adjusted for the other attributes (McCullagh & Nelder 1989 §6.2;
Breslow & Day 1987 vol. II ch. 4). Fits use ``statsmodels`` GLM with a
Poisson family and Wald intervals.

Crashes cluster on hosts. A Poisson model takes every crash as an independent
event, so three hosts that crash ten times each look like thirty independent
pieces of evidence and the model-based interval is far too narrow. Where the
exposure is known per host (the intervals, or the store's per-host sets), the
cells are split by host as well (the estimate is unchanged: a Poisson fit
depends on the cells only through the sums of each distinct design row) and
the interval and p-value use the cluster-robust (sandwich) covariance with the
host as the cluster (Liang & Zeger 1986; Cameron & Miller 2015, *A
practitioner's guide to cluster-robust inference*, J. Human Resources
50:317–372; statsmodels ``cov_type="cluster"``, with its small-sample
correction; computed from the fit on the summed cells, see :func:`_cluster_se`). The
sandwich can be too small when few clusters carry the
information (Cameron & Miller 2015 §VI), so the standard error used is the
larger of the robust and the model-based one: clustering can only widen the
interval (``method`` = ``poisson-glm-cluster``). Without per-host exposure the
model-based interval is used (``method`` = ``poisson-glm``).

Robustness. Poisson GLMs over sparse tables fail in known ways:

* **separation** — every crash of the group has the value (or none has):
  β → ±∞. Detected before fitting (a zero margin) and after it (an estimate
  or standard error beyond :attr:`EpiConfig.glm_max_abs_coef`, a
  ``PerfectSeparationError``/``PerfectSeparationWarning``);
* **collinearity** — a covariate that coincides with the target (kernel 6.1
  only ever ran on cpu B): the covariate is left out, and the note says so;
* **non-convergence** — a ``ConvergenceWarning`` on the target fit.

Adjustment fails closed. Under separation the GLM's estimate is infinite, but
an exact conditional method still bounds it: with the covariates as strata,
conditional on each stratum's crash count n_s, the crashes with the value
are x_s ~ Binomial(n_s, π_s), π_s = t1s·R / (t1s·R + t0s) (t1s, t0s: the
stratum's node-days with and without the value); the sum X = Σ x_s is
sufficient for the common rate ratio R, and its exact distribution (a
convolution of binomials) gives the exact conditional CI, p-value and
conditional MLE (Breslow & Day 1987 vol. II §3.4 and §7.4; Gart 1978;
Hirji 2006, *Exact Analysis of Discrete Data*, ch. 4). It is used whenever
the GLM separates (``method`` says which estimate it is). When neither can
estimate — no stratum holds both the value and another one, or a covariate
coincides with the value — confounding cannot be assessed: ``assessable``
is False and the attribution does not let the crude ratio alone name the
attribute.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from coreepi.epi.exact import exact_common_ratio

# statsmodels is imported where a GLM is fitted (:func:`adjusted_rate_ratio`), and
# only its GLM module, not ``statsmodels.api``: the report pays the import only when
# it adjusts a ratio.

__all__ = ["AdjustedRatio", "adjusted_rate_ratio", "exposure_cube"]


@dataclass(frozen=True)
class AdjustedRatio:
    """Adjusted rate ratio of ``attribute = value`` vs the rest, or why there is none."""

    attribute: str
    value: str
    irr: float | None
    lower: float | None
    upper: float | None
    p_value: float | None
    adjusted_for: tuple[str, ...]
    note: str | None = None
    method: str | None = None
    """``poisson-glm-cluster`` (cluster-robust by host), ``poisson-glm`` (model-based: no
    per-host exposure) or ``exact-conditional`` (None: no estimate)."""
    inseparable: tuple[str, ...] = ()
    """Covariates that coincide with the value in the exposure (cannot be told apart)."""

    @property
    def estimable(self) -> bool:
        """True when a model gave an estimate."""
        return self.irr is not None

    @property
    def assessable(self) -> bool:
        """Confounding by the covariates could be assessed: an estimate, and no covariate
        that coincides with the value."""
        return self.irr is not None and not self.inseparable


def exposure_cube(exposure: pd.DataFrame, attributes: Sequence[str]) -> pd.DataFrame:
    """Node-days per combination of ``attributes`` (unknown values kept as NaN).

    Computed once per window over every attribute any model may use; each
    group's model then aggregates this small table instead of the intervals.
    When ``exposure`` has a ``host_id`` column the cube is also split by host
    (``host_id`` is a column of the result), which makes the fits cluster-robust.
    """
    attrs = list(attributes)
    if "host_id" in exposure.columns:
        attrs = ["host_id", *attrs]
    if not attrs:
        return pd.DataFrame({"node_days": [float(exposure["node_days"].sum())]})
    return (
        exposure.groupby(attrs, observed=True, dropna=False, sort=False)["node_days"]
        .sum()
        .reset_index()
    )


def _dummies(values: pd.Series, weights: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Treatment-coded indicator columns; the reference is the most exposed level."""
    codes, uniques = pd.factorize(values.astype(object), sort=True)
    if len(uniques) < 2:
        return np.empty((len(values), 0)), []
    exposure_per_level = np.bincount(codes, weights=weights, minlength=len(uniques))
    ref = int(np.argmax(exposure_per_level))
    cols = [i for i in range(len(uniques)) if i != ref]
    mat = (codes[:, None] == np.array(cols)[None, :]).astype(np.float64)
    return mat, [str(uniques[i]) for i in cols]


def _model_cells(
    group_crashes: pd.DataFrame, cube: pd.DataFrame, model_attrs: list[str]
) -> tuple[pd.DataFrame, int]:
    """The model's cells: one row per combination of ``model_attrs`` (and host, when the
    cube has ``host_id``; ``group_crashes`` must then have it too) with exposure, with
    ``node_days`` and the group's ``crashes`` in it; plus the count of the group's crashes
    that fall in a combination without exposure (left out)."""
    keys = [*model_attrs, "host_id"] if "host_id" in cube.columns else model_attrs
    cells = cube.dropna(subset=model_attrs)
    cells = cells.groupby(keys, observed=True, sort=False)["node_days"].sum().reset_index()
    cells = cells.loc[cells["node_days"] > 0]
    crashes = group_crashes.dropna(subset=model_attrs)
    counts = crashes.groupby(keys, observed=True, sort=False).size().rename("crashes")
    cells = cells.join(counts, on=keys).fillna({"crashes": 0})
    return cells, len(crashes) - int(cells["crashes"].sum())


def _design(
    cells: pd.DataFrame, target: np.ndarray, covs: Sequence[str], weights: np.ndarray
) -> tuple[np.ndarray, list[str], list[str]]:
    """The design matrix (intercept, the target indicator, each covariate's dummies) and the
    covariates kept and dropped: one that would make the matrix rank-deficient (collinear
    with the target or an earlier covariate in these cells) is dropped."""
    base = np.column_stack([np.ones(len(cells)), target])
    kept: list[str] = []
    dropped: list[str] = []
    for c in covs:
        mat, _ = _dummies(cells[c], weights)
        if mat.shape[1] == 0:
            continue
        trial = np.column_stack([base, mat])
        if np.linalg.matrix_rank(trial) < trial.shape[1]:
            dropped.append(c)
            continue
        base = trial
        kept.append(c)
    return base, kept, dropped


def adjusted_rate_ratio(
    group_crashes: pd.DataFrame,
    cube: pd.DataFrame,
    attribute: str,
    value: str,
    covariates: Sequence[str],
    *,
    alpha: float = 0.05,
    max_abs_coef: float = 15.0,
) -> AdjustedRatio:
    """Rate ratio of ``attribute == value`` vs the rest, adjusted for ``covariates``.

    ``group_crashes``: the group's crashes with attribute columns (one row per
    crash). ``cube``: :func:`exposure_cube` over at least ``attribute`` and
    ``covariates``. Cells and crashes with an unknown value of any model
    attribute are left out. The Poisson GLM estimates it; where the GLM
    separates, the exact conditional method over the covariate strata does
    (:mod:`.exact`). Returns an :class:`AdjustedRatio` whose ``irr`` is None
    (with a ``note``) when neither can, and whose ``assessable`` is False
    then or when a covariate coincides with the value.
    """
    covs = [c for c in covariates if c != attribute]
    host_cells, lost = _model_cells(group_crashes, cube, [attribute, *covs])
    cells, row_of = _combinations(host_cells, [attribute, *covs])
    target = (cells[attribute].astype(object).astype(str) == value).to_numpy(dtype=np.float64)
    y = cells["crashes"].to_numpy(dtype=np.float64)
    weights = cells["node_days"].to_numpy(dtype=np.float64)
    notes: list[str] = []
    refining = [c for c in covs if _refines(cells, target, c, weights)]
    if refining:  # a subdivision of the value cannot confound it (microcode within a CPU)
        covs = [c for c in covs if c not in refining]
        notes.append(f"not adjusted for {', '.join(refining)}: it subdivides "
                     f"{attribute}={value} (a refinement, not a confounder)")
    base, kept, dropped = _design(cells, target, covs, weights)
    inseparable = tuple(c for c in dropped if _coincides(cells, target, c, weights))
    if dropped:
        notes.append(
            f"not adjusted for {', '.join(dropped)}: collinear with {attribute}={value} "
            "or with another covariate in this group's exposure (their effects cannot be "
            "told apart)"
        )
    if lost > 0:
        notes.append(f"{lost} crash(es) in attribute combinations without exposure left out")

    def exact(why: str) -> AdjustedRatio:
        return _exact(cells, target, covs, attribute, value, alpha, [why, *notes], inseparable)

    if float((y * target).sum()) == 0 or float((y * (1 - target)).sum()) == 0:
        where = "has" if float((y * (1 - target)).sum()) == 0 else "lacks"
        return exact(f"every crash of the group with a known {attribute} {where} "
                     f"{attribute}={value} (separation)")
    fit = _fit_glm(y, base, weights)
    if isinstance(fit, str):
        return exact(fit)
    glm, warned = fit
    coef, se = float(glm.params[1]), float(glm.bse[1])
    robust = row_of is not None and host_cells["host_id"].nunique() >= 2
    if robust:  # clustering only ever widens the interval (see the module docstring)
        se = max(se, _cluster_se(glm, base[row_of], host_cells))
    if (not (math.isfinite(coef) and math.isfinite(se)) or abs(coef) > max_abs_coef
            or se > max_abs_coef / 3):
        return exact(f"{attribute}={value} is (quasi-)separated in the Poisson GLM "
                     f"(log-ratio {coef:.3g}, s.e. {se:.3g})")
    notes += warned
    z = float(stats.norm.ppf(1 - alpha / 2))
    return AdjustedRatio(
        attribute=attribute, value=value, irr=math.exp(coef), lower=math.exp(coef - z * se),
        upper=math.exp(coef + z * se), p_value=float(2 * stats.norm.sf(abs(coef) / se)),
        adjusted_for=tuple(kept), note="; ".join(notes) or None,
        method="poisson-glm-cluster" if robust else "poisson-glm",
        inseparable=inseparable,
    )  # fmt: skip


def _combinations(
    host_cells: pd.DataFrame, model_attrs: list[str]
) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The cells summed over hosts (one per combination of ``model_attrs``), and for each
    host cell the row of its combination (None when the cells are not split by host). The
    Poisson estimate depends on the cells only through these sums, so it is fitted on them."""
    if "host_id" not in host_cells.columns:
        return host_cells, None
    by = host_cells.groupby(model_attrs, observed=True, sort=True)
    cells = by[["node_days", "crashes"]].sum().reset_index()
    return cells, by.ngroup().to_numpy(np.int64)


def _cluster_se(glm: Any, design: np.ndarray, host_cells: pd.DataFrame) -> float:
    """Cluster-robust (sandwich) standard error of the target coefficient, the host as the
    cluster: ``B M B`` with B the model-based (X'WX)^-1 of the fit, M = Σ_h S_h S_h' over
    the hosts' summed scores ``S_h = Σ x_i (y_i - μ_i)``, times statsmodels' small-sample
    factor G/(G-1)·(N-1)/(N-k) (G hosts, N host cells, k parameters) — what statsmodels'
    ``cov_type="cluster"`` gives when the GLM is fitted on the host cells (a test checks it),
    without fitting on them (Liang & Zeger 1986; Cameron & Miller 2015 §II–III)."""
    y = host_cells["crashes"].to_numpy(np.float64)
    mu = host_cells["node_days"].to_numpy(np.float64) * np.exp(design @ glm.params)
    codes, hosts = pd.factorize(host_cells["host_id"])
    scores = design * (y - mu)[:, None]
    per_host = np.column_stack([np.bincount(codes, weights=col, minlength=len(hosts))
                                for col in scores.T])
    bread = np.asarray(glm.normalized_cov_params, dtype=np.float64)
    g, n, k = len(hosts), len(y), design.shape[1]
    cov = bread @ (per_host.T @ per_host) @ bread * (g / (g - 1)) * ((n - 1) / (n - k))
    return math.sqrt(max(float(cov[1, 1]), 0.0))


def _refines(cells: pd.DataFrame, target: np.ndarray, cov: str, weights: np.ndarray) -> bool:
    """Every level of the covariate lies wholly inside or wholly outside the value, and at
    least two lie inside: it subdivides the value (and is determined by it outside)."""
    codes, _ = pd.factorize(cells[cov].astype(object))
    inside = np.bincount(codes, weights=weights * target)
    total = np.bincount(codes, weights=weights)
    share = np.divide(inside, total, out=np.zeros_like(total), where=total > 0)
    whole = np.isclose(share, 0.0) | np.isclose(share, 1.0)
    return bool(whole.all() and int(np.isclose(share, 1.0).sum()) >= 2)


def _coincides(cells: pd.DataFrame, target: np.ndarray, cov: str, weights: np.ndarray) -> bool:
    """The covariate alone is collinear with the target indicator (they cannot be told apart)."""
    mat, _ = _dummies(cells[cov], weights)
    trial = np.column_stack([np.ones(len(cells)), target, mat])
    return bool(np.linalg.matrix_rank(trial) < trial.shape[1])


def _fit_glm(y: np.ndarray, base: np.ndarray, weights: np.ndarray) -> tuple[Any, list[str]] | str:
    """The Poisson GLM fit and its warnings as notes, or why it failed."""
    from statsmodels.genmod.families import Poisson
    from statsmodels.genmod.generalized_linear_model import GLM
    from statsmodels.tools.sm_exceptions import (
        ConvergenceWarning,
        PerfectSeparationError,
        PerfectSeparationWarning,
    )

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = GLM(y, base, family=Poisson(), offset=np.log(weights)).fit()
    except (PerfectSeparationError, np.linalg.LinAlgError, ValueError) as err:
        return f"the Poisson GLM failed ({type(err).__name__})"
    warned = {type(w.message) for w in caught}
    notes = []
    if PerfectSeparationWarning in warned:
        notes.append("a covariate level is separated (zero crashes); its own estimate is unbounded")
    if ConvergenceWarning in warned:
        notes.append("the GLM reported non-convergence; treat the adjusted ratio with care")
    return fit, notes


def _exact(
    cells: pd.DataFrame, target: np.ndarray, strata: list[str], attribute: str, value: str,
    alpha: float, notes: list[str], inseparable: tuple[str, ...],
) -> AdjustedRatio:
    """The exact conditional ratio over the covariate strata, or why it is not estimable."""
    y = cells["crashes"].to_numpy(np.float64)
    t = cells["node_days"].to_numpy(np.float64)
    key = (cells[strata].astype(object).astype(str).agg("\x1f".join, axis=1) if strata
           else pd.Series("", index=cells.index))
    frame = pd.DataFrame({"s": key.to_numpy(), "x": y * target, "n": y, "t1": t * target,
                          "t0": t * (1 - target)}).groupby("s", sort=False).sum()
    est = exact_common_ratio(frame["x"].round().astype(np.int64), frame["n"].round().astype(
        np.int64), frame["t1"], frame["t0"], alpha=alpha)
    if est is None:
        notes = [*notes, "no stratum of the covariates holds both the value and another one: "
                 "confounding cannot be assessed"]
        return AdjustedRatio(attribute, value, None, None, None, None, tuple(strata),
                             "; ".join(notes), None, inseparable)
    return AdjustedRatio(
        attribute=attribute, value=value, irr=est.ratio, lower=est.lower,
        upper=None if math.isinf(est.upper) else est.upper, p_value=est.p_value,
        adjusted_for=tuple(strata),
        note="; ".join([*notes, f"exact conditional estimate over {est.strata} strata"]),
        method="exact-conditional", inseparable=inseparable,
    )  # fmt: skip
