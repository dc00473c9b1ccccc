"""Fleets shaped like real ones, as the engine's input tables (no cores): issue 11's scenarios.

Each scenario builds, for one seed, the crash and exposure tables the store
hands to :func:`coreepi.epi.analyze_fleet` (one exposure interval per host;
a host's attributes; crashes with signature and phenotypes) plus its truth.
Per-host background rates are gamma-distributed (shape 1: a coefficient of
variation of 1 between hosts), the overdispersion of real fleets; every
attribute is drawn independently of those rates, so only planted diseases
are real. No column names a planted cause: workload conditions are numeric,
noisy exposure attributes (``exceptions_per_s``, ``signals_per_s``,
``load``) that the engine bins itself.

Scenarios (``SCENARIOS``): ``null`` (no disease), ``host-clustered`` (3 of
the 40 kernel-6.1 hosts run a job that hits one bug 10 times each),
``new-node`` (a node joining 10 minutes before the window ends, with a new
build and four bugs of its own, two crashes before its first heartbeat),
``numeric-trigger`` (a bug woken on the hosts whose exception rate is in the
top decile), ``bad-host-1000`` (one bad CPU among 1,000 hosts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

T0 = datetime(2024, 5, 1, tzinfo=UTC)
DAYS = 30
BACKGROUND = [f"Background{i}::run | main" for i in range(40)]
BG_PHENOTYPES = [["null-deref"], ["abort-with-message"], ["wild-pointer"], ["uncaught-exception"]]


@dataclass
class Planted:
    """One planted disease: a signature group with its expected verdict, or a bad host."""

    name: str
    kind: str  # "software", "environment", "hardware" (a host)
    expected: str | None
    signature: str | None = None
    host: str | None = None
    trigger: tuple[str, str] | None = None  # (attribute, "high"): a numeric trigger
    hosts: list[str] = field(default_factory=list)  # hosts the evidence must name


@dataclass
class Fleet:
    crashes: pd.DataFrame
    exposure: pd.DataFrame
    planted: list[Planted]
    until: datetime


def _hosts(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Host attributes, independent of each other and of the crash rates."""
    exc = rng.lognormal(np.log(60.0), 0.8, n)
    return pd.DataFrame({
        "host_id": [f"h-{i:04d}" for i in range(n)],
        "cpu_model": rng.choice(["Xeon-6338", "Xeon-8480", "EPYC-7763", "EPYC-9654"], n),
        "kernel": rng.choice(["5.15.0-91", "6.1.0-13", "6.1.0-18"], n, p=[0.5, 0.3, 0.2]),
        "workload": rng.choice(["kvstore", "indexer"], n, p=[0.6, 0.4]),
        "app_version": rng.choice(["1.4.2", "2.0.0"], n),
        "exceptions_per_s": np.round(exc, 1),
        "signals_per_s": np.round(rng.gamma(2.0, 1.5, n), 2),
        "load": np.round(rng.gamma(4.0, 2.0, n), 2),
    })  # fmt: skip


def _exposure(hosts: pd.DataFrame) -> pd.DataFrame:
    exp = hosts.copy()
    exp.insert(1, "start", pd.Timestamp(T0))
    exp.insert(2, "end", pd.Timestamp(T0 + timedelta(days=DAYS)))
    return exp


def _background(rng: np.random.Generator, hosts: pd.DataFrame, per_host_day: float) -> list[dict]:
    """Gamma-overdispersed background crashes from a Zipf-like signature mix."""
    lam = rng.gamma(1.0, per_host_day, len(hosts)) * DAYS
    counts = rng.poisson(lam)
    mix = 1.0 / np.arange(1, len(BACKGROUND) + 1)
    mix /= mix.sum()
    rows = []
    for h, k in zip(hosts["host_id"], counts, strict=True):
        for _ in range(int(k)):
            s = int(rng.choice(len(BACKGROUND), p=mix))
            rows.append(_crash(rng, h, BACKGROUND[s], BG_PHENOTYPES[s % 4], "background"))
    return rows


