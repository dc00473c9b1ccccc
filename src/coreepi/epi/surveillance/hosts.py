"""Hardware-suspect hosts, online: a marked Poisson CUSUM on each host's own node-time.

Each host's crashes are two Poisson streams: hardware-indicative ones (a
crash with a hardware phenotype: sigbus-mce, illegal-instruction,
possible-bit-flip …) and the others. In control, a host crashes like the
fleet: ``λ_hw`` and ``λ_other`` per node-day (the other hosts' counts over their
node-time in the span read — leave-one-out, so a bad host does not raise
its own bar — with ½ added to the hardware count so a fleet without one
still has a finite rate). The alternative is a host with
``host_hw_ratio``·λ_hw and ``host_ratio``·λ_other; the CUSUM
(:func:`~.cusum.poisson_cusum`) runs on the host's own node-time clock
(:class:`~.clock.HostClocks`), so a host that was off, or drained,
accumulates nothing, and a host is flagged at the crash that tips it —
not at the end of a window. Sources: Page (1954); Lucas (1985); the
microsoft fleet study that motivates weighting hardware-indicative crashes
(Nightingale, Douceur & Orgovan, EuroSys 2011: after one CPU-subsystem
crash, the chance of another is 1 in 3.3).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coreepi.epi.surveillance.clock import FleetClock, HostClocks, days
from coreepi.epi.surveillance.cusum import poisson_cusum
from coreepi.epi.surveillance.groups import windows
from coreepi.epi.surveillance.models import Detection, DetectorParams

__all__ = ["clip_drained", "drain_recheck", "suspect_hosts"]


def clip_drained(exposure: pd.DataFrame, drained: dict[str, pd.Timestamp]) -> pd.DataFrame:
    """``exposure`` with each drained host's intervals cut at its drain time
    (``host_id → drained_at``, UTC): a drained host stops accruing node-time."""
    if not drained or exposure.empty:
        return exposure
    cut = exposure["host_id"].map(drained)
    has = cut.notna()
    if not has.any():
        return exposure
    cut_ts = pd.to_datetime(cut[has], utc=True)
    out = exposure.copy()
    out.loc[has, "end"] = np.minimum(out.loc[has, "end"], cut_ts)
    out = out[out["end"] > out["start"]]
    if "seconds" in out.columns:
        out = out.assign(seconds=(out["end"] - out["start"]).dt.total_seconds())
    return out.reset_index(drop=True)


def _hardware(crashes: pd.DataFrame) -> np.ndarray:
    col = crashes.get("hardware_phenotypes")
    if col is None:
        return np.zeros(len(crashes), bool)
    return (col.str.len().fillna(0) > 0).to_numpy()


def suspect_hosts(
    crashes: pd.DataFrame,
    exposure: pd.DataFrame,
    now: pd.Timestamp,
    params: DetectorParams,
) -> list[Detection]:
    """Hosts whose CUSUM reached ``host_threshold`` over baseline + window up to ``now``.

    One detection per host, at its first alarm. Evidence: ``crashes`` and
    ``hardware_crashes`` (up to the alarm), ``node_days`` (the host's),
    ``expected`` (crashes at the other hosts' rate), ``statistic``, ``signatures``
    (distinct), ``rate_hw`` / ``rate_other`` (the other hosts', per node-day).
    """
    bs, _, t_now = windows(now, params)
    t = days(crashes["captured_at"])
    span = (t >= bs) & (t <= t_now)
    frame = crashes.loc[span, ["host_id", "captured_at", "signature"]].assign(
        t=t[span], hw=_hardware(crashes)[span])
    fleet_e = FleetClock.from_exposure(exposure).between(bs, t_now)
    if fleet_e <= 0 or frame.empty:
        return []
    n_hw, n_other = int(frame["hw"].sum()), int((~frame["hw"]).sum())
    clocks = HostClocks.from_exposure(exposure)
    frame = frame.sort_values(["host_id", "t"])
    frame["e"] = clocks.at(frame["host_id"].to_numpy(), frame["t"].to_numpy())
    max_gain = max(np.log(params.host_ratio), np.log(params.host_hw_ratio))
    counts = frame.groupby("host_id").size() if params.host_ratio > 1 else \
        frame[frame["hw"]].groupby("host_id").size()
    # a host with too few crashes cannot reach the threshold: skip its loop
    candidates = counts.index[counts * max_gain >= params.host_threshold]
    out: list[Detection] = []
    for host, g in frame[frame["host_id"].isin(candidates)].groupby("host_id", sort=True):
        e0, e1 = clocks.at([host, host], [bs, t_now])
        # leave-one-out: the fleet's rates without this host, so a bad host
        # does not raise the bar it is measured against
        rest_e = max(fleet_e - float(e1 - e0), 1e-9)
        rate_hw = (n_hw - int(g["hw"].sum()) + 0.5) / rest_e
        rate_other = max(n_other - int((~g["hw"]).sum()), 0.5) / rest_e
        run = poisson_cusum(g["e"].to_numpy(), rate_other, params.host_ratio,
                            params.host_threshold, marked=g["hw"].to_numpy(),
                            marked_rate0=rate_hw, marked_ratio=params.host_hw_ratio,
                            exposure_start=float(e0))
        if not len(run.alarms):
            continue
        i = int(run.alarms[0])
        e_h = float(g["e"].iloc[i] - e0)
        out.append(Detection(
            "hardware-suspect-host", {"host_id": str(host)}, g["captured_at"].iloc[i],
            {"crashes": i + 1, "hardware_crashes": int(g["hw"].iloc[: i + 1].sum()),
             "node_days": e_h, "expected": (rate_hw + rate_other) * e_h,
             "statistic": float(run.statistic[i]),
             "signatures": int(g["signature"].iloc[: i + 1].nunique()),
             "rate_hw": float(rate_hw), "rate_other": float(rate_other)}))
    return out


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
            "ratio": float(rr.ratio), "lower": lower, "upper": float(rr.upper),
            "host_share": share, "verdict": verdict}
