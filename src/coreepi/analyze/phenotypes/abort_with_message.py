"""abort-with-message: the process aborted after glibc stored a message in
``__abort_msg`` (a failed assert, a malloc corruption check, fortify, the
stack protector, __libc_fatal)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._abort import ASSERT_RE, abort_message
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class AbortWithMessage(PhenotypeRule):
    name = "abort-with-message"
    description = "SIGABRT with glibc's __abort_msg set; the message is read from memory."

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name != "SIGABRT":
            return None
        message = abort_message(ctx)
        if message is None:
            return None
        evidence = message.evidence()
        if message.kind == "assert" and (m := ASSERT_RE.search(message.text)):
            evidence["assertion"] = m.group("expr")
        return self.fire(**evidence)
