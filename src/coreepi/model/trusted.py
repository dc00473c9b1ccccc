"""Models built from values a parser made itself, without validation.

Validation is for trust boundaries: JSON from disk or HTTP, sidecars, rows
read back from the store (``CrashReport.model_validate_json`` and friends).
A log parser builds thousands of frames per MiB from values its own regexps
have already typed (ints from ``int(…, 16)``, strings from match groups);
pydantic's validation of them (a Python call per ``Address`` field) cost
about as much as the parsing itself. :func:`trusted` builds the same object
without it: the same ``__dict__`` in field order (so ``model_dump_json()``
is byte-identical), defaults and default factories filled, the same
``model_fields_set``, and the model's own field normalisers (its
``field_validator`` functions, e.g. ``CrashReport.captured_at`` to UTC)
still applied.

What the caller promises: every value already has its field's type and
range (an ``Address`` is an ``int`` in 0 … 2**64-1, a float field gets a
float, a list field a list, an enum field its enum). Unknown or missing
required fields still raise ``TypeError``. A later assignment is validated
as usual (the models set ``validate_assignment``).

Tests prove the promise on real corpora: inside :func:`validating` every
:func:`trusted` call validates instead, and the results must be equal and
serialise byte-identically (``tests/test_trusted_models.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["trusted", "validating"]

M = TypeVar("M", bound=BaseModel)

_VALIDATE: ContextVar[bool] = ContextVar("coreepi_validate_trusted", default=False)
_REQUIRED = object()  # stands for "no default" in a plan
_IMMUTABLE = (type(None), bool, int, float, str, bytes, tuple, frozenset, Enum)
_set = object.__setattr__


@dataclass(frozen=True)
class _Plan:
    """How to fill one model class: every field in field order with its
    default (a placeholder where the caller must give it or a factory makes
    it), the default factories, the required and known names, and the field
    normalisers by name."""

    defaults: dict[str, Any]
    factories: tuple[tuple[str, Callable[[], Any]], ...]
    required: frozenset[str]
    names: frozenset[str]
    normalisers: tuple[tuple[str, Callable[[Any], Any]], ...]


_PLANS: dict[type[BaseModel], _Plan] = {}


def _copier(default: Any) -> Callable[[], Any]:
    return lambda: copy.deepcopy(default)


def _plan(cls: type[BaseModel]) -> _Plan:
    """Read ``cls``'s fields once. Refuses models whose validation does more
    than per-field normalising (model validators, validators that need the
    validation context): those must be validated."""
    decorators = cls.__pydantic_decorators__
    if decorators.model_validators or decorators.root_validators or cls.__private_attributes__:
        raise TypeError(f"{cls.__name__} has model validators or private state: validate it")
    fields = []
    for name, info in cls.model_fields.items():
        if info.default_factory is not None:
            fields.append((name, _REQUIRED, info.default_factory))
        elif info.is_required():
            fields.append((name, _REQUIRED, None))
        elif isinstance(info.default, _IMMUTABLE):
            fields.append((name, info.default, None))
        else:  # a mutable plain default: each object gets its own copy, as validation does
            fields.append((name, _REQUIRED, _copier(info.default)))
    normalisers = []
    for attribute, decorator in decorators.field_validators.items():
        if decorator.info.mode not in ("before", "after", "plain"):
            raise TypeError(f"{cls.__name__}.{attribute}: a wrap validator: build it with validation")
        bound = getattr(cls, attribute)
        normalisers += [(name, bound) for name in decorator.info.fields]
    plan = _Plan(
        defaults={name: None if default is _REQUIRED else default for name, default, _ in fields},
        factories=tuple((name, factory) for name, _, factory in fields if factory is not None),
        required=frozenset(n for n, d, f in fields if d is _REQUIRED and f is None),
        names=frozenset(cls.model_fields),
        normalisers=tuple(normalisers),
    )
    _PLANS[cls] = plan
    return plan


def trusted(cls: type[M], /, **values: Any) -> M:
    """A ``cls`` holding ``values`` as given (already of their fields' types
    and ranges: see the module docstring), without validation; inside
    :func:`validating`, ``cls(**values)`` instead. Raises ``TypeError`` for
    a field ``cls`` does not have or a required one missing."""
    if _VALIDATE.get():
        return cls(**values)
    plan = _PLANS.get(cls) or _plan(cls)
    if not values.keys() <= plan.names or not plan.required <= values.keys():
        unknown = sorted(values.keys() - plan.names)
        missing = sorted(plan.required - values.keys())
        raise TypeError(f"{cls.__name__}: unknown fields {unknown}, missing fields {missing}")
    for name, normalise in plan.normalisers:
        if name in values:
            values[name] = normalise(values[name])
    # every field in field order (the order model_dump_json writes), then
    # the given values in place, then a fresh container per missing factory
    data = plan.defaults.copy()
    data.update(values)
    for name, factory in plan.factories:
        if name not in values:
            data[name] = factory()
    obj = cls.__new__(cls)
    _set(obj, "__dict__", data)
    _set(obj, "__pydantic_fields_set__", set(values))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


@contextmanager
def validating() -> Iterator[None]:
    """Within this block (this thread or task), :func:`trusted` validates:
    for tests that compare both paths."""
    token = _VALIDATE.set(True)
    try:
        yield
    finally:
        _VALIDATE.reset(token)
