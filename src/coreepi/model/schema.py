"""The CrashReport's JSON Schema, as exported to ``docs/crash-report.schema.json``."""

from __future__ import annotations

import json

from coreepi.model.report import CrashReport

__all__ = ["crash_report_schema_json"]


def crash_report_schema_json() -> str:
    """The JSON Schema (draft 2020-12) of :class:`CrashReport` in serialization
    mode, as stable, indented text ending in a newline."""
    schema = CrashReport.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://coreepi.dev/schema/crash-report.schema.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
