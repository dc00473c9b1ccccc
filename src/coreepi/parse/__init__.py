"""parse: turn one artifact into a CrashReport.

drgn is set up in one place (:mod:`coreepi.parse.elfcore_unwind`); no drgn
object leaves this package.
"""

from coreepi.parse.elfcore import parse_core

__all__ = ["parse_core"]
