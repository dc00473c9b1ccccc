"""jvm-crash-in-jit-code: the pc of an hs_err crash was in code the JVM
generated: a compiled Java method (``J``/``A``) or a stub (``v``)."""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._jvm import top_frame
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


@register
class JvmCrashInJitCode(PhenotypeRule):
    name = "jvm-crash-in-jit-code"
    kinds = frozenset({"jvm"})
    description = (
        "The JVM's problematic frame is JIT- or AOT-compiled Java code or a VM-generated stub; "
        "evidence: method, compiler and compile id, or the stub."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        top = top_frame(ctx)
        if top is None or not top.kind:
            return None
        problematic = (top.text or "")[:500]
        if top.kind in "JA":
            return self.fire(
                code_kind="compiled-method" if top.kind == "J" else "aot-compiled-method",
                method=top.method,
                compiler=top.compiler,
                compile_id=top.compile_id,
                osr=top.osr,
                problematic_frame=problematic,
            )
        if top.kind == "v":
            return self.fire(code_kind="stub", stub=top.stub, problematic_frame=problematic)
        return None
