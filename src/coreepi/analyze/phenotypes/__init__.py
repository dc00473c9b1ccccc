"""Built-in phenotypes (case definitions). One module per rule; importing this
package imports them all, which registers them."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Final

from coreepi.analyze.context import Kind
from coreepi.analyze.phenotypes.base import PhenotypeRule, register, registered_rules

__all__ = ["ORDER", "PhenotypeRule", "builtin_names", "builtin_rules", "register"]

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

#: Evaluation (and report) order of a kind's rules where it is not by name;
#: rules not listed follow, by name. An hs_err report lists what the JVM
#: says first, then the native faults read from its siginfo; a kernel report
#: its crash type first (ingest and the text view take it as the headline),
#: then what the taint says.
ORDER: Final[dict[Kind, tuple[str, ...]]] = {
    "jvm": (
        "jvm-native-oom",
        "jvm-internal-error",
        "jvm-crash-in-native-library",
        "jvm-crash-in-jit-code",
        "null-deref",
        "sigbus-mce",
        "illegal-instruction",
        "pc-not-executable",
        "stack-overflow",
        "stack-misaligned",
    ),
    "kernel": ("kernel-crash-type", "kernel-taint-machine-check", "kernel-taint-out-of-tree"),
}


def builtin_rules(kind: Kind = "native") -> list[PhenotypeRule]:
    """The built-in phenotype rules that apply to ``kind``, in evaluation
    order (:data:`ORDER`, then by name)."""
    order = ORDER.get(kind, ())
    rank = {name: i for i, name in enumerate(order)}
    rules = registered_rules(kind)
    return sorted(rules, key=lambda rule: (rank.get(rule.name, len(order)), rule.name))


def builtin_names() -> set[str]:
    """The names of every built-in rule, of every kind (reserved: a user
    case definition cannot take one)."""
    return {rule.name for rule in registered_rules()}
