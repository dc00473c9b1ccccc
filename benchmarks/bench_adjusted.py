#!/usr/bin/env python3
"""CPU cost of one adjusted rate ratio: model-based (cells summed over hosts) vs
cluster-robust by host (cells split by host), on the same synthetic fleet.

Each host has 3 intervals of 10 node-days with a random kernel and app_version
(and a fixed cpu_model and zone, all categorical as the engine makes them);
app_version 2 crashes 5× as often. Per fleet size, the cube is built once and
``adjusted_rate_ratio(app_version=2 | kernel, cpu_model, zone)`` is timed over 3
runs (process CPU time, fair under load; wall time is not reported).

    .venv/bin/python benchmarks/bench_adjusted.py [--hosts 1000,20000,200000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from coreepi.epi.confounding import adjusted_rate_ratio, exposure_cube

ATTRS = ["app_version", "kernel", "cpu_model", "zone"]


def fleet(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    hosts = np.array([f"h{i}" for i in range(n)], dtype=object)
    ex = pd.DataFrame({"host_id": np.repeat(hosts, 3),
                       "kernel": rng.choice(["5.15", "6.1", "6.6"], 3 * n),
                       "cpu_model": np.repeat(rng.choice(list("ABCD"), n), 3),
                       "zone": np.repeat(rng.choice(list("wxyz"), n), 3),
                       "app_version": rng.choice(["1", "2"], 3 * n), "node_days": 10.0})
    for a in ATTRS:
        ex[a] = ex[a].astype(object).astype("category")
    k = rng.poisson(np.where(ex["app_version"] == "2", 0.05, 0.01) * 10)
    return ex, ex.loc[ex.index.repeat(k), ["host_id", *ATTRS]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1000,20000,200000")
    args = ap.parse_args()
    print("| hosts | crashes | cells | model-based ms CPU/fit | cluster-robust cells | "
          "cluster-robust ms CPU/fit | ratio (CI) model-based | ratio (CI) robust |")
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    for n in (int(h) for h in args.hosts.split(",")):
        ex, cr = fleet(n, np.random.default_rng(1))
        row = [f"{n:,}", f"{len(cr):,}"]
        cis = []
        for e, c in ((ex.drop(columns="host_id"), cr.drop(columns="host_id")), (ex, cr)):
            cube = exposure_cube(e, ATTRS)
            adjusted_rate_ratio(c, cube, "app_version", "2", ATTRS[1:])  # imports, caches
            t = time.process_time()
            for _ in range(3):
                r = adjusted_rate_ratio(c, cube, "app_version", "2", ATTRS[1:])
            row += [f"{len(cube):,}", f"{(time.process_time() - t) / 3 * 1000:.0f}"]
            cis.append(f"{r.irr:.3f} ({r.lower:.3f}–{r.upper:.3f})")
        print("| " + " | ".join(row + cis) + " |", flush=True)


if __name__ == "__main__":
    main()
