"""coreepi: core dump epidemiology.

Data flow (one direction): capture -> parse -> analyze -> store -> epi -> serve.
:class:`coreepi.report.CrashReport` is the contract between the stages.
"""

__version__ = "0.1.0"

from coreepi.errors import CoreepiError, InputError
from coreepi.report import SCHEMA_VERSION, CrashReport

__all__ = ["SCHEMA_VERSION", "CoreepiError", "CrashReport", "InputError", "__version__"]
