"""jvm-internal-error: a HotSpot assertion, ``guarantee``, ``fatal`` or
``ShouldNotReachHere`` (``Internal Error (file:line)``)."""

from __future__ import annotations

import re
from typing import Final

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import error
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

_ASSERTION: Final = re.compile(
    r"^(?:Error:\s*)?(guarantee|assert|fatal error|fatal|ShouldNotReachHere|"
    r"ShouldNotCall|Unimplemented|Untested)"
)


@register
class JvmInternalError(PhenotypeRule):
    name = "jvm-internal-error"
    kinds = frozenset({"jvm"})
    description = (
        "HotSpot stopped itself on an internal check (guarantee, assert, fatal, "
        "ShouldNotReachHere); evidence: source location and message."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        info = error(ctx)
        if info is None or info.error_kind != "internal":
            return None
        location = info.location
        file = line = None
        if location and (match := re.match(r"^(?P<file>.+):(?P<line>\d+)$", location)):
            file, line = match["file"], int(match["line"])
        assertion = _ASSERTION.match(info.message or "")
        kind = assertion[1] if assertion else None
        return self.fire(
            location=location,
            file=file,
            line=line,
            message=info.message,
            assertion={"fatal error": "fatal"}.get(kind or "", kind),
        )