def _crash(rng: np.random.Generator, host: str, sig: str, phen: list[str], disease: str,
           at: datetime | None = None, hw: list[str] | None = None) -> dict:
    when = at or T0 + timedelta(seconds=float(rng.uniform(0, DAYS * 86400)))
    return {"host_id": host, "captured_at": pd.Timestamp(when), "signature": sig,
            "phenotypes": phen + (hw or []), "hardware_phenotypes": hw or [], "disease": disease}


def _tables(rows: list[dict], exposure: pd.DataFrame, planted: list[Planted]) -> Fleet:
    crashes = pd.DataFrame(rows).sort_values("captured_at", kind="stable").reset_index(drop=True)
    crashes.insert(0, "crash_id", [f"c{i:06d}" for i in range(len(crashes))])
    return Fleet(crashes, exposure, planted, T0 + timedelta(days=DAYS))


def null_fleet(seed: int) -> Fleet:
    rng = np.random.default_rng(seed)
    hosts = _hosts(rng, 200)
    return _tables(_background(rng, hosts, 0.05), _exposure(hosts), [])


def host_clustered(seed: int) -> Fleet:
    rng = np.random.default_rng(seed)
    hosts = _hosts(rng, 200)
    hosts["kernel"] = ["6.1.0-13"] * 40 + ["5.15.0-91"] * 160
    jobs = list(rng.choice(hosts["host_id"][:40], 3, replace=False))
    rows = _background(rng, hosts, 0.05)
    sig = "Job::commit | Batch::run"
    rows += [_crash(rng, h, sig, ["null-deref"], "job-bug") for h in jobs for _ in range(10)]
    return _tables(rows, _exposure(hosts), [
        Planted("job-bug", "software", "software", signature=sig, hosts=sorted(jobs))])


def new_node(seed: int) -> Fleet:
    rng = np.random.default_rng(seed)
    hosts = _hosts(rng, 200)
    exp = _exposure(hosts)
    end = T0 + timedelta(days=DAYS)
    new = hosts.iloc[[0]].assign(host_id="h-new", app_version="3.0.0-rc1")
    exp = pd.concat([exp, _exposure(new).assign(start=pd.Timestamp(end - timedelta(minutes=10)))],
                    ignore_index=True)
    rows = _background(rng, hosts, 0.05)
    for i in range(4):  # four bugs of the new build; the first two before its first heartbeat
        at = end - timedelta(minutes=14 - 3 * i)
        rows.append(_crash(rng, "h-new", f"NewBuild::bug{i} | main", ["null-deref"], "new-build",
                           at=at))
    return _tables(rows, exp, [Planted("new-node", "hardware", None, host="h-new")])


def numeric_trigger(seed: int) -> Fleet:
    rng = np.random.default_rng(seed)
    hosts = _hosts(rng, 200)
    cut = float(np.quantile(hosts["exceptions_per_s"], 0.9))
    woken = hosts.loc[hosts["exceptions_per_s"] >= cut, "host_id"]
    rows = _background(rng, hosts, 0.05)
    sig = "_Unwind_RaiseException | __cxa_throw"
    for h in woken:
        rows += [_crash(rng, h, sig, ["return-to-null"], "unwind-race")
                 for _ in range(int(rng.poisson(2.0)))]
    return _tables(rows, _exposure(hosts), [
        Planted("unwind-race", "software", "software", signature=sig,
                trigger=("exceptions_per_s", "high"))])


def bad_host_1000(seed: int) -> Fleet:
    rng = np.random.default_rng(seed)
    hosts = _hosts(rng, 1000)
    bad = str(hosts["host_id"].iloc[int(rng.integers(1000))])
    rows = _background(rng, hosts, 0.02)
    for i in range(12):  # a bad CPU: unrelated places, misaligned stacks
        rows.append(_crash(rng, bad, f"Random{seed}_{i}::f | g", ["return-to-bogus"],
                           "bad-cpu", hw=["stack-misaligned"]))
    return _tables(rows, _exposure(hosts), [Planted("bad-cpu", "hardware", "hardware-suspect",
                                                    host=bad)])


SCENARIOS: dict[str, Callable[[int], Fleet]] = {
    "null": null_fleet,
    "host-clustered": host_clustered,
    "new-node": new_node,
    "numeric-trigger": numeric_trigger,
    "bad-host-1000": bad_host_1000,
}
