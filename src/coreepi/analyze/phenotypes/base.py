"""The phenotype rule interface and its registry.

A phenotype (case definition) is a named, testable predicate over a crash
report plus the core's memory. Each built-in rule lives in its own module of
this package and registers itself with :func:`register`; the package imports
every module, so adding a rule touches only its own file and its test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypeVar

from coreepi.analyze.context import AnalysisContext
from coreepi.model.report import Phenotype

__all__ = ["PhenotypeRule", "register", "registered_rules"]

_REGISTRY: dict[str, type[PhenotypeRule]] = {}


class PhenotypeRule(ABC):
    """One built-in case definition.

    Subclasses set ``name`` (kebab-case, unique), ``hardware_indicative``
    (does firing point at the host's hardware rather than at software? For
    rules that decide per crash: whether it can), and
    ``description`` (one sentence, shown in docs and the UI), and implement
    :meth:`evaluate`.
    """

    name: ClassVar[str]
    hardware_indicative: ClassVar[bool] = False
    description: ClassVar[str]

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
    """Class decorator adding a rule to the built-in set."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two phenotype rules named {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def registered_rules() -> list[PhenotypeRule]:
    """One instance of every registered rule, ordered by name."""
    return [_REGISTRY[name]() for name in sorted(_REGISTRY)]
