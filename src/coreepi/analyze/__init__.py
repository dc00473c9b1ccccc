"""analyze: enrich a CrashReport with phenotypes (case definitions), scanned
frames and a signature. Reads the report and, when at hand, the process
memory; never the drgn program (that stays in ``parse``)."""

from coreepi.analyze.context import AnalysisContext, Memory
from coreepi.analyze.pipeline import analyze

__all__ = ["AnalysisContext", "Memory", "analyze"]
