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
from coreepi.analyze import analyze
from coreepi.errors import InputError
from coreepi.ingest.artifacts import inspect_core, inspect_file
from coreepi.parse.jvm.hs_err import parse_hs_err
from coreepi.parse.kernel.oops import parse_kernel_log

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


# --- one analyze() for every artifact kind ------------------------------------------------

HS_ERR = """\
#
# A fatal error has been detected by the Java Runtime Environment:
#
#  SIGSEGV (0xb) at pc=0x00007f3b1c7a1234, pid=4242, tid=4243
#
# JRE version: OpenJDK Runtime Environment Temurin-17.0.8+7 (17.0.8+7) (build 17.0.8+7)
# Java VM: OpenJDK 64-Bit Server VM Temurin-17.0.8+7 (17.0.8+7, mixed mode, linux-amd64)
# Problematic frame:
# C  [libfoo.so+0x1234]  foo_parse+0x14
#

---------------  T H R E A D  ---------------

siginfo: si_signo: 11 (SIGSEGV), si_code: 1 (SEGV_MAPERR), si_addr: 0x0000000000000010

Native frames: (J=compiled Java code, j=interpreted, Vv=VM code, C=native code)
C  [libfoo.so+0x1234]  foo_parse+0x14
C  [libfoo.so+0x2000]  foo_main+0x20
"""

KERNEL_LOG = (
    "[   12.000000] ------------[ cut here ]------------\n"
    "[   12.000001] WARNING: CPU: 1 PID: 77 at drivers/foo/foo.c:42 foo_probe+0x1a/0x40\n"
    "[   12.000002] CPU: 1 PID: 77 Comm: modprobe Not tainted 6.1.0 #1\n"
    "[   12.000003] Call Trace:\n"
    "[   12.000004]  <TASK>\n"
    "[   12.000005]  foo_probe+0x1a/0x40\n"
    "[   12.000006]  really_probe+0x10/0x20\n"
    "[   12.000007]  </TASK>\n"
    "[   12.000008] ---[ end trace 0000000000000000 ]---\n"
)

ANY_KIND = """
[[case]]
name = "null-or-kernel-warning"
when = '"null-deref" in phenotypes || "kernel-warning" in phenotypes'
"""


def test_parsers_alone_decide_no_phenotype_and_no_signature() -> None:
    hs_err = parse_hs_err(HS_ERR)
    assert hs_err is not None and hs_err.phenotypes == [] and hs_err.signature is None
    # what analysis needs travels as fields, not as phenotype evidence
    assert hs_err.artifact is not None and hs_err.artifact.jvm is not None
    assert hs_err.artifact.jvm.error_kind == "signal" and hs_err.artifact.jvm.pc == 0x7F3B1C7A1234
    (kernel,) = parse_kernel_log(KERNEL_LOG)
    assert kernel.phenotypes == [] and kernel.signature is None
    assert kernel.artifact is not None and kernel.artifact.line == 2
    assert kernel.artifact.title == "WARNING in foo_probe"
    assert kernel.artifact.kernel is not None and kernel.artifact.kernel.crash_type == "WARNING"


def test_one_case_definition_fires_on_a_core_an_hs_err_log_and_a_kernel_log(
    analyze_crash: Any, tmp_path: Path
) -> None:
    """The same definitions, through the same analyze(), for every kind."""
    defs = load_case_definitions(write(tmp_path, ANY_KIND))
    hs_err_path, kernel_path = tmp_path / "hs_err_pid4242.log", tmp_path / "console.log"
    hs_err_path.write_text(HS_ERR, encoding="utf-8")
    kernel_path.write_text(KERNEL_LOG, encoding="utf-8")

    (jvm,) = inspect_file(hs_err_path, case_defs=defs)
    assert [p.name for p in jvm.phenotypes] == [
        "jvm-crash-in-native-library",
        "null-deref",
        "null-or-kernel-warning",
    ]
    assert jvm.signature is not None and jvm.signature.signature == "foo_parse | foo_main"

    (kernel,) = inspect_file(kernel_path, case_defs=defs)
    assert [p.name for p in kernel.phenotypes] == ["kernel-warning", "null-or-kernel-warning"]
    assert kernel.signature is not None and kernel.signature.signature == "WARNING in foo_probe"
    assert kernel.phenotypes[0].evidence["line_number"] == 2

    crash = analyze_crash("null_deref")
    core = inspect_core(crash.core, exe=crash.binary, case_defs=defs)
    assert [p.name for p in core.phenotypes] == ["null-deref", "null-or-kernel-warning"]

    # analyze() called directly gives what ingest gives
    again = analyze(parse_hs_err(hs_err_path) or pytest.fail("no report"), case_definitions=defs)
    assert again.phenotypes == jvm.phenotypes and again.signature == jvm.signature


def test_analyze_replaces_what_a_report_already_carries() -> None:
    """Re-analysing a report (an upload, a re-run) gives the same result, not twice the phenotypes."""
    report = analyze(parse_hs_err(HS_ERR) or pytest.fail("no report"))
    first = report.model_copy(deep=True)
    analyze(report)
    assert report.phenotypes == first.phenotypes and report.signature == first.signature
