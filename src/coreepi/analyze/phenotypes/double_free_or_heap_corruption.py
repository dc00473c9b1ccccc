"""double-free-or-heap-corruption: glibc malloc detected a broken heap
(``malloc_printerr``) and aborted."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._abort import abort_message
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import FrameTrust, Phenotype

#: glibc functions that report heap corruption (malloc/malloc.c)
REPORTERS = ("malloc_printerr", "__malloc_assert")


@register
class DoubleFreeOrHeapCorruption(PhenotypeRule):
    name = "double-free-or-heap-corruption"
    description = (
        "SIGABRT from glibc malloc's integrity checks: its message in __abort_msg, or "
        "malloc_printerr/__malloc_assert on the crashing stack."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name != "SIGABRT":
            return None
        message = abort_message(ctx)
        frames = [
            {"index": f.index, "function": f.function}
            for f in (ctx.thread.frames if ctx.thread else [])
            if f.function in REPORTERS and f.trust != FrameTrust.SCAN
        ]
        if message is not None and message.kind == "malloc":
            text = message.text
        elif frames:
            text = None
        else:
            return None
        return self.fire(
            message=text,
            kind="double-free" if text and "double free" in text else "heap-corruption",
            reporter_frames=frames,
        )
