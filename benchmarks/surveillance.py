#!/usr/bin/env python3
"""Benchmark the surveillance detectors against the goals of issue 16.

Fleets are :mod:`coreepi.simulate.timeline` frames (1,000 hosts observed in
one-day intervals; per-host shares of each group gamma-distributed, shape
``--host-shape``: overdispersed hosts), replayed by evaluating the
detectors at successive ``now`` (each evaluation sees only crashes up to
``now``). Parts:

null      stationary fleets (40 signature groups, 0.5–20 crashes/day, in 8
          phenotype groups, 12 weeks): alerts per 1,000 group-weeks (rising:
          weekly windows; every kind; signature and phenotype groups);
          healthy hosts flagged
rising    one group ×3 at a random time (baseline ``--rise-rates``/day):
          delay from the change to the alarm (median, 95th percentile), beside
          the least median any detector can reach at the null goal's false-alarm
          rate (ln(ARL0)/KL, ARL0 = 7,000 days: 1 per 1,000 group-weeks)
rollout   kernel 6.8.0-45 rolled out over 4 days, one group ×5 on it:
          right kernel named, date within a day
badhost   one host (0.5 crashes/day, half hardware-indicative) among 1,000:
          its crash number at the alarm (counting all its crashes since it
          went bad); other hosts flagged in those fleets
frontier  the host test without a threshold (for choosing A): the largest
          healthy-host statistic on null fleets; the bad host's crash number
          at each A
scale     every detector over a 1M-crash fleet (frames in memory): wall and
          CPU seconds of this process (wall depends on the machine's load)

Run by hand (not a test)::

    .venv/bin/python benchmarks/surveillance.py [--seeds 20] [--parts null,rising,...]
        [--null-seed-base 1000]   # e.g. 9000: fresh null fleets, not the ones tuned on
        [--bad-seed-base 4000]    # e.g. 4100: fresh bad-host fleets
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import pandas as pd

from coreepi.epi.surveillance import DetectorParams, delay_bound_days, detect, rising_groups
from coreepi.epi.surveillance import host_runs, rollout_regressions, suspect_hosts, wald_bounds
from coreepi.simulate.timeline import BadHost, KernelRollout, Rise, Timeline, TimelineFleet
from coreepi.simulate.timeline import make_timeline


def _at(f: TimelineFleet, day: float) -> pd.Timestamp:
    return pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=day)


# the null goal: at most 1 false alert per 1,000 group-weeks = one per 7,000 group-days
ARL0_DAYS = 7000.0


def null_part(seeds: int, p: DetectorParams, shape: float, base: int) -> dict[str, float]:
    f = TimelineFleet(days=84, groups=40, host_shape=shape)
    alerts: dict[str, int] = {}
    group_weeks = 0
    hosts_flagged = 0
    for seed in range(seeds):
        tl = make_timeline(f, seed=base + seed)
        keys: set[str] = set()
        # signature groups and phenotype groups (detect runs new/rising on both)
        n_groups = f.groups + (tl.crashes["phenotypes"].explode().nunique() if p.phenotype_groups
                               else 0)
        for day in range(35, 85, 7):  # weekly windows after a 4-week baseline
            found = detect(tl.crashes, tl.exposure, _at(f, day), p)
            keys |= {f"{d.key}@{day}" if d.kind == "rising" else d.key for d in found}
            group_weeks += n_groups
        for k in keys:
            kind = k.split("|")[0]
            alerts[kind] = alerts.get(kind, 0) + 1
        hosts_flagged += sum(k.startswith("hardware-suspect-host") for k in keys)
    per_1000 = {k: 1000 * v / group_weeks for k, v in alerts.items()}
    return {"group_weeks": group_weeks, "alerts_per_1000_group_weeks": per_1000,
            "all_per_1000": 1000 * sum(alerts.values()) / group_weeks,
            "healthy_hosts_flagged": hosts_flagged, "seeds": f"{base}-{base + seeds - 1}"}


def rising_part(seeds: int, p: DetectorParams, rate: float, shape: float) -> dict[str, float]:
    delays, early, missed = [], 0, 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        change = 40 + rng.random()
        f = TimelineFleet(days=48, groups=5, rate_range=(rate, rate), host_shape=shape,
                          rises=(Rise(group=0, day=change, factor=3.0),))
        tl = make_timeline(f, seed=2000 + seed)
        # the window [now - 7 d, now] starts 0.5 d before the change; the CUSUM's alarm
        # time is when a live evaluation would have fired
        found = [d for d in rising_groups(tl.crashes, tl.exposure, _at(f, change + 6.5), p)
                 if d.subject["signature"] == "sig_000"]
        if not found:
            missed += 1
            delays.append(np.inf)
            continue
        delay = (found[0].at - _at(f, change)).total_seconds() / 86400
        if delay < 0:
            early += 1
        delays.append(max(delay, 0.0))
    d = np.array(delays)
    return {"baseline_per_day": rate, "median_days": float(np.median(d)),
            "bound_days": delay_bound_days(rate, 3.0, ARL0_DAYS),
            "p95_days": float(np.quantile(d, 0.95)), "within_1d": float(np.mean(d <= 1)),
            "within_3d": float(np.mean(d <= 3)), "alarm_before_change": early,
            "missed_6_5d": missed, "seeds": seeds}


def rollout_part(seeds: int, p: DetectorParams, shape: float) -> dict[str, float]:
    right, dated, delays = 0, 0, []
    for seed in range(seeds):
        ro = KernelRollout(group=0, day=30, ramp_days=4, factor=5.0)
        f = TimelineFleet(days=44, groups=10, rate_range=(2, 2), host_shape=shape, rollouts=(ro,))
        tl = make_timeline(f, seed=3000 + seed)
        share = np.array([(tl.switch_day <= d).mean() for d in range(f.days)])
        truth = _at(f, int(np.argmax(share >= p.rollout_share))).date().isoformat()
        hit = None
        for day in range(31, 45):  # daily evaluations after the rollout starts
            found = [d for d in rollout_regressions(tl.crashes, tl.exposure, _at(f, day), p)
                     if d.subject["signature"] == "sig_000"]
            if found:
                hit = (found[0], day)
                break
        if hit is None:
            continue
        det, day = hit
        right += det.subject["value"] == ro.new
        truth_day = pd.Timestamp(truth)
        dated += abs((pd.Timestamp(det.evidence["reached"]) - truth_day).days) <= 1
        delays.append(day - ro.day)
    return {"right_kernel": right / seeds, "date_within_1d": dated / seeds,
            "median_days_after_rollout_start": float(np.median(delays)) if delays else None,
            "seeds": seeds}


def badhost_part(seeds: int, p: DetectorParams, shape: float, base: int) -> dict[str, float]:
    ranks: list[float] = []
    others = 0
    for seed in range(seeds):
        f, tl = _bad_fleet(base + seed, shape)
        found = suspect_hosts(tl.crashes, tl.exposure, _at(f, 50), p)
        others += sum(d.subject["host_id"] != "h00017" for d in found)
        mine = [d for d in found if d.subject["host_id"] == "h00017"]
        if not mine:
            ranks.append(np.inf)
            continue
        # its crash number since it went bad (its earlier, healthy crashes not counted)
        c = tl.crashes
        ranks.append(int(((c["host_id"] == "h00017") & (c["captured_at"] >= _at(f, 20.0))
                          & (c["captured_at"] <= mine[0].at)).sum()))
    r = np.array(ranks)
    return {"median_crash_number": float(np.median(r)), "p90_crash_number": float(np.quantile(r, 0.9)),
            "sprt_bounds_nats": wald_bounds(p.host_alpha, p.host_beta),
            "missed": int(np.isinf(r).sum()), "other_hosts_flagged": others,
            "seeds": f"{base}-{base + seeds - 1}"}


def _bad_fleet(seed: int, shape: float) -> tuple[TimelineFleet, Timeline]:
    f = TimelineFleet(days=50, groups=40, host_shape=shape,
                      bad_hosts=(BadHost(host=17, day=20.0, rate=0.5, hw_fraction=0.5),))
    return f, make_timeline(f, seed=seed)


def frontier_part(seeds: int, p: DetectorParams, shape: float, null_base: int,
                  bad_base: int) -> dict[str, object]:
    """The host test's trade-off without a threshold: on null fleets the
    largest statistic any healthy host reached (weekly evaluations, as in
    ``null``); in bad-host fleets the bad host's crash number (since it went
    bad) when its statistic first reached each A. Thresholds are chosen here,
    on seeds other than the ones reported."""
    # no alarm stops a run: A far above any statistic reached
    free = DetectorParams(**{**p.__dict__, "host_alpha": 1e-200})
    floor = 6.0
    null_max: list[float] = []
    f = TimelineFleet(days=84, groups=40, host_shape=shape)
    for seed in range(seeds):
        tl = make_timeline(f, seed=null_base + seed)
        top = floor
        for day in range(35, 85, 7):
            for _, _, run, _ in host_runs(tl.crashes, tl.exposure, _at(f, day), free,
                                          min_reach=floor):
                top = max(top, float(run.statistic.max()))
        null_max.append(top)
    grid = [float(a) for a in np.arange(8.0, 16.01, 0.5)]
    numbers: dict[float, list[float]] = {a: [] for a in grid}
    for seed in range(seeds):
        fb, tl = _bad_fleet(bad_base + seed, shape)
        went_bad = _at(fb, 20.0)
        for host, g, run, _ in host_runs(tl.crashes, tl.exposure, _at(fb, 50), free, min_reach=0):
            if host != "h00017":
                continue
            since = np.cumsum((g["captured_at"] >= went_bad).to_numpy())
            for a in grid:
                hit = np.flatnonzero(run.statistic >= a)
                numbers[a].append(float(since[hit[0]]) if len(hit) else np.inf)
    return {"null_max_statistic": sorted(null_max, reverse=True)[:10],
            "null_seeds": f"{null_base}-{null_base + seeds - 1}",
            "bad_seeds": f"{bad_base}-{bad_base + seeds - 1}",
            "median_crash_number_at_A": {f"{a:.1f}": float(np.median(v)) for a, v in numbers.items()}}


def scale_part(p: DetectorParams) -> dict[str, float]:
    f = TimelineFleet(hosts=2000, days=35, groups=300, rate_range=(12, 350))
    t0 = time.perf_counter()
    tl = make_timeline(f, seed=5)
    made = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    found = detect(tl.crashes, tl.exposure, _at(f, 35), p)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    # wall time on a shared machine measures the load; the process's CPU time is the fair one
    return {"crashes": len(tl.crashes), "exposure_rows": len(tl.exposure), "groups": f.groups,
            "detect_seconds_wall": took, "detect_seconds_cpu": cpu,
            "load_average_1m": os.getloadavg()[0], "generate_seconds": made,
            "detections": len(found)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--parts", default="null,rising,rollout,badhost,scale")
    ap.add_argument("--rise-rates", default="2,5,10")
    ap.add_argument("--host-shape", type=float, default=0.5)
    ap.add_argument("--null-seed-base", type=int, default=1000)
    ap.add_argument("--bad-seed-base", type=int, default=4000)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    p = DetectorParams()
    parts = a.parts.split(",")
    out: dict[str, object] = {"machine": f"{platform.node()} {platform.processor()} "
                              f"{platform.python_version()}", "params": p.__dict__}
    for part in parts:
        t0 = time.perf_counter()
        if part == "null":
            out[part] = null_part(a.seeds, p, a.host_shape, a.null_seed_base)
        elif part == "rising":
            out[part] = [rising_part(a.seeds, p, float(r), a.host_shape)
                         for r in a.rise_rates.split(",")]
        elif part == "rollout":
            out[part] = rollout_part(a.seeds, p, a.host_shape)
        elif part == "badhost":
            out[part] = badhost_part(a.seeds, p, a.host_shape, a.bad_seed_base)
        elif part == "frontier":
            out[part] = frontier_part(a.seeds, p, a.host_shape, a.null_seed_base,
                                      a.bad_seed_base)
        elif part == "scale":
            out[part] = scale_part(p)
        sys.stderr.write(f"{part}: {time.perf_counter() - t0:.0f} s\n")
        print(json.dumps({part: out[part]}, default=str), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(out, fh, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
