"""The crash plan: Poisson processes over exposure, deterministic given the seed.

Each disease has its own random stream (:func:`stream`: the seed and the
disease's name), so adding a disease to a scenario does not move the crashes
of the others. For a disease with rate λ per node-hour, each eligible
exposure interval of length h hours gets Poisson(λ·h) crashes at times drawn
uniformly (whole seconds) inside it; the counts over disjoint intervals add
up to a Poisson process over the eligible node-time.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from coreepi.simulate.exposure import Interval, node_hours
from coreepi.simulate.hosts import Host
from coreepi.simulate.scenario import Disease, DiseaseKind, FaultKind, Scenario, TelemetrySpec

__all__ = [
    "REGISTERS",
    "DiseasePlan",
    "Plan",
    "PlannedCrash",
    "PlannedFault",
    "eligible_intervals",
    "interval_attributes",
    "plan",
    "poisson_times",
    "stream",
]

#: registers a reg-bitflip may hit (x86-64 general-purpose registers and rip)
REGISTERS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
             "r12", "r13", "r14", "r15", "rip")  # fmt: skip


def stream(seed: int, *labels: str) -> np.random.Generator:
    """An independent generator for (seed, labels): stable across runs and
    platforms (PCG64 over a SeedSequence of the seed and CRC-32s of the labels)."""
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF] + [
        zlib.crc32(s.encode()) for s in labels
    ]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def poisson_times(
    intervals: Iterable[Interval], rate_per_hour: float, rng: np.random.Generator
) -> list[tuple[Interval, int]]:
    """(interval, time) of each event of a Poisson process with ``rate_per_hour``
    over ``intervals``: Poisson(rate·hours) events per interval, at whole
    seconds drawn uniformly in [start, end)."""
    out: list[tuple[Interval, int]] = []
    for iv in intervals:
        n = int(rng.poisson(rate_per_hour * iv.hours))
        if n:
            times = np.sort(iv.start + rng.integers(0, iv.seconds, size=n))
            out.extend((iv, int(t)) for t in times)
    return out


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """One hardware fault: ``delay_ms`` after the previous stop (or the
    attach), stop the process and apply ``kind`` (a register and bit, a stack
    word ``offset`` words above rsp, or a heap word at ``fraction`` of the heap)."""

    kind: FaultKind
    delay_ms: int
    register: str | None = None
    bit: int | None = None
    offset: int | None = None
    fraction: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind.value,
            "delay_ms": self.delay_ms,
            "register": self.register,
            "bit": self.bit,
            "offset": self.offset,
            "fraction": self.fraction,
        }
        return {k: v for k, v in d.items() if v is not None}


@dataclass(frozen=True, slots=True)
class PlannedCrash:
    """One crash to make for real: run ``argv`` of the workload's ``version``
    (with ``faults`` injected, for a hardware disease) on ``host_id`` at
    ``time`` (epoch seconds)."""

    name: str
    disease: str
    kind: DiseaseKind
    host_id: str
    time: int
    attributes: Mapping[str, str]
    workload: str
    version: str
    bug: str
    argv: tuple[str, ...]
    faults: tuple[PlannedFault, ...] = ()
    pass_signals: tuple[str, ...] = ()
    timeout_seconds: float = 30.0
    stack_kib: int | None = None


@dataclass
class DiseasePlan:
    """What the plan holds for one disease (truth.json's disease entry)."""

    disease: Disease
    rate_per_node_hour: float
    eligible_node_hours: float
    host_ids: list[str]
    crashes: list[PlannedCrash] = field(default_factory=list)

    @property
    def expected_crashes(self) -> float:
        return self.rate_per_node_hour * self.eligible_node_hours


@dataclass
class Plan:
    crashes: list[PlannedCrash]
    diseases: list[DiseasePlan]
    telemetry: list[dict[str, Any]]


def _matches(attrs: Mapping[str, str], when: Mapping[str, str]) -> bool:
    return all(attrs.get(k) == v for k, v in when.items())


def interval_attributes(host: Host, iv: Interval) -> dict[str, str]:
    """The host's static attributes with the interval's overrides on top."""
    return {**host.attributes, **iv.overrides}


def eligible_intervals(
    intervals: Iterable[Interval],
    hosts: Mapping[str, Host],
    workload: str,
    when: Mapping[str, str],
    host_ids: Iterable[str] | None = None,
) -> list[Interval]:
    """Intervals of hosts running ``workload`` (and in ``host_ids``, if given)
    whose attributes match every ``when`` entry."""
    allowed = set(host_ids) if host_ids is not None else None
    return [
        iv
        for iv in intervals
        if hosts[iv.host_id].workload == workload
        and (allowed is None or iv.host_id in allowed)
        and _matches(interval_attributes(hosts[iv.host_id], iv), when)
    ]


def _hardware_hosts(
    d: Disease, candidates: list[Interval], window: tuple[int, int], rng: np.random.Generator
) -> list[str]:
    if d.host_ids:
        return list(d.host_ids)
    ids = sorted({iv.host_id for iv in candidates})
    if d.hosts == "all":
        return ids
    # hosts observed over the whole window (reboots aside) are preferred, so a
    # bad host is not one that joined on the last day
    first = {h: min(iv.start for iv in candidates if iv.host_id == h) for h in ids}
    last = {h: max(iv.end for iv in candidates if iv.host_id == h) for h in ids}
    full = [h for h in ids if first[h] == window[0] and last[h] == window[1]] or ids
    count = min(d.hosts or 1, len(full))
    return sorted(str(h) for h in rng.choice(full, size=count, replace=False))


def _faults(d: Disease, rng: np.random.Generator) -> tuple[PlannedFault, ...]:
    out = []
    for k in range(d.max_faults):
        kind = d.faults[int(rng.integers(len(d.faults)))]
        delay = int(rng.integers(20, 200)) if k == 0 else int(rng.integers(20, 80))
        if kind == FaultKind.REG_BITFLIP:
            reg = REGISTERS[int(rng.integers(len(REGISTERS)))]
            out.append(PlannedFault(kind, delay, register=reg, bit=int(rng.integers(64))))
        elif kind == FaultKind.STACK_BITFLIP:
            out.append(
                PlannedFault(kind, delay, offset=int(rng.integers(64)), bit=int(rng.integers(64)))
            )
        elif kind == FaultKind.HEAP_BITFLIP:
            out.append(
                PlannedFault(kind, delay, fraction=float(rng.random()), bit=int(rng.integers(64)))
            )
        else:
            out.append(PlannedFault(kind, delay))
    return tuple(out)


def _argv(
    template: list[str], bug: str, seconds: float, attrs: Mapping[str, str]
) -> tuple[str, ...]:
    return tuple(a.format_map({**attrs, "bug": bug, "seconds": f"{seconds:g}"}) for a in template)


def _telemetry(
    spec: TelemetrySpec, intervals: list[Interval], rng: np.random.Generator, label: str
) -> list[dict[str, Any]]:
    events = []
    for iv, t in poisson_times(intervals, spec.rate_per_node_day / 24, rng):
        ev: dict[str, Any] = {
            "host_id": iv.host_id,
            "ts": t,
            "kind": spec.kind,
            "hardware_indicative": spec.hardware_indicative,
            "planted_by": label,
        }
        if spec.severity:
            ev["severity"] = spec.severity
        if spec.component:
            ev["component"] = spec.component
        events.append(ev)
    return events


def plan(scenario: Scenario, hosts: list[Host], intervals: list[Interval], seed: int) -> Plan:
    """Every crash and telemetry event of the scenario, sorted by time."""
    by_id = {h.host_id: h for h in hosts}
    window = (
        (min(iv.start for iv in intervals), max(iv.end for iv in intervals))
        if intervals
        else (0, 0)
    )
    diseases: list[DiseasePlan] = []
    crashes: list[PlannedCrash] = []
    telemetry: list[dict[str, Any]] = []
    for d in scenario.disease:
        rng = stream(seed, "disease", d.name)
        eligible = eligible_intervals(intervals, by_id, d.workload, d.when)
        host_ids = sorted({iv.host_id for iv in eligible})
        if d.kind == DiseaseKind.HARDWARE:
            host_ids = _hardware_hosts(d, eligible, window, rng)
            eligible = [iv for iv in eligible if iv.host_id in set(host_ids)]
        hours = node_hours(eligible)
        if d.rate_per_node_day is not None:
            rate = d.rate_per_node_day / 24
        else:
            assert d.expected_crashes is not None
            rate = d.expected_crashes / hours if hours else 0.0
        dp = DiseasePlan(d, rate, hours, host_ids)
        w = scenario.workload_named(d.workload)
        for iv, t in poisson_times(eligible, rate, rng):
            attrs = interval_attributes(by_id[iv.host_id], iv)
            hardware = d.kind == DiseaseKind.HARDWARE
            seconds = w.healthy_seconds if hardware else d.timeout_seconds
            dp.crashes.append(
                PlannedCrash(
                    name="",
                    disease=d.name,
                    kind=d.kind,
                    host_id=iv.host_id,
                    time=t,
                    attributes=attrs,
                    workload=w.name,
                    version=attrs["app_version"],
                    bug=d.bug,
                    argv=_argv(w.args, d.bug, seconds, attrs),
                    faults=_faults(d, rng) if hardware else (),
                    pass_signals=tuple(w.pass_signals),
                    timeout_seconds=d.timeout_seconds,
                    stack_kib=d.stack_kib,
                )
            )
        for k, spec in enumerate(d.telemetry):
            telemetry += _telemetry(
                spec, eligible, stream(seed, "telemetry", d.name, str(k)), d.name
            )
        diseases.append(dp)
        crashes += dp.crashes
    for k, spec in enumerate(scenario.telemetry):
        telemetry += _telemetry(spec, intervals, stream(seed, "telemetry", str(k)), "background")
    crashes.sort(key=lambda c: (c.time, c.host_id, c.disease))
    named = {id(c): f"crash-{i:05d}" for i, c in enumerate(crashes, start=1)}
    renamed = {id(c): replace(c, name=named[id(c)]) for c in crashes}
    for dp in diseases:
        dp.crashes = [renamed[id(c)] for c in dp.crashes]
    telemetry.sort(key=lambda e: (e["ts"], e["host_id"], e["kind"]))
    return Plan([renamed[id(c)] for c in crashes], diseases, telemetry)
