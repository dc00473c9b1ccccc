"""jvm-native-oom: the JVM could not get native memory (``There is
insufficient memory…``: mmap/malloc failure, thread creation, swap)."""

from __future__ import annotations

import re
from typing import Any, Final

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import error
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype

_OOM_DETAIL: Final = re.compile(
    r"Native memory allocation \((?P<alloc>\w+)\) failed to \w+ (?P<size>\d+) bytes"
    r"(?:\.\s*Error detail:\s*|\s+for\s+)?(?P<what>.*)$"
)
_OOM_REQUESTED: Final = re.compile(
    r"requested (?P<size>\d+) bytes for (?P<what>.*?)\.? Out of swap space"
)


@register
class JvmNativeOom(PhenotypeRule):
    name = "jvm-native-oom"
    kinds = frozenset({"jvm"})
    description = (
        "The JVM died because it could not get native memory (mmap/malloc, thread stack, "
        "swap); evidence: allocator, size, purpose, container limit."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        info = error(ctx)
        if info is None or info.error_kind != "oom":
            return None
        message = info.message or ""
        evidence: dict[str, Any] = {
            "message": message or None,
            "allocator": None,
            "size_bytes": None,
            "purpose": None,
        }
        if match := _OOM_DETAIL.search(message):
            evidence.update(
                allocator=match["alloc"],
                size_bytes=int(match["size"]),
                purpose=match["what"].strip().rstrip(".") or None,
            )
        elif match := _OOM_REQUESTED.search(message):
            evidence.update(size_bytes=int(match["size"]), purpose=match["what"].strip())
        if info.error_line is not None:
            evidence["location"] = info.location
        evidence["memory"] = info.memory
        if info.container_memory_limit_bytes is not None:
            evidence["container_memory_limit_bytes"] = info.container_memory_limit_bytes
        return self.fire(**evidence)
