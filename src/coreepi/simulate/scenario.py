"""Scenario: a TOML file that plants the epidemiology of a simulated fleet.

A scenario says how many hosts there are and how their attributes are
distributed (including correlated ones), how long they are observed and
which hosts join, leave or reboot, which workloads they run and how new
versions roll out, and which **diseases** crash them: software bugs (rate
per node-time, optionally woken only by an attribute value), hardware
faults injected into healthy runs on chosen hosts, and background noise.
The format is documented with the reference scenario,
``coreepi/simulate/scenarios/reference.toml``.

:func:`load_scenario` validates the whole file and raises
:class:`coreepi.errors.InputError` naming the file and the key
(``reference.toml: disease[2].when.kernel: …``).
"""

from __future__ import annotations

import os
import tomllib
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coreepi.errors import InputError
from coreepi.simulate.workloads import bug_unreachable

__all__ = [
    "SCENARIOS_DIR",
    "Attribute",
    "Disease",
    "DiseaseKind",
    "ExposureSpec",
    "FaultKind",
    "Measure",
    "Rollout",
    "Scenario",
    "ScenarioInfo",
    "TelemetrySpec",
    "Version",
    "Workload",
    "bundled_names",
    "bundled_scenario",
    "load_scenario",
    "resolve_scenario",
]

#: the scenarios shipped with coreepi
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"

#: weights of a categorical distribution: value -> relative weight (> 0)
Weights = dict[str, Annotated[float, Field(gt=0)]]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DiseaseKind(StrEnum):
    """What planted a disease. ``software``: a bug of a workload version;
    ``environment``: a bug woken only by an environment attribute (kernel,
    hypervisor …); ``hardware``: faults of chosen hosts' CPUs or memory,
    injected from outside the program; ``noise``: other bugs at low rates."""

    SOFTWARE = "software"
    ENVIRONMENT = "environment"
    HARDWARE = "hardware"
    NOISE = "noise"


class FaultKind(StrEnum):
    """A hardware fault, applied to a stopped process by the fault injector:
    rsp off by 8 (either way), or one flipped bit in a general-purpose
    register (or rip), a stack word or a heap word."""

    RSP_MINUS_8 = "rsp-8"
    RSP_PLUS_8 = "rsp+8"
    REG_BITFLIP = "reg-bitflip"
    STACK_BITFLIP = "stack-bitflip"
    HEAP_BITFLIP = "heap-bitflip"


class ScenarioInfo(_Model):
    name: str
    description: str = ""
    start: datetime = Field(description="UTC start of the observation window")
    days: float = Field(gt=0, le=3650, description="length of the window in days")
    hosts: int = Field(gt=0, le=100_000)
    host_prefix: str = "h-"

    @field_validator("start")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        v = v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
        if v.microsecond or v.second:
            raise ValueError("start must be a whole minute")
        return v

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=self.days)


class ExposureSpec(_Model):
    """Hosts joining, leaving and rebooting. Fractions are of all hosts."""

    late_join_fraction: float = Field(default=0.0, ge=0, le=1, description="join in the first half")
    early_leave_fraction: float = Field(
        default=0.0, ge=0, le=1, description="leave in the second half"
    )
    reboots_per_day: float = Field(default=0.0, ge=0, description="per host, Poisson")
    reboot_hours: float = Field(default=0.25, gt=0, le=48, description="downtime of one reboot")


class Attribute(_Model):
    """A host attribute: ``values`` (weights), or, when ``depends_on`` names an
    earlier attribute, ``given[parent value]`` for the correlated ones (other
    parent values use ``values``)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    values: Weights
    depends_on: str | None = None
    given: dict[str, Weights] = Field(default_factory=dict)
    hidden: bool = Field(
        default=False,
        description="a condition the workloads see (program arguments, `when`) but no "
        "column of hosts.csv carries: coreepi must find it through the [[measure]]s it drives",
    )

    @field_validator("values")
    @classmethod
    def _non_empty(cls, v: Weights) -> Weights:
        if not v:
            raise ValueError("needs at least one value")
        return v

    @model_validator(mode="after")
    def _given_needs_parent(self) -> Attribute:
        if self.given and self.depends_on is None:
            raise ValueError("'given' needs 'depends_on'")
        return self


class Spread(_Model):
    """A log-normal distribution: ``median`` and ``sigma`` (of the log)."""

    median: float = Field(gt=0)
    sigma: float = Field(default=0.5, ge=0)


class Measure(_Model):
    """A numeric, noisy host attribute (exceptions per second, signals per second, load),
    drawn log-normal per host: ``median``/``sigma``, or ``given[value]`` of the attribute it
    ``depends_on`` (a hidden workload condition shows only through measures like these)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    depends_on: str | None = None
    median: float = Field(gt=0)
    sigma: float = Field(default=0.5, ge=0)
    given: dict[str, Spread] = Field(default_factory=dict)

    def spread(self, parent_value: str | None) -> Spread:
        """The distribution for a host whose parent attribute has ``parent_value``."""
        if parent_value is not None and parent_value in self.given:
            return self.given[parent_value]
        return Spread(median=self.median, sigma=self.sigma)


