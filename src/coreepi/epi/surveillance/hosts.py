"""Hardware-suspect hosts, online: Wald's SPRT on each host's own node-time.

Each host's crashes are tested as they arrive, on its own clock
(:class:`~.clock.HostClocks`: a host that was off, or drained, accumulates
nothing), by :func:`~.sprt.marked_poisson_sprt`: H0 "the host crashes like
its stratum" (rate ``λ0`` per node-day, hardware-indicative share ``p0``)
against H1 "the host is faulty" (``host_ratio``·λ0, share
``host_hw_share``). ``λ0`` and ``p0`` are the other hosts' of the same
stratum (the value of ``host_stratum``, e.g. the CPU model, that the host
ran longest; the whole fleet when the exposure has no such attribute) over
the span read — leave-one-out, so a bad host does not raise its own bar —
with ½ added to the hardware count so a stratum without one still has
p0 > 0. The boundaries come from the error rates ``host_alpha`` and
``host_beta`` (Wald 1945); a host is flagged at the crash that carries the
statistic over A, not at the end of a window. Sources: Wald (1945)
*Ann. Math. Stat.* 16:117–186; the hardware-indicative share as evidence:
Nightingale, Douceur & Orgovan (EuroSys 2011: after one CPU-subsystem
crash, the chance of another is 1 in 3.3).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd

from coreepi.epi.surveillance.clock import FleetClock, HostClocks, days
from coreepi.epi.surveillance.groups import windows
from coreepi.epi.surveillance.models import Detection, DetectorParams, ratio_evidence
from coreepi.epi.surveillance.scatter import MAX_CONCENTRATION, polya_concentration, signature_llr
from coreepi.epi.surveillance.sprt import SprtRun, marked_poisson_sprt, wald_bounds

__all__ = ["clip_drained", "drain_recheck", "host_runs", "suspect_hosts"]


def clip_drained(
    exposure: pd.DataFrame,
    drained: dict[str, pd.Timestamp],
    ended: Iterable[tuple[str, pd.Timestamp, pd.Timestamp]] = (),
) -> pd.DataFrame:
    """``exposure`` without the node-time of drains: each drained host's
    intervals cut at its drain time (``drained``: ``host_id → drained_at``,
    UTC), and each ended drain's span ``(host_id, drained_at, undrained_at)``
    taken out of its host's intervals (an interval across it splits in two):
    a drained host accrues no node-time until it is put back."""
    # a current drain is open: its span runs to the end of time
    spans = [(h, pd.Timestamp(a), pd.Timestamp.max.tz_localize("UTC")) for h, a in drained.items()]
    spans += [(h, pd.Timestamp(a), pd.Timestamp(b)) for h, a, b in ended]
    if not spans or exposure.empty:
        return exposure
    out = exposure
    for host, start, end in spans:
        hit = (out["host_id"] == host) & (out["start"] < end) & (out["end"] > start)
        if not hit.any():
            continue
        rows = out[hit]
        before = rows.assign(end=rows["end"].clip(upper=start))
        after = rows.assign(start=rows["start"].clip(lower=end))
        # the pieces keep their interval's index: sorting on it keeps the frame's order
        out = pd.concat([out[~hit], before, after]).sort_index(kind="stable")
        out = out[out["end"] > out["start"]]
    if out is exposure:
        return exposure
    if "seconds" in out.columns:
        out = out.assign(seconds=(out["end"] - out["start"]).dt.total_seconds())
    return out.reset_index(drop=True)


def _hardware(crashes: pd.DataFrame) -> np.ndarray:
    col = crashes.get("hardware_phenotypes")
    if col is None or not len(crashes):  # an empty frame's column has no .str (float dtype)
        return np.zeros(len(crashes), bool)
    return (col.str.len().fillna(0) > 0).to_numpy()


def _strata(exposure: pd.DataFrame, column: str) -> pd.Series:
    """Each host's stratum: the value of ``column`` it ran longest (one
    stratum, ``""``, when the exposure has no such column)."""
    hosts = pd.unique(exposure["host_id"])
    if not column or column not in exposure.columns:
        return pd.Series("", index=hosts, dtype=object)
    dur = (exposure["end"] - exposure["start"]).dt.total_seconds()
    by = pd.DataFrame({"host_id": exposure["host_id"], "v": exposure[column].astype(str),
                       "d": dur}).groupby(["host_id", "v"], sort=False)["d"].sum()
    top = by.sort_values(ascending=False).reset_index().drop_duplicates("host_id")
    return top.set_index("host_id")["v"].reindex(hosts).fillna("")


def _own(frame: pd.DataFrame, exposure: pd.DataFrame, clocks: HostClocks, strata: pd.Series,
         bs: float, t_now: float) -> pd.DataFrame:
    """Per host: ``stratum``, node-days ``e0`` at ``bs`` and ``e`` over the
    span, crashes ``n`` and ``hw`` in it, and its stratum's ``rate0`` and
    ``share0`` without it (leave-one-out, so a bad host does not raise its
    own bar; ½ added so a stratum without a hardware crash has p0 > 0)."""
    own = pd.DataFrame({"stratum": strata})
    ids = own.index.to_numpy()
    own["e0"] = clocks.at(ids, np.full(len(ids), bs))
    own["e"] = clocks.at(ids, np.full(len(ids), t_now)) - own["e0"]
    counts = frame.groupby("host_id")["hw"].agg(["size", "sum"])
    own["n"] = counts["size"].reindex(own.index).fillna(0)
    own["hw"] = counts["sum"].reindex(own.index).fillna(0)
    rest = own.groupby("stratum")[["e", "n", "hw"]].transform("sum") - own[["e", "n", "hw"]]
    own["rate0"] = rest["n"].clip(lower=0.5) / rest["e"].clip(lower=1e-9)
    own["share0"] = (rest["hw"] + 0.5) / (rest["n"] + 1.0)
    return own


def host_runs(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams,
    *,
    min_reach: float | None = None,
) -> Iterator[tuple[str, pd.DataFrame, SprtRun, pd.Series]]:
    """The SPRT of every host that could reach ``min_reach`` nats (default:
    Wald's A of ``params``) over baseline + window up to ``now``:
    ``(host_id, its crashes in the span by time — columns captured_at,
    signature, t, hw, e (its node-days), sig_llr —, the run, its row of
    the host table: stratum, e0, rate0, share0 …)``, by host_id.

    A crash adds ``ln ρ``, the phenotype term and the signature term
    (:func:`~.scatter.signature_llr`, when ``host_signatures``); a host
    whose positive terms add up to less than ``min_reach`` cannot reach it
    (node-time only subtracts) and is skipped without running.
    """
    bs, _, t_now = windows(now, params)
    t = days(crashes["captured_at"])
    span = (t >= bs) & (t <= t_now)
    frame = crashes.loc[span, ["host_id", "captured_at", "signature"]].assign(
        t=t[span], hw=_hardware(crashes)[span])
    if FleetClock.from_exposure(exposure).between(bs, t_now) <= 0 or frame.empty:
        return
    clocks = HostClocks.from_exposure(exposure)
    strata = _strata(exposure, params.host_stratum)
    own = _own(frame, exposure, clocks, strata, bs, t_now)
    r, p1 = params.host_ratio, params.host_hw_share
    if params.host_signatures:
        a = (polya_concentration(frame["host_id"], frame["signature"]) if params.host_scatter
             else MAX_CONCENTRATION)
        frame["sig_llr"] = signature_llr(frame, strata, a)
    else:
        frame["sig_llr"] = 0.0
    share0 = frame["host_id"].map(own["share0"]).to_numpy()
    gain = (np.log(r) + np.where(frame["hw"], np.log(p1 / share0), np.log((1 - p1) / (1 - share0)))
            + frame["sig_llr"].to_numpy())
    reach = pd.Series(np.clip(gain, 0, None)).groupby(frame["host_id"].to_numpy()).sum()
    upper = wald_bounds(params.host_alpha, params.host_beta)[0] if min_reach is None else min_reach
    frame = frame[frame["host_id"].isin(reach.index[reach >= upper])].sort_values(["host_id", "t"])
    frame["e"] = clocks.at(frame["host_id"].to_numpy(), frame["t"].to_numpy())
    for host, g in frame.groupby("host_id", sort=True):
        h = own.loc[host]
        yield str(host), g, marked_poisson_sprt(
            g["e"].to_numpy(), g["hw"].to_numpy(), float(h["rate0"]), r, float(h["share0"]), p1,
            params.host_alpha, params.host_beta, exposure_start=float(h["e0"]),
            extra=g["sig_llr"].to_numpy()), h


def suspect_hosts(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams,
) -> list[Detection]:
    """Hosts whose SPRT reached Wald's upper boundary over baseline + window up to ``now``.

    One detection per host, at the crash that tipped it. Evidence, counted
    over the span read up to ``now``, so an alert refreshed at every
    evaluation carries the host's current counts, not those of the moment it
    tipped: ``since`` (ISO UTC: where those counts start — ``now`` − baseline
    − window, or the host's first node-time or crash when later, e.g. on a
    store younger than the span, so that "N crashes since D in E node-days"
    describes one span; :func:`_counted_since`), ``crashes``
    and ``hardware_crashes``, ``node_days`` (the host's), ``expected``
    (crashes at its stratum's rate in those node-days), ``signatures``
    (distinct); at the tip: ``alarm_crashes`` and ``alarm_hardware_crashes``
    (the crashes up to the one that tipped it), ``statistic`` (the LLR
    there, nats), ``signature_llr`` (the signature terms' sum up to it,
    nats); ``threshold`` (A), ``rate0`` (the stratum's crashes per node-day,
    without the host), ``share0`` (its hardware-indicative share),
    ``stratum`` (the ``host_stratum`` value; "" for the whole fleet).
    """
    upper, _ = wald_bounds(params.host_alpha, params.host_beta)
    start = now - pd.Timedelta(days=params.baseline_days + params.window_days)
    first_on = exposure.groupby("host_id")["start"].min() if len(exposure) else pd.Series()
    out: list[Detection] = []
    for host, g, run, h in host_runs(crashes, exposure, now, params):
        if run.alarm < 0:
            continue
        i = run.alarm
        e_h = float(h["e"])
        since = _counted_since(start, first_on.get(host), g["captured_at"].iloc[0])
        out.append(Detection(
            "hardware-suspect-host", {"host_id": host}, g["captured_at"].iloc[i],
            {"since": since.isoformat(), "crashes": len(g),
             "hardware_crashes": int(g["hw"].sum()),
             "node_days": e_h, "expected": float(h["rate0"]) * e_h,
             "signatures": int(g["signature"].nunique()),
             "alarm_crashes": i + 1, "alarm_hardware_crashes": int(g["hw"].iloc[: i + 1].sum()),
             "statistic": float(run.statistic[i]), "threshold": upper,
             "signature_llr": float(g["sig_llr"].iloc[: i + 1].sum()),
             "rate0": float(h["rate0"]), "share0": float(h["share0"]),
             "stratum": str(h["stratum"])}))
    return out


def _counted_since(start: pd.Timestamp, first_on: pd.Timestamp | None,
                   first_crash: pd.Timestamp) -> pd.Timestamp:
    """Where a host's counts over the span from ``start`` begin: ``start``, or
    the host's first node-time (``first_on``, None without exposure) or first
    crash in the span, whichever comes first, when that is later (before it
    the host has neither node-time nor crashes to count)."""
    seen = first_crash if first_on is None or pd.isna(first_on) else min(first_on, first_crash)
    return max(start, seen)


def drain_recheck(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    host_id: str,
    drained_at: pd.Timestamp,
    now: pd.Timestamp,
    params: DetectorParams,
) -> dict[str, float | int | str]:
    """Did the drained host's crash groups stop with it, or go on elsewhere?

    The host's signatures over the ``baseline_days`` before the drain; the
    other hosts' crashes in those signatures before and after the drain,
    each over the other hosts' node-time of its span, compared by the exact
    rate ratio (after / before, :func:`coreepi.epi.rates.rate_ratio`).
    ``verdict``: ``continues-elsewhere`` when the others' rate rose (lower
    95% limit > 1), ``stopped-with-host`` when the host held most (≥ ½) of
    those crashes before and the others' rate did not rise, else
    ``undetermined`` (also before any node-time has passed since the drain).
    """
    from coreepi.epi.rates import rate_ratio

    t_d, t_now = float(days(drained_at)[0]), float(days(now)[0])
    t0 = t_d - params.baseline_days
    t = days(crashes["captured_at"])
    mine = crashes["host_id"].to_numpy() == host_id
    before = (t >= t0) & (t < t_d)
    sigs = set(crashes["signature"][mine & before].dropna().unique())
    in_sigs = crashes["signature"].isin(sigs).to_numpy()
    others = FleetClock.from_exposure(exposure[exposure["host_id"] != host_id])
    x_before = int((in_sigs & before & ~mine).sum())
    x_after = int((in_sigs & (t >= t_d) & (t <= t_now) & ~mine).sum())
    e_before, e_after = others.between(t0, t_d), others.between(t_d, t_now)
    host_before = int((in_sigs & before & mine).sum())
    rr = rate_ratio(x_after, e_after, x_before, e_before)
    lower = float(rr.lower)
    share = host_before / max(host_before + x_before, 1)
    if e_after > 0 and lower > 1:
        verdict = "continues-elsewhere"
    elif e_after > 0 and share >= 0.5:
        verdict = "stopped-with-host"
    else:
        verdict = "undetermined"
    return {"host_id": host_id, "signatures": len(sigs), "host_crashes_before": host_before,
            "others_crashes_before": x_before, "others_node_days_before": e_before,
            "others_crashes_after": x_after, "others_node_days_after": e_after,
            **ratio_evidence(rr.ratio, rr.lower, rr.upper),
            "host_share": share, "verdict": verdict}
