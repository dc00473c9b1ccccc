"""Wald's sequential probability ratio test for a Poisson stream of marked events.

One host's crashes arrive on its own node-time clock. Under H0 the host is
like its stratum: crashes at ``λ0`` per node-day, each hardware-indicative
with probability ``p0``; under H1 it is faulty: ``ρ·λ0``, each
hardware-indicative with probability ``p1``. The log-likelihood ratio of
the stream (Wald 1945, *Ann. Math. Stat.* 16:117–186, §3; a Poisson process
with independent marks) is the sum of

* ``-(ρ - 1)·λ0·dE`` for every node-day ``dE`` that passes (the rate term:
  no crash is evidence of health);
* ``ln ρ`` for every crash (the rate term);
* ``ln(p1/p0)`` for a hardware-indicative crash and ``ln((1-p1)/(1-p0))``
  for another (the phenotype-share term).

Wald's boundaries follow from the error rates: accept H1 (alarm) when the
sum reaches ``A = ln((1 - β)/α)``, accept H0 when it falls to
``B = ln(β/(1 - α))`` (Wald 1945, eq. 3.2–3.3: the actual error rates are
then at most α/(1-β) and β/(1-α)). Monitoring does not stop at "H0": the
test starts again at 0, so a host that turns bad later is caught (the
repeated SPRT; Page's CUSUM is its limit ``B → 0``: Siegmund 1985,
*Sequential Analysis* §2.6). With repetition, α is the false-alarm
probability of one test, not of a host's whole life: a host runs about one
test per ``|B| / ((ρ - 1)·λ0)`` node-days of quiet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["SprtRun", "marked_poisson_sprt", "wald_bounds"]

FloatArray = npt.NDArray[np.float64]


def wald_bounds(alpha: float, beta: float) -> tuple[float, float]:
    """``(A, B)`` in nats: ``ln((1-β)/α)`` and ``ln(β/(1-α))`` (Wald 1945).
    Raises ValueError unless 0 < α, β and α + β < 1.

    Example: α = 1e-5, β = 0.1 → (11.408, -2.303).
    """
    if not (alpha > 0 and beta > 0 and alpha + beta < 1):
        raise ValueError(f"SPRT error rates: need 0 < alpha, beta and alpha + beta < 1, "
                         f"got alpha={alpha}, beta={beta}")
    return math.log((1 - beta) / alpha), math.log(beta / (1 - alpha))


@dataclass(frozen=True)
class SprtRun:
    """One pass: ``statistic[i]`` is the LLR just after event ``i``;
    ``alarm`` the index of the event where it first reached ``A`` (-1:
    none); ``restarts`` how many tests ended accepting H0 before it."""

    statistic: FloatArray
    alarm: int
    restarts: int


def marked_poisson_sprt(
    exposure_at: npt.ArrayLike,
    marked: npt.ArrayLike,
    rate0: float,
    ratio: float,
    share0: float,
    share1: float,
    alpha: float,
    beta: float,
    *,
    exposure_start: float = 0.0,
    extra: npt.ArrayLike | None = None,
) -> SprtRun:
    """The repeated SPRT over events at cumulative exposure ``exposure_at``
    (node-days, sorted, ≥ ``exposure_start``), ``marked`` (bool per event:
    hardware-indicative). ``rate0`` crashes per node-day, ``ratio`` ρ > 1,
    ``share0`` p0 and ``share1`` p1 in (0, 1). Stops at the first alarm.
    ``extra``: a further LLR term per event (nats; another independent
    mark, e.g. how unusual the crash's signature is). Raises ValueError on
    parameters out of range.

    Example (checked by the tests): λ0 = 0.2/day, ρ = 3, p0 = 0.01, p1 = 0.5,
    α = 1e-3, β = 0.1 (A = 6.80, B = −2.30); crashes at 1, 2 (marked), 2.5
    (marked): LLR 1.099 − 0.4 − 0.683 = 0.015, then 0.015 − 0.4 + 1.099 +
    3.912 = 4.626, then 4.626 − 0.2 + 5.011 = 9.437 ≥ A: alarm at index 2.
    """
    if not (ratio > 1 and rate0 >= 0 and 0 < share0 < 1 and 0 < share1 < 1):
        raise ValueError(f"SPRT parameters: need ratio > 1, rate0 >= 0 and shares in (0, 1), "
                         f"got ratio={ratio}, rate0={rate0}, p0={share0}, p1={share1}")
    upper, lower = wald_bounds(alpha, beta)
    e = np.asarray(exposure_at, dtype=np.float64)
    mark = np.asarray(marked, dtype=bool)
    drift = (ratio - 1) * rate0
    gain = math.log(ratio) + np.where(mark, math.log(share1 / share0),
                                      math.log((1 - share1) / (1 - share0)))
    if extra is not None:
        gain = gain + np.asarray(extra, dtype=np.float64)
    loss = drift * np.diff(e, prepend=exposure_start)
    stat = np.empty(len(e))
    s, restarts = 0.0, 0
    for i in range(len(e)):  # a recursion with restarts: one pass, ~1 µs an event
        if s - loss[i] > lower:
            s -= loss[i]
        else:
            # the quiet gap ended this test at B; the tests restarted at 0 after it
            # each end after |B| / drift node-days: what is left counts against the last
            cycles, left = divmod(loss[i] - (s - lower), -lower)
            restarts += 1 + int(cycles)
            s = -left
        s += gain[i]
        stat[i] = s
        if s >= upper:
            return SprtRun(stat[: i + 1], i, restarts)
        if s <= lower:
            s, restarts = 0.0, restarts + 1
    return SprtRun(stat, -1, restarts)
