"""The phenotype rule interface and its registry.

A phenotype (case definition) is a named, testable predicate over a crash
report plus, for a core, the process memory. Every phenotype decision goes
through this one interface, for every artifact kind: each built-in rule
lives in its own module of this package, declares the kinds it applies to
(``kinds``: native, jvm, kernel) and registers itself with
:func:`register`; the package imports every module, so adding a rule
touches only its own file and its test. User case definitions
(:class:`coreepi.analyze.casedefs.CaseDefinition`) are rules of the same
interface, loaded from a file instead of registered.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypeVar

from coreepi.analyze.context import KINDS, AnalysisContext, Kind
from coreepi.model.report import Phenotype

__all__ = ["PhenotypeRule", "register", "registered_rules"]

_REGISTRY: dict[str, type[PhenotypeRule]] = {}


class PhenotypeRule(ABC):
    """One case definition.

    Subclasses set ``name`` (kebab-case, unique), ``kinds`` (the artifact
    kinds it applies to; native only unless set), ``hardware_indicative``
    (does firing point at the host's hardware rather than at software? For
    rules that decide per crash: whether it can), and ``description`` (one
    sentence, shown in docs and the UI), and implement :meth:`evaluate`.
    """

    name: str
    kinds: ClassVar[frozenset[Kind]] = frozenset({"native"})
    hardware_indicative: bool = False
    description: str

    @abstractmethod
    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        """Return the phenotype with its evidence when the rule fires, else None.
        May raise: the pipeline turns an exception into a warning."""

    def fire(
        self,
        confidence: float | None = None,
        *,
        hardware_indicative: bool | None = None,
        **evidence: Any,
    ) -> Phenotype:
        """Build this rule's Phenotype from keyword evidence. A rule whose
        verdict depends on the crash (illegal-instruction on a valid opcode,
        stack-misaligned in compiled code) passes ``hardware_indicative``;
        otherwise the class's value holds."""
        return Phenotype(
            name=self.name,
            hardware_indicative=(
                self.hardware_indicative if hardware_indicative is None else hardware_indicative
            ),
            confidence=confidence,
            evidence=evidence,
        )


R = TypeVar("R", bound=type[PhenotypeRule])


def register(cls: R) -> R:
    """Class decorator adding a rule to the built-in set. Raises ValueError
    for a second rule of the same name or an unknown kind."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two phenotype rules named {cls.name!r}")
    if not cls.kinds or not cls.kinds <= KINDS:
        raise ValueError(f"phenotype rule {cls.name!r}: kinds {sorted(cls.kinds)} not in {KINDS}")
    _REGISTRY[cls.name] = cls
    return cls


def registered_rules(kind: Kind | None = None) -> list[PhenotypeRule]:
    """One instance of every registered rule that applies to ``kind`` (every
    rule when None), ordered by name."""
    return [
        _REGISTRY[name]()
        for name in sorted(_REGISTRY)
        if kind is None or kind in _REGISTRY[name].kinds
    ]
