"""Accuracy of coreepi's attribution on simulated fleets with planted diseases.

For each scenario (the bundled reference scenario and the variants in
``benchmarks/scenarios/``) and each seed: ``simulate`` (real cores) ->
``ingest`` (every core analysed) -> the report's findings -> scored against
``truth.json`` by :mod:`coreepi.simulate.score`:

- hardware-suspect hosts: precision and recall against the planted bad
  hosts of single-host hardware diseases (a bad CPU stepping is a population
  of hosts with a crash or two each: it is scored by its group's verdict,
  and its hosts count as true positives if flagged, never as misses);
- each planted disease: right when its verdict is the expected one, when a
  software/environment disease planted on an attribute value (app_version,
  kernel, exception profile) shows that value in its group's evidence, and
  when its crashes are not merged into another disease's group;
- crashes needed: the data replayed in time order (the report on growing
  time prefixes, one per ``--step-days``); how many of its crashes each
  disease had in the first prefix from which its verdict stayed right.

Usage::

    .venv/bin/python benchmarks/attribution.py [--seeds 1,2] [--jobs 2] \\
        [--only NAME ...] [--work DIR] [--json-out FILE]

``--work DIR`` keeps the simulated fleets and stores there and reuses them
on the next run (default: a temporary directory, deleted afterwards).
Prints a Markdown table (the README's "Accuracy" section) and a summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from coreepi.ingest.run import ingest
from coreepi.reporting import build_findings
from coreepi.simulate import bundled_scenario, simulate
from coreepi.simulate.score import crashes_needed, link_crashes, load_truth, score
from coreepi.store import open_store

HERE = Path(__file__).resolve().parent
VARIANTS = ["rare", "hosts-2000", "two-bad-hosts", "bad-stepping", "rollout-confounded",
            "kernel-triggered"]


def scenario_path(name: str) -> Path:
    if name == "reference":
        return bundled_scenario("reference")
    return HERE / "scenarios" / f"{name}.toml"


@dataclass
class Run:
    scenario: str
    seed: int
    crashes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    diseases: list[dict[str, Any]] = field(default_factory=list)
    hw_true: list[str] = field(default_factory=list)
    """Planted bad hosts of single-host hardware diseases (with crashes)."""
    hw_population: list[str] = field(default_factory=list)
    """Hosts of population hardware diseases (a bad stepping)."""
    hw_found: list[str] = field(default_factory=list)
    merged: list[list[str]] = field(default_factory=list)
    unlinked: int = 0

    @property
    def tp(self) -> int:
        return len(set(self.hw_found) & set(self.hw_true))

    @property
    def fp(self) -> int:
        return len(set(self.hw_found) - set(self.hw_true) - set(self.hw_population))

    @property
    def fn(self) -> int:
        return len(set(self.hw_true) - set(self.hw_found))

    @property
    def right(self) -> int:
        return sum(1 for d in self.diseases if d["right"])


def run_one(name: str, seed: int, work: Path, jobs: int, step_days: float) -> Run:
    run = Run(name, seed)
    base = work / f"{name}-seed{seed}"
    fleet, data = base / "fleet", base / "data"
    t0 = time.monotonic()
    digest = hashlib.sha256(scenario_path(name).read_bytes()).hexdigest()
    if (fleet / "truth.json").is_file() and load_truth(fleet)["scenario"]["sha256"] != digest:
        shutil.rmtree(base)  # the scenario changed since this fleet was made
    if not (fleet / "truth.json").is_file():
        base.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(data, ignore_errors=True)  # a new fleet needs a new store
        simulate(scenario_path(name), fleet, seed=seed, jobs=jobs)
    t1 = time.monotonic()
    with open_store(data) as store:
        ingest([fleet], store, jobs=jobs)
    t2 = time.monotonic()
    truth = load_truth(fleet)
    with open_store(data, read_only=True) as store:
        links = link_crashes(store, fleet, truth)
        findings = build_findings(store)
        sc = score(findings, truth, links)
        t3 = time.monotonic()
        needed = crashes_needed(truth, links, lambda t: build_findings(store, None, t),
                                step=timedelta(days=step_days))
    t4 = time.monotonic()
    run.seconds = {"simulate": t1 - t0, "ingest": t2 - t1, "report": t3 - t2, "replay": t4 - t3}
    run.crashes = len(truth["crashes"])
    run.unlinked = sc.unlinked
    run.hw_true = sorted(sc.true_hw_hosts)
    run.hw_population = sorted(sc.population_hosts)
    run.hw_found = sorted(sc.found_hw_hosts)
    run.merged = [list(p) for p in sc.merged]
    for d in sc.scored:
        run.diseases.append({
            "name": d.name,
            "kind": d.kind,
            "expected": d.expected_verdict,
            "found": d.verdict,
            "cause": d.cause,
            "attribute_found": d.attribute_found,
            "right": d.right,
            "crashes": d.crashes,
            "crashes_needed": needed.get(d.name),
            "evidence": d.evidence,
        })
    return run


def markdown(runs: list[Run]) -> str:
    lines = [
        ("| scenario | seed | crashes | bad hosts found / planted | false hardware-suspect "
         "hosts | diseases right | merged | crashes needed per disease |"),
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        wrong = [f"{d['name']} → {d['found']}" for d in r.diseases if not d["right"]]
        needed = ", ".join(
            f"{d['name']} {d['crashes_needed'] if d['crashes_needed'] is not None else '—'}"
            f"/{d['crashes']}" for d in r.diseases)
        lines.append(
            f"| {r.scenario} | {r.seed} | {r.crashes} | {r.tp}/{len(set(r.hw_true))} | {r.fp} | "
            f"{r.right}/{len(r.diseases)}" + (f" (wrong: {'; '.join(wrong)})" if wrong else "")
            + f" | {len(r.merged)} | {needed} |"
        )
    return "\n".join(lines)


def summary(runs: list[Run]) -> dict[str, Any]:
    variants = [r for r in runs if r.scenario != "reference"]
    tp = sum(r.tp for r in variants)
    fp = sum(r.fp for r in variants)
    fn = sum(r.fn for r in variants)
    by_kind: dict[str, list[int]] = {}
    for r in runs:
        for d in r.diseases:
            if d["crashes_needed"] is not None:
                by_kind.setdefault(d["kind"], []).append(d["crashes_needed"])
    ref = [r for r in runs if r.scenario == "reference"]
    return {
        "reference_all_right": all(r.right == len(r.diseases) and not r.merged and r.fp == 0
                                   and r.fn == 0 for r in ref) if ref else None,
        "variants_precision": tp / (tp + fp) if tp + fp else None,
        "variants_recall": tp / (tp + fn) if tp + fn else None,
        "variants_tp_fp_fn": [tp, fp, fn],
        "diseases_right": [sum(r.right for r in runs), sum(len(r.diseases) for r in runs)],
        "merged_pairs": sum(len(r.merged) for r in runs),
        "median_crashes_needed": {k: statistics.median(v) for k, v in sorted(by_kind.items())},
        "unlinked_crash_files": sum(r.unlinked for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,2", help="comma-separated seeds (default 1,2)")
    ap.add_argument("--reference-seeds", default="1",
                    help="seeds of the bundled reference scenario (default 1; '' for none)")
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME",
                    help=f"variants to run (default all: {', '.join(VARIANTS)})")
    ap.add_argument("--jobs", type=int, default=2, help="processes for simulate and ingest")
    ap.add_argument("--step-days", type=float, default=1.0,
                    help="time-prefix step of the replay (days)")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep fleets and stores here (reused by the next run)")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args(argv)

    seeds = [int(s) for s in args.seeds.split(",") if s]
    plan = [("reference", int(s)) for s in args.reference_seeds.split(",") if s]
    plan += [(v, s) for v in (args.only if args.only is not None else VARIANTS) for s in seeds]
    tmp = None
    work = args.work
    if work is None:
        tmp = tempfile.mkdtemp(prefix="coreepi-attribution-")
        work = Path(tmp)
    started = time.monotonic()
    runs = []
    try:
        for name, seed in plan:
            r = run_one(name, seed, work, args.jobs, args.step_days)
            secs = ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items())
            print(f"{name} seed {seed}: {r.crashes} crashes, {r.right}/{len(r.diseases)} "
                  f"diseases right, bad hosts {r.tp}/{len(set(r.hw_true))}, {r.fp} false, "
                  f"{len(r.merged)} merged ({secs})", file=sys.stderr, flush=True)
            runs.append(r)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.monotonic() - started
    summ = summary(runs) | {"seconds": round(total, 1)}
    print(markdown(runs))
    print()
    print(json.dumps(summ, indent=2))
    if args.json_out:
        args.json_out.write_text(json.dumps(
            {"summary": summ, "runs": [r.__dict__ | {"tp": r.tp, "fp": r.fp, "fn": r.fn}
                                       for r in runs]}, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
