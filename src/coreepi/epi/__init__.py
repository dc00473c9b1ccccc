"""coreepi.epi: the epidemiology engine — crashes studied as a population, with denominators.

Pure functions over pandas tables (no database, no I/O); the table contracts
are in :mod:`coreepi.epi.tables`, the statistics and attribution rules in
``docs/epidemiology.md``. The entry point is :func:`analyze_fleet`::

    findings = analyze_fleet(crashes, exposure, telemetry, since=..., until=...)
    findings.model_dump_json()

Modules (one job each): ``tables`` (contracts), ``rates`` (exact Poisson and
conditional binomial statistics, BH), ``exposure`` (node-days, attributes,
strata), ``groups`` (groups and crude associations), ``hosts`` (concentration,
SIR, diversity, telemetry), ``confounding`` (Poisson GLM), ``facts`` (what the
rules read, and the evidence items they yield), ``attribution`` (the rules),
``digest`` (per-group and per-host digests of the tables), ``assemble``
(tables → findings), ``models`` (FleetFindings: evidence as data, never
prose — ``coreepi.reporting.phrases`` words it), ``analysis`` (the pipeline
of named steps).
"""

from coreepi.epi.analysis import analyze_fleet
from coreepi.epi.config import EpiConfig
from coreepi.epi.models import (
    FINDINGS_SCHEMA_VERSION,
    Association,
    AttributeSummary,
    Attribution,
    Concentration,
    DayCount,
    Evidence,
    FleetFindings,
    GroupFinding,
    HostCount,
    HostFinding,
    NamedCount,
    TelemetrySummary,
    Verdict,
    Window,
)
from coreepi.epi.rates import bh_qvalues, incidence_rate, poisson_ci, rate_ratio
from coreepi.epi.tables import (
    CRASH_COLUMNS,
    EXPOSURE_COLUMNS,
    TELEMETRY_COLUMNS,
    TableError,
    validate_crashes,
    validate_exposure,
    validate_telemetry,
)

__all__ = [
    "CRASH_COLUMNS",
    "EXPOSURE_COLUMNS",
    "FINDINGS_SCHEMA_VERSION",
    "TELEMETRY_COLUMNS",
    "Association",
    "AttributeSummary",
    "Attribution",
    "Concentration",
    "DayCount",
    "EpiConfig",
    "Evidence",
    "FleetFindings",
    "GroupFinding",
    "HostCount",
    "HostFinding",
    "NamedCount",
    "TableError",
    "TelemetrySummary",
    "Verdict",
    "Window",
    "analyze_fleet",
    "bh_qvalues",
    "incidence_rate",
    "poisson_ci",
    "rate_ratio",
    "validate_crashes",
    "validate_exposure",
    "validate_telemetry",
]
