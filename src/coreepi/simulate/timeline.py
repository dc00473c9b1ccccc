"""Fleets in time as frames: crashes and exposure with planted changes, no cores.

The surveillance detectors read only times, hosts, signatures, hardware
phenotypes and exposure attributes, so their benchmark and tests replay
fleets made here directly as the analytics' frames (the columns of
:data:`coreepi.store.frames.CRASH_COLUMNS` they use, and
:meth:`~coreepi.store.interfaces.HostStore.exposure_frame`'s), fast enough
for a million crashes; :func:`write_timeline` stores a small one as
ready-made CrashReports for end-to-end tests.

A fleet: ``hosts`` hosts observed in one-day intervals for ``days`` days;
``groups`` signatures with fleet-wide rates (crashes/day) spread
log-uniformly over ``rate_range``, each host's share drawn from a gamma
with shape ``host_shape`` (overdispersed hosts); a background of
hardware-indicative crashes at ``hw_rate`` per host-day. Every crash has
its group's phenotype (``SW_PHENOTYPES[group % 5]``) in ``phenotypes``,
and its hardware phenotype, if any, in both columns. Planted changes:
a group whose rate is multiplied from a day on (:class:`Rise`), a kernel
rollout that multiplies a group's rate on the new kernel (:class:`KernelRollout`),
a bad host (:class:`BadHost`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from coreepi.model.fleet import ExposureInterval, HostRow
from coreepi.model.report import AnalysisInfo, CrashReport, Phenotype, SignalInfo, Signature, Source
from coreepi.store import CrashRecord, Store

__all__ = ["BadHost", "KernelRollout", "Rise", "Timeline", "TimelineFleet", "make_timeline", "write_timeline"]

HW_PHENOTYPES = ("sigbus-mce", "illegal-instruction", "possible-bit-flip")
# each signature group's own (software) phenotype: group g has SW_PHENOTYPES[g % 5], so a
# phenotype group gathers several signature groups, as in a real fleet
SW_PHENOTYPES = ("null-deref", "abort-with-message", "return-to-null", "stack-overflow",
                 "pc-not-executable")


@dataclass(frozen=True)
class Rise:
    """Group ``group``'s rate × ``factor`` from ``day`` on (fractional days allowed)."""

    group: int
    day: float
    factor: float = 3.0


@dataclass(frozen=True)
class KernelRollout:
    """Kernel ``new`` replaces ``old`` host by host from ``day`` over ``ramp_days``;
    group ``group`` crashes ``factor`` times as often on ``new``."""

    group: int
    day: int
    ramp_days: int = 4
    factor: float = 5.0
    old: str = "6.8.0-40"
    new: str = "6.8.0-45"


@dataclass(frozen=True)
class BadHost:
    """Host ``host`` crashes ``rate`` times a day from ``day``, a fraction
    ``hw_fraction`` of them with a hardware phenotype, in random signatures."""

    host: int
    day: float
    rate: float = 0.5
    hw_fraction: float = 0.5


