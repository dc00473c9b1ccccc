"""parse: turn one artifact into a CrashReport.

drgn is set up in one place (:mod:`coreepi.parse.unwind`); no drgn
object leaves this package.
"""

from coreepi.parse.elfcore import ParsedCore, open_core, parse_core

__all__ = ["ParsedCore", "open_core", "parse_core"]
