"""The Poisson CUSUM in continuous time, with node-time as the offset.

Crashes of one series (a group, a host) arrive as a Poisson process whose
in-control intensity is ``λ0`` crashes per node-day of exposure. Against
the alternative ``r·λ0`` the log-likelihood ratio of an exposure increment
``dE`` without a crash is ``-(r - 1)·λ0·dE`` and of a crash ``ln r``; the
CUSUM keeps ``S = max(0, S + LLR)`` and alarms when ``S ≥ h`` (Page 1954;
the Poisson CUSUM: Lucas 1985, *Technometrics* 27:129–144; with a
time-varying expected count, Rogerson & Yamada 2004, *Stat. Med.*
23:2195–2214). Here the "time" is node-time, so a fleet that doubles in
size doubles the expected count, and a drained host stops accumulating.

Marked crashes (e.g. hardware-indicative ones) are a second, independent
Poisson stream with their own ``λ0`` and ``r``; the LLR of the pair is the
sum, so one statistic watches both (the SPRT of Wald 1945 is the same sum
without the reset at 0).

Overdispersion: when the in-control counts are overdispersed by a factor
``φ`` (quasi-Poisson, Var = φ·μ), every LLR increment is divided by ``φ``
(the quasi-likelihood scaling used by Farrington et al. 1996 and Noufaily
et al. 2013, *Stat. Med.* 32:1206–1222).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["CusumRun", "delay_bound_days", "poisson_cusum", "quasi_dispersion"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CusumRun:
    """One CUSUM pass: ``statistic[i]`` is S just after event ``i``;
    ``alarms`` are the indices of events where S first reached ``h`` (after
    an alarm S restarts at 0, so a persisting shift alarms again);
    ``run_starts[j]`` is the event where the run that ended in ``alarms[j]``
    left 0 (the estimated start of the shift)."""

    statistic: FloatArray
    alarms: npt.NDArray[np.int64]
    run_starts: npt.NDArray[np.int64]


def poisson_cusum(
    exposure_at: npt.ArrayLike,
    rate0: float,
    ratio: float,
    threshold: float,
    *,
    marked: npt.ArrayLike | None = None,
    marked_rate0: float = 0.0,
    marked_ratio: float = 1.0,
    dispersion: float = 1.0,
    exposure_start: float | None = None,
) -> CusumRun:
    """Run the CUSUM over events at cumulative exposure ``exposure_at`` (node-days, sorted).

    ``rate0`` / ``ratio``: in-control crashes per node-day and the shift to
    detect for unmarked events; ``marked`` (bool per event) with
    ``marked_rate0`` / ``marked_ratio`` for the marked stream. ``threshold``
    is ``h`` (in nats). ``exposure_start`` is the exposure where monitoring
    begins (default: the first event's). Raises ValueError on a ratio ≤ 1
    for the unmarked stream (nothing to detect), a negative rate or a
    dispersion < 1.

    Example (checked by the tests): λ0 = 1/day, r = 2, h = 2, events at
    exposure 0.1, 0.2, 0.3, 2.0: S = 0.693, 1.286, 1.879, then
    max(0, 1.879 - 1.7) + 0.693 = 0.872 → no alarm; a fourth event at
    0.4 instead gives 2.472 → alarm at index 3.
    """
    if (min(ratio, marked_ratio) < 1 or max(ratio, marked_ratio) <= 1 or rate0 < 0
            or marked_rate0 < 0 or dispersion < 1):
        raise ValueError(f"CUSUM parameters: ratios {ratio}, {marked_ratio} must be >= 1 and "
                         f"one > 1, rates >= 0, dispersion {dispersion} >= 1")
    e = np.asarray(exposure_at, dtype=np.float64)
    n = len(e)
    mark = np.zeros(n, bool) if marked is None else np.asarray(marked, dtype=bool)
    drift = ((ratio - 1) * rate0 + (marked_ratio - 1) * marked_rate0) / dispersion
    gain = np.where(mark, np.log(marked_ratio), np.log(ratio)) / dispersion
    gaps = np.diff(e, prepend=e[0] if exposure_start is None or n == 0 else exposure_start)
    loss = drift * np.maximum(gaps, 0.0)
    stat = np.empty(n)
    alarms: list[int] = []
    starts: list[int] = []
    s, start = 0.0, 0
    # a recursion (S depends on its own floor at 0): one pass in Python, ~1 µs an event
    for i in range(n):
        s -= loss[i]
        if s <= 0.0:
            s, start = 0.0, i
        s += gain[i]
        stat[i] = s
        if s >= threshold:
            alarms.append(i)
            starts.append(start)
            s = 0.0
    return CusumRun(stat, np.asarray(alarms, dtype=np.int64), np.asarray(starts, dtype=np.int64))


def quasi_dispersion(counts: npt.ArrayLike, expected: npt.ArrayLike) -> float:
    """Pearson dispersion ``φ = Σ (x - μ)² / μ / (n - 1)`` of counts against
    their expected values, floored at 1 (quasi-Poisson; Farrington et al.
    1996, *JRSS A* 159:547–563, §3.2). Bins with μ = 0 are left out; fewer
    than two bins give 1."""
    x, mu = np.asarray(counts, np.float64), np.asarray(expected, np.float64)
    keep = mu > 0
    if keep.sum() < 2:
        return 1.0
    # divide only the kept bins: a store younger than the baseline has μ = 0 days
    chi2 = float((((x[keep] - mu[keep]) ** 2) / mu[keep]).sum())
    return float(max(1.0, chi2 / (keep.sum() - 1)))


def delay_bound_days(rate0: float, ratio: float, arl0_days: float) -> float:
    """The least expected delay (days) to detect a Poisson rate stepping from
    ``rate0`` to ``ratio``·rate0 crashes per day, for any detector whose mean
    time between false alarms is ``arl0_days``: ``ln(ARL0) / KL``, with
    ``KL = rate0·(r·ln r − r + 1)`` nats per day, the Kullback–Leibler
    information a day of the shifted process gives (Lorden 1971, *Ann. Math.
    Stat.* 42:1897–1908: the worst-case delay is ≥ ln(ARL0)/KL asymptotically;
    the CUSUM attains it, Moustakides 1986, *Ann. Stat.* 14:1379–1387).
    Raises ValueError unless rate0 > 0, ratio > 0 and ≠ 1, arl0_days > 1.

    Example (checked by the tests): 2 crashes/day tripling, one false alarm
    per 1,000 group-weeks (ARL0 = 7,000 days): ln 7000 / (2·(3 ln 3 − 2)) = 3.41 days.
    """
    if not (rate0 > 0 and ratio > 0 and ratio != 1 and arl0_days > 1):
        raise ValueError(f"delay bound: need rate0 > 0, ratio > 0 and != 1, arl0_days > 1; "
                         f"got {rate0}, {ratio}, {arl0_days}")
    kl = rate0 * (ratio * np.log(ratio) - ratio + 1)
    return float(np.log(arl0_days) / kl)
