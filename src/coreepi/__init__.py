"""coreepi: core dump epidemiology.

Data flow (one direction): capture -> parse -> analyze -> store -> epi -> serve.
:class:`coreepi.model.report.CrashReport` is the contract between the stages.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from coreepi.errors import CoreepiError, InputError

if TYPE_CHECKING:
    from coreepi.model.report import SCHEMA_VERSION, CrashReport

__all__ = ["SCHEMA_VERSION", "CoreepiError", "CrashReport", "InputError", "__version__"]


def __getattr__(name: str) -> Any:
    # lazy: building the pydantic models costs ~0.1 s, which `coreepi --version`
    # and every command that does not touch a report need not pay
    if name in ("SCHEMA_VERSION", "CrashReport"):
        from coreepi.model import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
