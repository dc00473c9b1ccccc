"""The CrashReport contract: exported schema is current, round-trips, addresses as hex."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from coreepi.model.report import SCHEMA_VERSION, CrashReport, Frame, FrameTrust, stable_crash_id
from coreepi.model.schema import crash_report_schema_json

ROOT = Path(__file__).resolve().parents[1]


def test_exported_schema_is_current() -> None:
    exported = (ROOT / "docs" / "crash-report.schema.json").read_text(encoding="utf-8")
    assert exported == crash_report_schema_json(), (
        "docs/crash-report.schema.json is stale: run "
        "`coreepi schema --out docs/crash-report.schema.json`"
    )


def test_schema_names_version_and_hex_addresses() -> None:
    schema = json.loads(crash_report_schema_json())
    assert schema["properties"]["schema_version"]["default"] == SCHEMA_VERSION
    frame = schema["$defs"]["Frame"]["properties"]
    pc_types = frame["pc"]["anyOf"]
    assert {"type": "string", "pattern": "^0x[0-9a-f]{1,16}$"} in pc_types
    assert {"type": "null"} in pc_types
    assert set(schema["$defs"]["FrameTrust"]["enum"]) == {"context", "cfi", "frame-pointer", "scan", "log"}


def test_addresses_serialize_as_hex_and_parse_back() -> None:
    frame = Frame(index=0, pc=0xFFFF_FFFF_FFFF_FFFF, sp="0x7ffd1000", trust=FrameTrust.CFI)
    data = json.loads(frame.model_dump_json())
    assert data["pc"] == "0xffffffffffffffff"
    assert data["sp"] == "0x7ffd1000"
    assert Frame.model_validate_json(frame.model_dump_json()) == frame
    assert frame.model_dump()["pc"] == 0xFFFF_FFFF_FFFF_FFFF  # ints in Python


@pytest.mark.parametrize("bad", [-1, 1 << 64, "0xzz", True])
def test_bad_addresses_are_rejected(bad: object) -> None:
    with pytest.raises(ValidationError):
        Frame(index=0, pc=bad, trust=FrameTrust.CFI)


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValidationError):
        CrashReport.model_validate(
            {"crash_id": "x", "source": "elf-core", "analysis": {"analyzer_version": "0"}, "bogus": 1}
        )


def test_stable_crash_id_is_deterministic_and_sensitive() -> None:
    a = stable_crash_id("elf-core", "abc", 42, None)
    assert a == stable_crash_id("elf-core", "abc", 42, None)
    assert a != stable_crash_id("elf-core", "abc", 43, None)
    assert len(a) == 32 and int(a, 16) >= 0
