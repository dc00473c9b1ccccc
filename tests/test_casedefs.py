"""User case definitions (TOML + CEL): loading, errors that name the file and
the case, evaluation on real cores, and ``coreepi inspect --case-defs``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ("analyze_cores",)  # fixtures: analyze_crash, analyzed
from coreepi.analyze.casedefs import (
    CaseDefinition,
    case_variables,
    evaluate_case_definitions,
    load_case_definitions,
)
from coreepi.errors import InputError
from coreepi.ingest.artifacts import inspect_core

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "case-defs.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_example_file_loads() -> None:
    defs = load_case_definitions(EXAMPLE)
    assert [d.name for d in defs][:3] == [
        "null-store-in-request-path",
        "misaligned-ret-suspect-cpu",
        "heap-corruption-abort",
    ]
    assert defs[1].hardware_indicative is True
    assert all(d.source == str(EXAMPLE) for d in defs)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[[case]\nname=", "not valid TOML"),
        ('[[case]]\nname = "x"\nwhen = "signal =="\n', "case 'x': bad expression"),
        ('[[case]]\nname = "x"\nwhen = "true"\ncolour = 1\n', "case 'x': unknown keys ['colour']"),
        ('[[case]]\nwhen = "true"\n', "case '#1': 'name' must be a non-empty string"),
        ('[[case]]\nname = "x"\n', "case 'x': 'when' must be a non-empty expression string"),
        ('[[case]]\nname = "null-deref"\nwhen = "true"\n', "the name of a built-in phenotype"),
        (
            '[[case]]\nname = "x"\nwhen = "true"\n[[case]]\nname = "x"\nwhen = "false"\n',
            "defined twice",
        ),
        (
            '[[case]]\nname = "x"\nwhen = "true"\nhardware_indicative = "yes"\n',
            "must be true or false",
        ),
        ("cases = []\n", "unknown top-level keys ['cases']"),
    ],
)
def test_bad_file_is_an_input_error_naming_file_and_case(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_case_definitions(path)
    assert info.value.source == str(path)
    assert reason in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_case_definitions(tmp_path / "nope.toml")


def test_evaluation_on_a_real_core(analyzed: Any, tmp_path: Path) -> None:
    report = analyzed("null_deref").model_copy(deep=True)
    variables = case_variables(report)
    assert variables["signal"] == "SIGSEGV"
    assert variables["si_code"] == "SEGV_MAPERR"
    assert variables["fault_address"] == 0x10
    assert variables["functions"][:3] == ["store_field", "handle_request", "main"]
    assert variables["phenotypes"] == ["null-deref"]
    path = write(
        tmp_path,
        """
[[case]]
name = "store-field-null"
description = "NULL store in store_field"
when = '"null-deref" in phenotypes && functions[0] == "store_field" && fault_address == 16'

[[case]]
name = "chained"
when = '"store-field-null" in phenotypes && si_code == "SEGV_MAPERR"'
hardware_indicative = true

[[case]]
name = "not-abort"
when = 'signal == "SIGABRT"'

[[case]]
name = "bad-at-runtime"
when = 'report.no_such_field == 1'

[[case]]
name = "not-boolean"
when = 'signal_number + 1'

[[case]]
name = "module-and-host"
when = 'module_names.exists(m, m.startsWith("libc.so")) && !has(host.kernel)'
""",
    )
    fired = evaluate_case_definitions(report, load_case_definitions(path))
    assert [p.name for p in fired] == ["store-field-null", "chained", "module-and-host"]
    assert fired[0].evidence == {
        "case_definition": str(path),
        "expression": '"null-deref" in phenotypes && functions[0] == "store_field" && fault_address == 16',
        "description": "NULL store in store_field",
    }
    assert fired[1].hardware_indicative is True
    warnings = [w for w in report.analysis.warnings if "case definition" in w]
    assert len(warnings) == 2
    assert warnings[0].startswith(f"case definition 'bad-at-runtime' ({path}): evaluation error: ")
    assert "no_such_field" in warnings[0]
    assert "'not-boolean'" in warnings[1] and "not a boolean" in warnings[1]


def test_inspect_core_adds_fired_cases_to_phenotypes(analyze_crash: Any) -> None:
    crash = analyze_crash("double_free")
    report = inspect_core(crash.core, exe=crash.binary, case_defs=EXAMPLE)
    names = [p.name for p in report.phenotypes]
    assert names[-1] == "heap-corruption-abort"
    assert "double-free-or-heap-corruption" in names
    assert not [w for w in report.analysis.warnings if "case definition" in w]


def test_inspect_core_accepts_loaded_definitions(analyze_crash: Any) -> None:
    crash = analyze_crash("ret_misaligned")
    defs = [
        CaseDefinition.compile(
            "misaligned", '"stack-misaligned" in phenotypes', hardware_indicative=True
        )
    ]
    report = inspect_core(crash.core, exe=crash.binary, case_defs=defs)
    assert report.phenotypes[-1].name == "misaligned"
    assert report.phenotypes[-1].evidence["case_definition"] == "<string>"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coreepi", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_case_defs_shows_which_fire(analyze_crash: Any) -> None:
    crash = analyze_crash("ret_misaligned")
    result = _cli(
        "inspect", str(crash.core), "--exe", str(crash.binary), "--case-defs", str(EXAMPLE)
    )
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # Rich wraps long lines
    assert f"case definitions ({EXAMPLE}): misaligned-ret-suspect-cpu" in text


def test_cli_bad_case_defs_is_one_line_exit_2(analyze_crash: Any, tmp_path: Path) -> None:
    crash = analyze_crash("wild_pointer")
    path = write(tmp_path, '[[case]]\nname = "oops"\nwhen = "signal ==="\n')
    result = _cli("inspect", str(crash.core), "--case-defs", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert f"{path}: case 'oops': bad expression" in result.stderr
