"""Hosts and their static attributes, drawn from a scenario's distributions.

Each attribute is drawn in the order the scenario lists them; an attribute
that ``depends_on`` an earlier one draws from the distribution ``given`` the
host's value of that one (e.g. a hardware generation that mostly runs one
kernel), else from its own ``values``. Measures (numeric, noisy: exceptions
per second, load) are drawn afterwards from their own random stream, so
adding one leaves every host's attributes as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coreepi.simulate.scenario import Attribute, Scenario

__all__ = ["Host", "add_measures", "draw_value", "make_hosts"]


@dataclass(frozen=True, slots=True)
class Host:
    """One simulated host: its id and static attributes (hosts.csv columns)."""

    host_id: str
    attributes: dict[str, str]

    @property
    def workload(self) -> str:
        return self.attributes["workload"]


def draw_value(attribute: Attribute, parent_value: str | None, rng: np.random.Generator) -> str:
    """One value of ``attribute`` (given the parent's value, if it depends on one)."""
    weights = attribute.values
    if parent_value is not None and parent_value in attribute.given:
        weights = attribute.given[parent_value]
    values = list(weights)
    p = np.array([weights[v] for v in values], dtype=float)
    return values[int(rng.choice(len(values), p=p / p.sum()))]


def make_hosts(scenario: Scenario, rng: np.random.Generator) -> list[Host]:
    """The scenario's hosts, in host-id order, attributes drawn with ``rng``."""
    hosts = []
    for host_id in scenario.host_ids():
        attrs: dict[str, str] = {}
        for a in scenario.attribute:
            parent = attrs[a.depends_on] if a.depends_on else None
            attrs[a.name] = draw_value(a, parent, rng)
        hosts.append(Host(host_id, attrs))
    return hosts


def add_measures(scenario: Scenario, hosts: list[Host], rng: np.random.Generator) -> list[Host]:
    """The hosts with each scenario measure drawn log-normal (formatted with 3 significant
    digits, as an agent would report a rate)."""
    out = []
    for h in hosts:
        attrs = dict(h.attributes)
        for m in scenario.measure:
            sp = m.spread(attrs.get(m.depends_on) if m.depends_on else None)
            attrs[m.name] = f"{float(rng.lognormal(np.log(sp.median), sp.sigma)):.3g}"
        out.append(Host(h.host_id, attrs))
    return out
