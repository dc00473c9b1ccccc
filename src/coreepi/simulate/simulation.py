"""``simulate``: a scenario and a seed in, a fleet directory with real cores out.

Steps (each a function of the seed, through its own random stream):
hosts and attributes, exposure intervals, rollout times, the crash plan
(Poisson over exposure), then the real work: build the workloads, run each
planned crash under gdb (with injected faults for hardware diseases), and
write the fleet directory, ``truth.json`` and ``run.json``.

The output is written into ``OUT.partial`` and renamed to ``OUT`` at the
end, so an interrupted run leaves no half-fleet under ``OUT``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreepi.errors import InputError
from coreepi.simulate.cores import CoreJob, failure_reason, make_cores
from coreepi.simulate.exposure import Interval, host_spans, node_hours, with_changes
from coreepi.simulate.hosts import Host, add_measures, make_hosts
from coreepi.simulate.rollout import initial_versions, upgrade_times
from coreepi.simulate.sampling import DiseasePlan, Plan, PlannedCrash, plan, stream
from coreepi.simulate.scenario import DiseaseKind, Scenario, bundled_scenario, load_scenario
from coreepi.simulate.workloads import build_workload
from coreepi.simulate.writer import (
    TRUTH_FORMAT,
    core_file,
    iso,
    sidecar_file,
    write_exposure,
    write_hosts,
    write_json,
    write_sidecar,
    write_symbols,
    write_telemetry,
)

__all__ = ["Fleetplan", "SimulationResult", "build_plan", "simulate"]

#: the attribution each kind of disease should get (coreepi.epi verdict names)
EXPECTED_VERDICT = {
    DiseaseKind.HARDWARE: "hardware-suspect",
    DiseaseKind.SOFTWARE: "software",
    DiseaseKind.ENVIRONMENT: "environment-triggered",
    DiseaseKind.NOISE: None,
}


@dataclass
class Fleetplan:
    """Everything decided by scenario and seed, before any program runs."""

    scenario: Scenario
    seed: int
    hosts: list[Host]
    intervals: list[Interval]
    plan: Plan

    @property
    def start(self) -> int:
        return int(self.scenario.scenario.start.timestamp())

    @property
    def end(self) -> int:
        return int(self.scenario.scenario.end.timestamp())


@dataclass
class SimulationResult:
    out: Path
    crashes_planned: int
    crashes_produced: int
    not_produced: list[str]
    failures: dict[str, str] = field(default_factory=dict)
    """crash name -> why it was not made (:func:`~coreepi.simulate.cores.failure_reason`)"""
    seconds: dict[str, float] = field(default_factory=dict)
    by_disease: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.by_disease.items())
        text = (
            f"{self.crashes_produced} of {self.crashes_planned} planned crashes made "
            f"({parts}) in {self.seconds.get('total', 0):.1f} s; fleet directory {self.out}"
        )
        if self.not_produced:
            text += f"; not produced: {', '.join(self.not_produced)}"
        return text


def build_plan(scenario: Scenario, seed: int) -> Fleetplan:
    """Hosts, exposure and the crash plan (no program is run)."""
    info = scenario.scenario
    start, end = int(info.start.timestamp()), int(info.end.timestamp())
    hosts = add_measures(scenario, make_hosts(scenario, stream(seed, "hosts")),
                         stream(seed, "measures"))
    spans = host_spans(hosts, start, end, scenario.exposure, stream(seed, "exposure"))
    changes = upgrade_times(scenario, hosts, start, stream(seed, "rollout"))
    for host_id, version in initial_versions(scenario, hosts).items():
        changes.setdefault(host_id, []).insert(0, (0, "app_version", version))
    intervals = with_changes(spans, changes)
    return Fleetplan(scenario, seed, hosts, intervals, plan(scenario, hosts, intervals, seed))


def _prepare_out(out: Path) -> Path:
    if out.exists() and any(out.iterdir()) and not (out / "truth.json").is_file():
        raise InputError(
            str(out),
            "exists, is not empty and is not a simulated fleet "
            "(no truth.json); refusing to replace it",
        )
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    (partial / "crashes").mkdir(parents=True)
    return partial


def simulate(
    scenario: Scenario | str | os.PathLike[str] | None,
    out: str | os.PathLike[str],
    seed: int = 1,
    jobs: int | None = None,
    cache_dir: Path | None = None,
    on_crash: Callable[[dict[str, Any]], None] | None = None,
) -> SimulationResult:
    """Simulate ``scenario`` (a Scenario, a TOML path, or None for the
    bundled reference scenario) with ``seed`` into the fleet directory
    ``out`` (replaced if it holds an earlier simulation). ``jobs``: cores made
    at once (default: CPUs). ``on_crash`` is called with each run's record."""
    t0 = time.monotonic()
    source = "(given)"
    digest = None
    if not isinstance(scenario, Scenario):
        path = Path(scenario) if scenario is not None else bundled_scenario("reference")
        source = str(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        scenario = load_scenario(path)
    # absolute: gdb and the pool workers are handed paths under it from their own cwd
    out = Path(out).absolute()
    fp = build_plan(scenario, seed)
    t_plan = time.monotonic()

    binaries: dict[tuple[str, str], Path] = {}
    for w in scenario.workload:
        for v in w.versions:
            binaries[(w.name, v.name)] = build_workload(w.name, w.source, v.defines, cache_dir)
    t_build = time.monotonic()

    partial = _prepare_out(out)
    work = partial / ".work"
    core_jobs = [_job(c, binaries[(c.workload, c.version)], partial, work) for c in fp.plan.crashes]
    workers = jobs or os.cpu_count() or 1
    cpu_before = _children_cpu()
    try:
        with _sigterm_as_interrupt():
            results = make_cores(core_jobs, workers, on_crash)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    t_cores = time.monotonic()
    cpu = _children_cpu() - cpu_before

    produced = [c for c in fp.plan.crashes if results[c.name]["outcome"] == "crashed"]
    for c in produced:
        write_sidecar(partial, c)
    write_hosts(partial, fp.hosts, scenario.columns)  # no hidden condition leaks
    write_exposure(partial, fp.intervals, ["app_version"])
    write_telemetry(partial, fp.plan.telemetry)
    write_symbols(partial, binaries)
    produced_names = {c.name for c in produced}
    truth = _truth(fp, source, digest, produced_names)
    write_json(partial / "truth.json", truth)
    t_write = time.monotonic()
    seconds = {
        "plan": t_plan - t0,
        "build": t_build - t_plan,
        "cores": t_cores - t_build,
        "write": t_write - t_cores,
        "total": t_write - t0,
        "cores_cpu": cpu,
    }
    write_json(partial / "run.json", _run_record(fp, results, seconds, workers))
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return SimulationResult(
        out=out,
        crashes_planned=len(fp.plan.crashes),
        crashes_produced=len(produced),
        not_produced=[c.name for c in fp.plan.crashes if c.name not in produced_names],
        failures={c.name: failure_reason(results[c.name])
                  for c in fp.plan.crashes if c.name not in produced_names},
        seconds={k: round(v, 2) for k, v in seconds.items()},
        by_disease=dict(Counter(c.disease for c in produced)),
    )


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While making cores, SIGTERM is handled like Ctrl-C (clean up, then
    stop); outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _children_cpu() -> float:
    """CPU seconds (user + system) of reaped child processes (pool workers,
    and through them gdb and the workloads)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _job(c: PlannedCrash, binary: Path, root: Path, work: Path) -> CoreJob:
    hardware = c.kind == DiseaseKind.HARDWARE
    timeout = c.timeout_seconds + 30.0
    return CoreJob(
        name=c.name,
        binary=str(binary.absolute()),  # gdb runs it from the job's workdir
        argv=c.argv,
        out_core=str(root / core_file(c.name)),
        workdir=str(work / c.name),
        faults=tuple(f.as_dict() for f in c.faults),
        pass_signals=c.pass_signals,
        stack_kib=c.stack_kib,
        timeout=timeout,
        attempts=4 if hardware else 3,
    )


def _crash_entry(c: PlannedCrash) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": c.name,
        "file": core_file(c.name),
        "sidecar": sidecar_file(c.name),
        "disease": c.disease,
        "kind": c.kind.value,
        "host_id": c.host_id,
        "captured_at": iso(c.time),
        "workload": c.workload,
        "app_version": c.version,
        "bug": c.bug,
        "argv": list(c.argv),
    }
    if c.faults:
        entry["planned_faults"] = [f.as_dict() for f in c.faults]
    return entry


def _disease_entry(
    dp: DiseasePlan, produced: set[str], n_events: int, scenario: Scenario
) -> dict[str, Any]:
    """The truth of one disease. A ``when`` on a hidden attribute (a workload condition no
    column carries) is recorded under ``hidden``, with the ``measures`` it shows through:
    the scorer looks for the group's association with a high stratum of one of those."""
    d = dp.disease
    made = [c for c in dp.crashes if c.name in produced]
    cause: dict[str, Any] = {"workload": d.workload}
    hidden = {a.name for a in scenario.attribute if a.hidden}
    shown = {k: v for k, v in d.when.items() if k not in hidden}
    if shown:
        cause["attributes"] = shown
    if len(shown) < len(d.when):
        cause["hidden"] = {k: v for k, v in d.when.items() if k in hidden}
        cause["measures"] = [m for k in cause["hidden"] for m in scenario.measures_of(k)]
    if d.kind == DiseaseKind.HARDWARE:
        cause["host_ids"] = list(dp.host_ids)
        cause["faults"] = [f.value for f in d.faults]
    elif d.bug != "none":
        cause["bug"] = d.bug  # else the crash is inherent to the workload, woken by `when`
    return {
        "name": d.name,
        "kind": d.kind.value,
        "description": d.description,
        "expected_verdict": EXPECTED_VERDICT[d.kind],
        "cause": cause,
        "expected_phenotype": d.expect_phenotype,
        "expected_signature": d.expect_signature,
        "rate_per_node_day": round(dp.rate_per_node_hour * 24, 9),
        "eligible_node_hours": round(dp.eligible_node_hours, 6),
        "expected_crashes": round(dp.expected_crashes, 6),
        "planned_crashes": len(dp.crashes),
        "produced_crashes": len(made),
        "hosts_with_crashes": sorted({c.host_id for c in made}),
        "crash_files": [core_file(c.name) for c in made],
        "not_produced": [c.name for c in dp.crashes if c.name not in produced],
        "telemetry_events": n_events,
    }


def _truth(fp: Fleetplan, source: str, digest: str | None, produced: set[str]) -> dict[str, Any]:
    events = Counter(e["planted_by"] for e in fp.plan.telemetry)
    info = fp.scenario.scenario
    return {
        "format": TRUTH_FORMAT,
        "scenario": {
            "name": info.name,
            "path": source,
            "sha256": digest,
            "description": info.description,
        },
        "seed": fp.seed,
        "window": {"start": iso(fp.start), "end": iso(fp.end), "days": info.days},
        "hosts": len(fp.hosts),
        "node_hours": round(node_hours(fp.intervals), 6),
        "exposure_intervals": len(fp.intervals),
        "diseases": [
            _disease_entry(dp, produced, events.get(dp.disease.name, 0), fp.scenario)
            for dp in fp.plan.diseases
        ],
        "crashes": [_crash_entry(c) for c in fp.plan.crashes if c.name in produced],
        "not_produced": [_crash_entry(c) for c in fp.plan.crashes if c.name not in produced],
        "telemetry": {"events": len(fp.plan.telemetry), "by_cause": dict(sorted(events.items()))},
    }


def _run_record(
    fp: Fleetplan, results: dict[str, dict[str, Any]], seconds: dict[str, float], workers: int
) -> dict[str, Any]:
    return {
        "seed": fp.seed,
        "workers": workers,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "core_bytes": sum(r.get("core_bytes", 0) for r in results.values()),
        "compressed_bytes": sum(r.get("compressed_bytes", 0) for r in results.values()),
        "crashes": [results[c.name] | {"disease": c.disease} for c in fp.plan.crashes],
    }
