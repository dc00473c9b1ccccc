"""User case definitions: named predicates over a CrashReport, kept in a TOML
file and written in CEL, the Common Expression Language
(https://github.com/google/cel-spec; the ``cel-python`` package).

CEL is not Turing-complete and has no side effects, so a case definition
file from anyone is safe to evaluate: no ``eval``, no imports, no loops
that do not end. Format (see docs/phenotypes.md and examples/case-defs.toml)::

    [[case]]
    name = "segv-in-parser"
    description = "SIGSEGV with a parser frame on the crashing stack"
    when = 'signal == "SIGSEGV" && functions.exists(f, f.startsWith("Parser::"))'
    hardware_indicative = false

A case definition is a :class:`~coreepi.analyze.phenotypes.base.PhenotypeRule`
like the built-ins, and applies to every artifact kind (cores, hs_err logs,
kernel reports): :func:`coreepi.analyze.analyze` evaluates the definitions
it is given in file order after the built-in rules of the report's kind; a
definition that fires is added to ``report.phenotypes`` like a built-in
(evidence: the file and the expression), and later definitions see it in
``phenotypes``. A file that cannot be read, is not TOML, or holds a bad
definition or expression raises :class:`coreepi.errors.InputError` naming
the file and the case; an expression that fails on one report (a missing
key, a type mismatch) becomes a warning in ``report.analysis.warnings``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import celpy
from celpy import celtypes

from coreepi.analyze.context import KINDS, AnalysisContext, Kind
from coreepi.analyze.phenotypes import builtin_names
from coreepi.analyze.phenotypes.base import PhenotypeRule
from coreepi.errors import InputError
from coreepi.model.report import CrashReport, Phenotype

__all__ = [
    "CaseDefinition",
    "case_variables",
    "evaluate_case_definitions",
    "load_case_definitions",
]

CASE_KEYS = {"name", "description", "when", "hardware_indicative"}
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class CaseDefinition(PhenotypeRule):
    """One user case definition, its expression compiled: a phenotype rule
    of every artifact kind."""

    kinds: ClassVar[frozenset[Kind]] = KINDS
    name: str
    when: str
    description: str = ""
    hardware_indicative: bool = False
    source: str = "<string>"  # the file it came from
    program: Any = field(default=None, repr=False, compare=False)  # celpy Runner

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        """The phenotype when the expression is true on ``ctx.report`` (with
        the phenotypes fired so far). An expression that fails or gives no
        boolean does not fire: a warning naming the definition and its file
        goes to ``report.analysis.warnings``."""
        variables = _variables(ctx)
        activation = {k: celpy.json_to_cel(v) for k, v in variables.items()}
        warnings = ctx.report.analysis.warnings
        try:
            result = self.program.evaluate(activation)
        except celpy.CELEvalError as exc:
            warnings.append(
                f"case definition {self.name!r} ({self.source}): "
                f"evaluation error: {_eval_error_text(exc)}"
            )
            return None
        if not isinstance(result, celtypes.BoolType):
            warnings.append(
                f"case definition {self.name!r} ({self.source}): expression gave "
                f"{type(result).__name__}, not a boolean; treated as not firing"
            )
            return None
        if not bool(result):
            return None
        return self.fire(
            case_definition=self.source, expression=self.when, description=self.description
        )

    @classmethod
    def compile(
        cls,
        name: str,
        when: str,
        *,
        description: str = "",
        hardware_indicative: bool = False,
        source: str = "<string>",
    ) -> CaseDefinition:
        """Compile ``when``; raises InputError(source, …) when it is not valid CEL."""
        env = celpy.Environment()
        try:
            program = env.program(env.compile(when))
        except celpy.CELParseError as exc:
            detail = " ".join(str(exc).split())
            raise InputError(source, f"case {name!r}: bad expression: {detail}") from None
        return cls(name, when, description, hardware_indicative, source, program)


def load_case_definitions(path: str | os.PathLike[str]) -> list[CaseDefinition]:
    """Read and compile the case definitions of a TOML file (``[[case]]`` tables)."""
    source = os.fspath(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(source, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(source, f"cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(source, f"not valid TOML: {exc}") from None
    unknown = set(data) - {"case"}
    if unknown:
        raise InputError(
            source, f"unknown top-level keys {sorted(unknown)} (expected [[case]] tables)"
        )
    cases = data.get("case", [])
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise InputError(source, "'case' must be an array of tables ([[case]])")
    reserved = builtin_names()
    definitions: list[CaseDefinition] = []
    for number, case in enumerate(cases, start=1):
        label = case.get("name") if isinstance(case.get("name"), str) else f"#{number}"
        extra = set(case) - CASE_KEYS
        if extra:
            raise InputError(source, f"case {label!r}: unknown keys {sorted(extra)}")
        name, when = case.get("name"), case.get("when")
        if not isinstance(name, str) or not name.strip():
            raise InputError(source, f"case {label!r}: 'name' must be a non-empty string")
        if not isinstance(when, str) or not when.strip():
            raise InputError(source, f"case {name!r}: 'when' must be a non-empty expression string")
        description = case.get("description", "")
        hardware = case.get("hardware_indicative", False)
        if not isinstance(description, str):
            raise InputError(source, f"case {name!r}: 'description' must be a string")
        if not isinstance(hardware, bool):
            raise InputError(source, f"case {name!r}: 'hardware_indicative' must be true or false")
        if name in reserved:
            raise InputError(source, f"case {name!r}: the name of a built-in phenotype")
        if any(d.name == name for d in definitions):
            raise InputError(source, f"case {name!r}: defined twice")
        definitions.append(
            CaseDefinition.compile(
                name, when, description=description, hardware_indicative=hardware, source=source
            )
        )
    return definitions


def case_variables(report: CrashReport) -> dict[str, Any]:
    """The variables an expression sees (plain JSON values).

    ``report``: the whole report as JSON (addresses are ``0x…`` strings).
    Shortcuts, never null (``""`` or ``-1`` when unknown): ``signal`` (name,
    e.g. "SIGSEGV"), ``signal_number``, ``si_code`` (name, e.g.
    "SEGV_MAPERR"), ``si_code_number``, ``fault_address`` (int; -1 also
    above 2**63-1), ``arch``, ``exe``; lists: ``phenotypes`` (names),
    ``modules`` (paths), ``module_names`` (file names), ``functions`` (the
    crashed thread's function names, innermost first), ``frames`` (its
    frames); maps without their unknown keys (test with ``has()``):
    ``runtime``, ``process``, ``host``.
    """
    data = report.model_dump(mode="json")
    sig = report.signal
    crashed = report.crashed_thread
    fault = sig.fault_address if sig is not None else None
    frames_json = next((t["frames"] for t in data["threads"] if t.get("crashed")), [])
    # CEL has no null-tolerant comparison ('5 < null' and '"a" != null' are
    # errors), so the shortcuts are never null: "" and -1 mean unknown, and
    # the nested views drop unknown keys so that has(host.kernel) tests them.
    return {
        "report": data,
        "signal": (sig.name or "") if sig else "",
        "signal_number": sig.number if sig else -1,
        "si_code": (sig.si_code_name or "") if sig else "",
        "si_code_number": sig.si_code if sig and sig.si_code is not None else -1,
        "fault_address": fault if fault is not None and fault <= INT64_MAX else -1,
        "arch": report.arch or "",
        "exe": report.process.exe or "",
        "phenotypes": [p.name for p in report.phenotypes],
        "modules": [m.path for m in report.modules],
        "module_names": [m.path.rsplit("/", 1)[-1] for m in report.modules],
        "functions": [f.function for f in crashed.frames if f.function] if crashed else [],
        "frames": [_present(f) for f in frames_json],
        "runtime": _present(data["runtime"]),
        "process": _present(data["process"]),
        "host": _present(data["host"]),
    }


def _present(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` without its null entries."""
    return {k: v for k, v in value.items() if v is not None}