@dataclass(frozen=True)
class TimelineFleet:
    """The fleet's shape (see the module)."""

    hosts: int = 1000
    days: int = 56
    groups: int = 40
    rate_range: tuple[float, float] = (0.5, 20.0)
    host_shape: float = 1.0
    hw_rate: float = 0.0005
    start: str = "2026-10-01"
    rises: tuple[Rise, ...] = ()
    rollouts: tuple[KernelRollout, ...] = ()
    bad_hosts: tuple[BadHost, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Timeline:
    """The frames, the per-group baseline rates (crashes/day) and the kernel
    switch day of every host (-1: never)."""

    crashes: pd.DataFrame
    exposure: pd.DataFrame
    group_rates: np.ndarray
    switch_day: np.ndarray


def _exposure(f: TimelineFleet, switch: np.ndarray, t0: pd.Timestamp) -> pd.DataFrame:
    host = np.repeat(np.arange(f.hosts), f.days)
    day = np.tile(np.arange(f.days), f.hosts)
    start = t0 + pd.to_timedelta(day, unit="D")
    kernel = np.full(len(host), f.rollouts[0].old if f.rollouts else "6.8.0-40", dtype=object)
    if f.rollouts:
        new = (switch[host] >= 0) & (day >= switch[host])
        kernel[new] = f.rollouts[0].new
    return pd.DataFrame({
        "host_id": pd.Series([f"h{h:05d}" for h in range(f.hosts)])[host].to_numpy(),
        "start": start, "end": start + pd.Timedelta(days=1), "seconds": 86_400.0,
        "kernel": kernel})


def make_timeline(f: TimelineFleet, seed: int) -> Timeline:
    """Draw one fleet; the same ``(f, seed)`` gives the same frames."""
    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp(f.start, tz="UTC")
    lo, hi = np.log(f.rate_range[0]), np.log(f.rate_range[1])
    rates = np.exp(rng.uniform(lo, hi, f.groups))
    switch = np.full(f.hosts, -1)
    for r in f.rollouts[:1]:
        switch = r.day + rng.integers(0, r.ramp_days, f.hosts)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    days_ax = np.arange(f.days)
    for g in range(f.groups):
        w = rng.gamma(f.host_shape, 1.0, f.hosts)
        mu = np.outer(w / w.sum(), np.full(f.days, rates[g]))
        for rise in f.rises:
            if rise.group == g:
                mu = mu * np.where(days_ax >= rise.day, rise.factor, 1.0)[None, :]
        for ro in f.rollouts[:1]:
            if ro.group == g:
                on_new = days_ax[None, :] >= switch[:, None]
                mu = mu * np.where(on_new, ro.factor, 1.0)
        n = rng.poisson(mu)
        h, d = np.nonzero(n)
        k = n[h, d]
        parts.append((np.repeat(h, k), np.repeat(d, k) + rng.random(k.sum()),
                      np.full(k.sum(), g), np.zeros(k.sum(), bool)))
    n_hw = rng.poisson(f.hw_rate, (f.hosts, f.days))
    h, d = np.nonzero(n_hw)
    k = n_hw[h, d]
    parts.append((np.repeat(h, k), np.repeat(d, k) + rng.random(k.sum()),
                  rng.integers(0, f.groups, k.sum()), np.ones(k.sum(), bool)))
    for b in f.bad_hosts:
        n = rng.poisson(b.rate * (f.days - b.day))
        parts.append((np.full(n, b.host), np.sort(rng.uniform(b.day, f.days, n)),
                      rng.integers(0, f.groups, n), rng.random(n) < b.hw_fraction))
    host, t, grp, hw = (np.concatenate(x) for x in zip(*parts, strict=True))
    order = np.argsort(t, kind="stable")
    host, t, grp, hw = host[order], t[order], grp[order], hw[order]
    pheno = np.array(HW_PHENOTYPES, dtype=object)[rng.integers(0, 3, len(t))]
    crashes = pd.DataFrame({
        "crash_id": [f"c{i:08d}" for i in range(len(t))],
        "host_id": np.array([f"h{x:05d}" for x in range(f.hosts)], dtype=object)[host],
        "captured_at": t0 + pd.to_timedelta(t, unit="D"),
        "signature": np.array([f"sig_{x:03d}" for x in range(f.groups)], dtype=object)[grp],
        "hardware_phenotypes": [[p] if m else [] for p, m in zip(pheno, hw, strict=True)],
        "phenotypes": [[SW_PHENOTYPES[g % len(SW_PHENOTYPES)], p] if m
                       else [SW_PHENOTYPES[g % len(SW_PHENOTYPES)]]
                       for g, p, m in zip(grp, pheno, hw, strict=True)],
    })
    return Timeline(crashes, _exposure(f, switch, t0), rates, switch)


def write_timeline(store: Store, tl: Timeline) -> int:
    """Store a (small) timeline: hosts, exposure and one ready-made CrashReport
    per crash (SIGSEGV, its signature, its phenotypes); returns the
    crashes written. For end-to-end tests of the evaluation on a real store."""
    hosts = pd.unique(tl.exposure["host_id"])
    store.add_hosts(HostRow(h, {}, 0) for h in hosts)
    store.add_exposure(ExposureInterval(r.host_id, r.start.to_pydatetime(), r.end.to_pydatetime(),
                                        {"kernel": r.kernel})
                       for r in tl.exposure.itertuples(index=False))
    records = [CrashRecord(CrashReport(
        crash_id=c.crash_id, host_id=c.host_id, captured_at=c.captured_at.floor("us").to_pydatetime(),
        source=Source.ELF_CORE, signal=SignalInfo(number=11, name="SIGSEGV"),
        phenotypes=[Phenotype(name=p, hardware_indicative=p in c.hardware_phenotypes)
                    for p in c.phenotypes],
        signature=Signature(signature=c.signature),
        analysis=AnalysisInfo(analyzer_version="timeline")))
        for c in tl.crashes.itertuples(index=False)]
    return store.add_crashes(records)