class Version(_Model):
    name: str
    defines: list[str] = Field(default_factory=list, description="-D flags, e.g. APP_VERSION=2")


class Workload(_Model):
    """A real program, shipped as source in ``coreepi/simulate/workloads/``.

    ``args`` is the argv template: ``{bug}``, ``{seconds}`` and any host
    attribute in braces. ``pass_signals`` are handed to the program silently
    under gdb (a signal-heavy program would stop at each)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    source: str
    versions: list[Version] = Field(min_length=1)
    args: list[str] = Field(default_factory=lambda: ["{bug}", "{seconds}"])
    bugs: list[str] = Field(default_factory=list, description="bug names the program accepts")
    pass_signals: list[str] = Field(default_factory=list)
    healthy_seconds: float = Field(
        default=4.0, gt=0, le=60, description="run length for fault injection"
    )

    @field_validator("source")
    @classmethod
    def _known_source(cls, v: str) -> str:
        if "/" in v or not resources.files("coreepi.simulate.workloads").joinpath(v).is_file():
            raise ValueError(f"no workload source {v!r} in coreepi/simulate/workloads/")
        return v


class Rollout(_Model):
    """Hosts of ``workload`` move to ``version`` at times spread uniformly over
    [start_day, end_day] (days from the window start); ``fraction`` of them
    (chosen at random) take part; with ``when = {attribute = value}`` only
    hosts whose static attributes match every entry do (a rollout that goes
    to one hardware generation first is two rollouts)."""

    workload: str
    version: str
    start_day: float = Field(ge=0)
    end_day: float = Field(ge=0)
    fraction: float = Field(default=1.0, gt=0, le=1)
    when: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> Rollout:
        if self.end_day < self.start_day:
            raise ValueError("end_day is before start_day")
        return self


class TelemetrySpec(_Model):
    """Telemetry events (``coreepi.model.events.TelemetryEvent``) at a rate per
    node-day: with a disease, on its hosts; alone, on any host."""

    kind: Literal["mce", "edac_ce", "edac_ue", "xid", "aer", "sigbus_mce", "other"]
    rate_per_node_day: float = Field(gt=0)
    severity: str | None = None
    component: str | None = None
    hardware_indicative: bool = True


class Disease(_Model):
    """A planted cause of crashes.

    Exactly one of ``rate_per_node_day`` and ``expected_crashes`` (the rate is
    then that number over the eligible node-time). Eligible node-time: the
    exposure of hosts running ``workload`` whose attributes (static or of the
    interval, e.g. ``app_version``) match every ``when`` entry. A hardware
    disease strikes only ``hosts`` hosts (a count chosen at random among the
    eligible hosts observed for the whole window, or ``"all"``) or the listed
    ``host_ids``; each of its crashes is a healthy run of the workload into
    which ``faults`` are injected. Other kinds run the workload with ``bug``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: DiseaseKind
    description: str = ""
    workload: str
    bug: str = "none"
    when: dict[str, str] = Field(default_factory=dict)
    rate_per_node_day: float | None = Field(default=None, gt=0)
    expected_crashes: float | None = Field(default=None, gt=0)
    hosts: int | Literal["all"] | None = None
    host_ids: list[str] = Field(default_factory=list)
    faults: list[FaultKind] = Field(default_factory=list)
    max_faults: int = Field(default=12, ge=1, le=100, description="faults per run before giving up")
    telemetry: list[TelemetrySpec] = Field(default_factory=list)
    expect_phenotype: str | None = None
    expect_signature: str | None = None
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    stack_kib: int | None = Field(
        default=None, ge=64, description="RLIMIT_STACK of the crashing run"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Disease:
        if (self.rate_per_node_day is None) == (self.expected_crashes is None):
            raise ValueError("give exactly one of rate_per_node_day and expected_crashes")
        hardware = self.kind == DiseaseKind.HARDWARE
        if hardware and not self.faults:
            raise ValueError("a hardware disease needs 'faults'")
        if not hardware and (self.faults or self.hosts is not None or self.host_ids):
            raise ValueError("'faults', 'hosts' and 'host_ids' are for hardware diseases")
        if hardware and self.bug != "none":
            raise ValueError("a hardware disease injects faults into a healthy run (bug = 'none')")
        if hardware and self.hosts is not None and self.host_ids:
            raise ValueError("give 'hosts' or 'host_ids', not both")
        return self


class Scenario(_Model):
    scenario: ScenarioInfo
    exposure: ExposureSpec = ExposureSpec()
    attribute: list[Attribute] = Field(min_length=1)
    measure: list[Measure] = Field(default_factory=list)
    workload: list[Workload] = Field(min_length=1)
    rollout: list[Rollout] = Field(default_factory=list)
    disease: list[Disease] = Field(default_factory=list)
    telemetry: list[TelemetrySpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        attrs = [a.name for a in self.attribute]
        _unique(attrs, "attribute", "name")
        _unique([w.name for w in self.workload], "workload", "name")
        _unique([d.name for d in self.disease], "disease", "name")
        for i, a in enumerate(self.attribute):
            if a.depends_on is not None and a.depends_on not in attrs[:i]:
                raise _KeyError(
                    f"attribute[{i}].depends_on", f"{a.depends_on!r} is not an earlier attribute"
                )
            parent = self.attribute[attrs.index(a.depends_on)] if a.depends_on else None
            for value in a.given:
                if parent is not None and value not in parent.values:
                    raise _KeyError(
                        f"attribute[{i}].given.{value}", f"not a value of {a.depends_on!r}"
                    )
        _unique(attrs + [m.name for m in self.measure], "measure", "name")
        for i, m in enumerate(self.measure):
            if m.depends_on is not None and m.depends_on not in attrs:
                raise _KeyError(f"measure[{i}].depends_on", f"{m.depends_on!r} is not an attribute")
        if "workload" not in attrs:
            raise _KeyError(
                "attribute", "needs an attribute named 'workload' (which workload each host runs)"
            )
        if "app_version" in attrs:
            raise _KeyError("attribute", "'app_version' comes from the workloads and rollouts")
        workload_attr = self.attribute[attrs.index("workload")]
        names = {w.name: w for w in self.workload}
        for value in _all_values(workload_attr):
            if value not in names:
                raise _KeyError("attribute.workload", f"value {value!r} is not a [[workload]]")
        for i, r in enumerate(self.rollout):
            if r.workload not in names:
                raise _KeyError(f"rollout[{i}].workload", f"unknown workload {r.workload!r}")
            if r.version not in {v.name for v in names[r.workload].versions}:
                raise _KeyError(f"rollout[{i}].version", f"not a version of {r.workload!r}")
            if r.end_day > self.scenario.days:
                raise _KeyError(f"rollout[{i}].end_day", "after the end of the window")
            for key in r.when:
                if key not in attrs:
                    raise _KeyError(f"rollout[{i}].when.{key}", "not a host attribute")
        known = set(attrs) | {"app_version"}
        for i, d in enumerate(self.disease):
            if d.workload not in names:
                raise _KeyError(f"disease[{i}].workload", f"unknown workload {d.workload!r}")
            w = names[d.workload]
            if d.bug != "none" and d.bug not in w.bugs:
                raise _KeyError(
                    f"disease[{i}].bug", f"{d.bug!r} is not a bug of {w.name} ({', '.join(w.bugs)})"
                )
            for key in d.when:
                if key not in known:
                    raise _KeyError(
                        f"disease[{i}].when.{key}", "not a host attribute or app_version"
                    )
            _check_bug_fires(i, d, w)
            for j, hid in enumerate(d.host_ids):
                if not self.is_host_id(hid):
                    raise _KeyError(f"disease[{i}].host_ids[{j}]", f"no host {hid!r}")
        for w in self.workload:
            for arg in w.args:
                for field in _placeholders(arg):
                    if field not in known | {"bug", "seconds"}:
                        raise _KeyError(
                            f"workload.{w.name}.args",
                            f"{{{field}}} is not bug, seconds or a host attribute",
                        )
        return self

    # -- helpers

    @property
    def columns(self) -> list[str]:
        """hosts.csv's columns: the attributes that are not hidden, then the measures."""
        return [a.name for a in self.attribute if not a.hidden] + [m.name for m in self.measure]

    def measures_of(self, attribute: str) -> list[str]:
        """The measures an attribute drives (how a hidden condition shows)."""
        return [m.name for m in self.measure if m.depends_on == attribute]

    def host_ids(self) -> list[str]:
        """``h-000`` … in order (zero-padded to the width of the count)."""
        width = max(3, len(str(self.scenario.hosts - 1)))
        return [f"{self.scenario.host_prefix}{i:0{width}d}" for i in range(self.scenario.hosts)]

    def is_host_id(self, host_id: str) -> bool:
        return host_id in set(self.host_ids())

    def workload_named(self, name: str) -> Workload:
        return next(w for w in self.workload if w.name == name)


class _KeyError(ValueError):
    """A validation error at a dotted key path."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def _check_bug_fires(i: int, d: Disease, w: Workload) -> None:
    """A bug compiled into only some builds (kvstore's null-deref-v2 needs
    APP_VERSION=2) must not be planned on a version built without it: its
    runs would end healthy, attempt after attempt, and make no core."""
    wanted = d.when.get("app_version")
    for v in w.versions:
        if wanted is not None and v.name != wanted:
            continue
        why = bug_unreachable(w.source, d.bug, v.defines)
        if why is not None:
            fix = ("name a version built with it in when.app_version" if wanted is None
                   else "build that version with it, or pick another")
            raise _KeyError(f"disease[{i}].bug",
                            f"{d.bug!r} can never fire in {w.name} {v.name}: {why}; {fix}")


def _unique(names: list[str], table: str, key: str) -> None:
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n in seen:
            raise _KeyError(f"{table}[{i}].{key}", f"{n!r} is given twice")
        seen.add(n)


def _all_values(a: Attribute) -> set[str]:
    return set(a.values) | {v for w in a.given.values() for v in w}


def _placeholders(arg: str) -> list[str]:
    import string

    return [f for _, f, _, _ in string.Formatter().parse(arg) if f]


def bundled_scenario(name: str = "reference") -> Path:
    """Path of a scenario shipped with coreepi (``reference``, ``reference-small``)."""
    path = SCENARIOS_DIR / f"{name}.toml"
    if not path.is_file():
        raise InputError(name, "no such bundled scenario")
    return path


def bundled_names() -> list[str]:
    """Names of the bundled scenarios (``reference``, ``reference-small``, ...)."""
    return sorted(p.stem for p in SCENARIOS_DIR.glob("*.toml"))


def resolve_scenario(scenario: str | os.PathLike[str] | None) -> Path:
    """A scenario file: a path, or the name of a bundled scenario
    (:func:`bundled_names`); None is the reference scenario. Raises
    :class:`InputError` when it is neither."""
    if scenario is None:
        return bundled_scenario("reference")
    path = Path(scenario)
    if path.is_file():
        return path.resolve()
    if path.suffix == "" and "/" not in str(scenario):
        if (SCENARIOS_DIR / f"{scenario}.toml").is_file():
            return bundled_scenario(str(scenario))
        raise InputError(str(scenario), "no such scenario file or bundled scenario name "
                         f"(bundled: {', '.join(bundled_names())})")
    raise InputError(str(scenario), "no such scenario file (or bundled scenario name)")


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file. Raises :class:`InputError` naming
    the file and the offending key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(str(path), "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f"not TOML: {exc}") from None
    return scenario_from_dict(data, str(path))


def scenario_from_dict(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate already-decoded scenario data; errors name ``source``."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        ctx_error = (first.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _KeyError):
            raise InputError(source, str(ctx_error)) from None
        where = ".".join(_loc(p) for p in first["loc"]).replace(".[", "[")
        msg = first["msg"].removeprefix("Value error, ")
        raise InputError(source, f"{where or '(top level)'}: {msg}") from None


def _loc(part: int | str) -> str:
    return f"[{part}]" if isinstance(part, int) else str(part)