def _variables(ctx: AnalysisContext) -> dict[str, Any]:
    """:func:`case_variables` of the report, made once per analysis, with
    ``phenotypes`` (and the report's) as fired so far."""
    variables: dict[str, Any] | None = ctx.shared.get("case_variables")
    if variables is None:
        variables = case_variables(ctx.report)
        variables["report"]["phenotypes"] = [p.model_dump(mode="json") for p in ctx.fired]
        ctx.shared["case_variables"] = variables
    variables["phenotypes"] = [p.name for p in ctx.fired]
    return variables


def evaluate_case_definitions(
    report: CrashReport, definitions: list[CaseDefinition]
) -> list[Phenotype]:
    """The phenotypes of the definitions that fire on ``report`` (already
    analysed: its phenotypes are those the expressions see), in file order.
    Does not change ``report.phenotypes``, but does record evaluation errors
    as warnings in ``report.analysis.warnings``. :func:`coreepi.analyze.analyze`
    runs the definitions as rules; this runs them alone."""
    ctx = AnalysisContext(report, fired=list(report.phenotypes))
    for definition in definitions:
        phenotype = definition.evaluate(ctx)
        if phenotype is not None:
            ctx.fired.append(phenotype)
    return ctx.fired[len(report.phenotypes) :]


def _eval_error_text(exc: celpy.CELEvalError) -> str:
    """CELEvalError's args are (message, exception class, detail)."""
    if exc.args and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)
