"""Built-in phenotypes (case definitions). One module per rule; importing this
package imports them all, which registers them."""

from __future__ import annotations

import importlib
import pkgutil

from coreepi.analyze.phenotypes.base import PhenotypeRule, register, registered_rules

__all__ = ["PhenotypeRule", "builtin_rules", "register"]

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")


def builtin_rules() -> list[PhenotypeRule]:
    """Every built-in phenotype rule, ordered by name."""
    return registered_rules()
