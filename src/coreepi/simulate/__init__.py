"""Simulated fleets with planted epidemiology and real cores.

No public data set pairs real fleet crashes with host attributes, so
coreepi simulates one: a scenario (TOML, :mod:`coreepi.simulate.scenario`)
plants which host is bad, which version has a bug, which kernel wakes one,
how often; every crash is real — a real program really crashes, under gdb,
which writes its core. Hardware faults are injected from outside the
program (:mod:`coreepi.simulate.faults`).

    from coreepi.simulate import simulate
    result = simulate("reference.toml", "fleet/", seed=1, jobs=2)

Modules, in the order a simulation runs them: ``scenario`` (the TOML
model), ``hosts`` (attributes), ``exposure`` (intervals), ``rollout``
(versions over time), ``sampling`` (the crash plan: Poisson processes over
exposure), ``workloads`` (C/C++ sources, compiled into a cache), ``faults``
(gdb: injection and gcore), ``cores`` (the process pool), ``writer`` (the
fleet directory, truth.json, run.json), ``simulation`` (all of it).
"""

from __future__ import annotations

from coreepi.simulate.scenario import (
    Scenario,
    bundled_names,
    bundled_scenario,
    load_scenario,
    resolve_scenario,
)
from coreepi.simulate.simulation import SimulationResult, build_plan, simulate

__all__ = [
    "Scenario",
    "SimulationResult",
    "build_plan",
    "bundled_names",
    "bundled_scenario",
    "load_scenario",
    "resolve_scenario",
    "simulate",
]
