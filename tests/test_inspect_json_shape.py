"""The shape of ``coreepi inspect --json`` (docs/cli.md, "What `inspect
--json` writes"): one JSON object for a file with one crash, an array for a
kernel log with several or none, nothing and exit 2 for a file that is not
a crash artifact. Run as a user runs it (``python -m coreepi``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from clikit import cli  # noqa: E402
from corefactory import Crash  # noqa: E402

from coreepi.model.report import CrashReport  # noqa: E402

KERNEL_WILD = Path(__file__).resolve().parent / "data" / "kernel-wild"
DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _json(path: Path) -> object:
    proc = cli("inspect", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_core_is_one_object(get_crash: Callable[[str], Crash]) -> None:
    crash = get_crash("null_deref")
    proc = cli("inspect", str(crash.core), "--exe", str(crash.binary), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    report = CrashReport.model_validate(data)
    assert (report.source, report.signal.name if report.signal else None) == ("elf-core", "SIGSEGV")


def test_a_kernel_log_with_one_report_is_one_object() -> None:
    data = _json(KERNEL_WILD / "001-s390x-warning.log")
    assert isinstance(data, dict)
    assert CrashReport.model_validate(data).source == "kernel-oops"


def test_a_kernel_log_with_several_reports_is_an_array_in_log_order() -> None:
    data = _json(KERNEL_WILD / "012-i386-bug-untimestamped.log")
    assert isinstance(data, list)
    reports = [CrashReport.model_validate(item) for item in data]
    assert [r.artifact.title for r in reports if r.artifact] == [
        "kernel BUG in __change_page_attr", "Kernel panic: Attempted to kill init!"]
    assert reports[0].artifact and reports[1].artifact
    assert reports[0].artifact.line is not None and reports[1].artifact.line is not None
    assert reports[0].artifact.line < reports[1].artifact.line


def test_a_kernel_log_without_a_report_is_an_empty_array(tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    log.write_text(
        "[    0.000000] Linux version 6.1.0-13-amd64 (debian-kernel@lists.debian.org)\n"
        "[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.1.0-13-amd64 root=/dev/sda1 ro\n"
        "[    0.004000] x86/fpu: Supporting XSAVE feature 0x001: 'x87 floating point registers'\n")
    proc = cli("inspect", str(log), "--json")
    assert (proc.returncode, proc.stdout) == (0, "[]\n")
    assert proc.stderr == f"coreepi: {log}: no crash found\n"


def test_not_an_artifact_prints_nothing_and_exits_2(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("shopping list: eggs, milk\n")
    proc = cli("inspect", str(text), "--json")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("coreepi: error: ")


@pytest.mark.parametrize("shape", ["a JSON **object**", "a JSON **array**", "`[]`"])
def test_the_shapes_are_documented(shape: str) -> None:
    assert shape in DOC.read_text()
