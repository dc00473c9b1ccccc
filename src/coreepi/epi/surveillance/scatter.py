"""The signature evidence of a host's crash: scattered signatures are the hallmark of bad hardware.

A healthy host crashes in the signatures of the code it runs, and it runs
the same code day after day: its crashes repeat a few signatures, each a
group the fleet shares. A faulty machine (a CPU that computes wrongly, a
flipping DIMM) crashes wherever its code happens to be when the fault
strikes: its signatures scatter, and they follow neither the fleet's
frequencies nor the host's own past (Nightingale, Douceur & Orgovan,
EuroSys 2011: CPU and DRAM faults recur on a machine, in different
programs and stacks).

Under H0 a host's signature shares are drawn once from a Dirichlet centred
on its stratum's shares ``q`` with concentration ``a`` (the
Dirichlet-multinomial, Mosimann 1962, *Biometrika* 49:65), so its ``n+1``-th
crash has the Pólya-urn predictive probability (Blackwell & MacQueen 1973,
*Ann. Stat.* 1:353)::

    P0(s | its n earlier crashes, c_s of them in s) = (a·q_s + c_s) / (a + n)

Under H1 every crash is in any of the ``K + 1`` signatures (the ``K`` seen
and one unseen) alike. The per-crash log-likelihood ratio is
``ln((1/(K+1)) / P0(s | history))``: a private or rare signature, or one
the host has not crashed in before, is evidence of hardware; a signature
the whole fleet shares, or one the host keeps repeating, is evidence
against. The product of predictive probabilities is the Dirichlet-
multinomial marginal likelihood of the host's sequence, so the sum stays a
likelihood ratio against a composite (mixture) null, and Wald's and
Ville's bounds on the false-alarm probability still hold (Robbins 1970,
*Ann. Math. Stat.* 41:1397, mixture likelihood ratios).

``a`` is estimated from the fleet by the method of moments on repeated
pairs: if ``R`` is the share of a host's crash pairs that fall in one
signature and ``Q = Σ q_s²`` the share expected without host-level
clustering, the Dirichlet-multinomial gives ``R = (a·Q + 1)/(a + 1)``, so
``a = (1 − R)/(R − Q)`` (Mosimann 1962, §3). A fleet whose hosts do not
cluster (``R ≤ Q``) gets ``a = ∞``: the fleet's shares alone.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["polya_concentration", "signature_llr"]

# the largest concentration used: past it the urn is the fleet's shares to 1e-6
MAX_CONCENTRATION = 1e6
# the smallest: the moment estimator from a few pairs can reach 0, which would make a
# host's first crash in a new signature worth ln((n + a)/a) → ∞ nats
MIN_CONCENTRATION = 0.5


def polya_concentration(host: pd.Series, signature: pd.Series) -> float:
    """The Dirichlet-multinomial concentration ``a`` of the crashes' signatures
    per host (one row a crash; moment estimator on repeated pairs, see the
    module). ``MAX_CONCENTRATION`` when no host has two crashes or the hosts
    do not cluster.

    Example (checked by the tests): two hosts, ``x x`` and ``y y``: R = 1,
    Q = ½, so a = 0 (each host repeats itself exactly); hosts ``x y`` and
    ``y x``: R = 0 < Q, so a = MAX_CONCENTRATION.
    """
    frame = pd.DataFrame({"h": host.to_numpy(), "s": signature.fillna("").to_numpy()})
    if frame.empty:
        return MAX_CONCENTRATION
    c = frame.groupby(["h", "s"]).size().to_numpy(dtype=np.float64)
    n = frame.groupby("h").size().to_numpy(dtype=np.float64)
    pairs = float((n * (n - 1)).sum())
    if pairs <= 0:
        return MAX_CONCENTRATION
    repeat = float((c * (c - 1)).sum()) / pairs
    shares = frame["s"].value_counts(normalize=True).to_numpy()
    expected = float((shares**2).sum())
    if repeat <= expected:
        return MAX_CONCENTRATION
    return min((1.0 - repeat) / (repeat - expected), MAX_CONCENTRATION)


def signature_llr(span: pd.DataFrame, strata: pd.Series, concentration: float) -> pd.Series:
    """Per crash of ``span`` (columns ``host_id``, ``signature``, ``t`` in
    days; any index): the LLR (nats) of its signature, H1 over H0, as in the
    module: ``ln((1/(K+1)) / ((a·q_s + c_s)/(a + n)))``, ``c_s`` and ``n``
    the host's crashes before it (in ``span``, by ``t``), ``q_s`` the share
    of ``s`` among the other hosts of its stratum (``strata``: host → stratum)
    with ½ added to each of the ``K`` signatures seen and one unseen, ``a``
    ``concentration`` clipped to [``MIN_CONCENTRATION``, ``MAX_CONCENTRATION``]
    (at the top, the fleet's shares alone). Returned on ``span``'s index.
    """
    if span.empty:
        return pd.Series(dtype=np.float64, index=span.index)
    st = span["host_id"].map(strata).fillna("")
    per = pd.DataFrame({"st": st.to_numpy(), "sig": span["signature"].fillna("").to_numpy(),
                        "h": span["host_id"].to_numpy(), "t": span["t"].to_numpy()})
    k = per["sig"].nunique()
    in_st = per.groupby(["st", "sig"])["h"].transform("size").to_numpy()
    n_st = per.groupby("st")["h"].transform("size").to_numpy()
    mine = per.groupby(["h", "sig"])["t"].transform("size").to_numpy()
    n_h = per.groupby("h")["t"].transform("size").to_numpy()
    q = (in_st - mine + 0.5) / (n_st - n_h + 0.5 * (k + 1))
    # the host's history before each crash: ranks in time within host and (host, signature)
    order = np.lexsort((np.arange(len(per)), per["t"].to_numpy()))
    ranked = per.iloc[order]
    before_n = np.empty(len(per))
    before_c = np.empty(len(per))
    before_n[order] = ranked.groupby("h").cumcount().to_numpy()
    before_c[order] = ranked.groupby(["h", "sig"]).cumcount().to_numpy()
    a = min(max(concentration, MIN_CONCENTRATION), MAX_CONCENTRATION)
    p0 = q if a >= MAX_CONCENTRATION else (a * q + before_c) / (a + before_n)
    return pd.Series(-math.log(k + 1) - np.log(p0), index=span.index)
