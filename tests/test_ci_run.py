"""``coreepi ci run`` on a small real test suite (shell script, C programs, a
C++ program; tests/ci_suite/), as a real process, in every capture mode this
machine allows: ptrace always, kernel only when core_pattern already writes
files (core_pattern is never changed here), systemd through a recorded
``journalctl -o json`` export whose core is a real one."""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import zstandard
from cikit import (
    ABORT_SIGNATURE_START,
    SEGV_SIGNATURE,
    Suite,
    build_suite,
    coreepi,
    junit_cases,
    junit_properties,
)

from coreepi.capture.supervise.kernelfiles import CORE_PATTERN, pattern_glob

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the suite's expectations are x86-64 ones")

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return build_suite(tmp_path_factory.mktemp("ci-suite"))


def _run_suite(suite: Suite, out: Path, mode: str, *extra: str) -> tuple[
        int, str, list[dict[str, str]], str]:
    out.mkdir()
    r = coreepi("ci", "run", "--capture", mode, "--junit-xml", str(out / "junit.xml"),
                "--markdown", str(out / "pr.md"), "--cores-dir", str(out / "cores"), *extra,
                "--", "sh", str(suite.script), cwd=suite.root)
    assert (out / "junit.xml").exists(), r.stderr
    return r.returncode, r.stderr, junit_cases(out / "junit.xml"), (out / "pr.md").read_text()


def _check_two_crashes(code: int, cases: list[dict[str, str]], markdown: str) -> None:
    assert code == 1
    names = sorted(c["name"] for c in cases)
    assert len(names) == 2, names
    abort_sig, segv_sig = names  # "check_invariant…" sorts before "poke_record…"
    assert segv_sig == SEGV_SIGNATURE
    assert abort_sig.startswith(ABORT_SIGNATURE_START)
    by_name = {c["name"]: c for c in cases}
    assert by_name[SEGV_SIGNATURE]["type"] == "SIGSEGV"
    assert "null-deref" in by_name[SEGV_SIGNATURE]["message"]
    assert by_name[abort_sig]["type"] == "SIGABRT"
    assert by_name[abort_sig]["classname"] == "crash.thread_abort"
    assert f"`{SEGV_SIGNATURE.replace('|', chr(92) + '|')}`" in markdown
    assert "check_invariant \\| worker_loop" in markdown
    assert "2 crashes, 2 signatures" in markdown
    # C++ frames outside code spans are HTML-escaped (GitHub would eat "<void, …>")
    assert "std::__invoke_impl&lt;void, void (*)()&gt;" in markdown


def test_ptrace_mode_captures_child_and_thread_crashes(suite: Suite, tmp_path: Path) -> None:
    code, err, cases, markdown = _run_suite(suite, tmp_path / "out", "ptrace", "--github")
    _check_two_crashes(code, cases, markdown)
    assert "capture mode: ptrace" in err
    props = junit_properties(tmp_path / "out" / "junit.xml")
    assert props["exit_status"] == "1" and props["capture"] == "ptrace"  # the suite's own
    assert "exit status 1" in markdown
    cores = sorted(p.name.split(".")[1] for p in (tmp_path / "out" / "cores").iterdir())
    assert cores == ["segv_child", "thread_abort"]


def test_github_annotation_points_at_the_crash_line(suite: Suite, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    r = coreepi("ci", "run", "--capture", "ptrace", "--github", "--gitlab-codequality",
                str(out / "cq.json"), "--", "sh", str(suite.script), cwd=suite.root,
                env={"GITHUB_WORKSPACE": str(suite.root)})
    assert r.returncode == 1, r.stderr
    crash_line = next(i for i, line in enumerate(
        (suite.root / "segv_child.c").read_text().splitlines(), 1) if "CRASH-LINE" in line)
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 2
    assert any(f"file=segv_child.c,line={crash_line}," in e for e in errors), errors
    issues = json.loads((out / "cq.json").read_text())
    assert {i["location"]["path"] for i in issues} == {"segv_child.c", "thread_abort.cpp"}
    assert all(i["severity"] == "critical" and len(i["fingerprint"]) == 32 for i in issues)


def test_crash_free_command_passes_its_status_through(suite: Suite, tmp_path: Path) -> None:
    r = coreepi("ci", "run", "--capture", "ptrace", "--junit-xml", str(tmp_path / "j.xml"),
                "--", str(suite.root / "ok"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ok: 2 + 2 == 4" in r.stdout
    assert [c["name"] for c in junit_cases(tmp_path / "j.xml")] == ["no crash"]
    r = coreepi("ci", "run", "--capture", "ptrace", "--", "sh", "-c", "exit 3", cwd=tmp_path)
    assert r.returncode == 3
    assert "exit status 3; 0 crashes" in r.stderr


def test_auto_says_which_mode(tmp_path: Path) -> None:
    r = coreepi("ci", "run", "--", "true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "capture mode: " in r.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--capture", "bogus", "--", "true"], "--capture: 'bogus': one of auto, kernel"),
    (["--", "/nonexistent/tool"], "/nonexistent/tool: command not found"),
    (["--fail-on", "new", "--", "true"], "--fail-on new needs --server"),
    (["--server", "http://127.0.0.1:9", "--", "true"], "needs a read-scope token"),
    (["--capture", "systemd", "--journal-export", "/nonexistent.json", "--", "true"],
     "/nonexistent.json: no such file (--journal-export)"),
    (["--cores-dir", "/proc/cores", "--", "true"], "/proc/cores: cannot make the cores"),
])
def test_bad_usage_is_one_line_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    r = coreepi("ci", "run", *args, cwd=tmp_path, env={"COREEPI_TOKEN": ""})
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and expected in r.stderr, r.stderr


def _plain_file_pattern() -> str | None:
    try:
        pattern = CORE_PATTERN.read_text().strip()
    except OSError:
        return None
    return None if not pattern or pattern.startswith("|") else pattern


@pytest.mark.skipif(_plain_file_pattern() is None,
                    reason="core_pattern is not a plain file pattern (and tests never change it)")
def test_kernel_mode_collects_the_kernels_cores(suite: Suite, tmp_path: Path) -> None:
    code, err, cases, markdown = _run_suite(suite, tmp_path / "out", "kernel")
    _check_two_crashes(code, cases, markdown)
    assert "capture mode: kernel" in err
    # collected: moved out of the suite's tree into the cores dir
    glob = pattern_glob(_plain_file_pattern() or "", False)
    assert not [p for d in ("run-segv", "run-abort") for p in (suite.root / d).glob(glob)]
    assert len(list((tmp_path / "out" / "cores").iterdir())) == 2


def _journal_export(tmp_path: Path, core: Path, run_id: str) -> Path:
    """A journalctl -o json export in systemd-coredump's format (the first
    entry of tests/data/systemd-coredump-journal.json as the template): our
    crash with a real zstd core, another run's crash, our crash without core."""
    template = json.loads((DATA / "systemd-coredump-journal.json").read_text().splitlines()[0])
    zst = tmp_path / "core.segv_child.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(core.read_bytes()))

    def entry(pid: int, marker: str, filename: str | None) -> dict[str, object]:
        e = {**template, "COREDUMP_PID": str(pid), "COREDUMP_COMM": "segv_child",
             "COREDUMP_EXE": "/suite/segv_child",
             "COREDUMP_ENVIRON": list(f"PATH=/usr/bin\nCOREEPI_CI_RUN={marker}\n".encode())}
        e.pop("COREDUMP_FILENAME", None)
        return {**e, "COREDUMP_FILENAME": filename} if filename else e

    lines = [entry(501, run_id, str(zst)), entry(502, "another-run", str(zst)),
             entry(503, run_id, None)]
    path = tmp_path / "export.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def test_systemd_mode_from_a_recorded_export(suite: Suite, tmp_path: Path) -> None:
    made = tmp_path / "made"
    r = coreepi("ci", "run", "--capture", "ptrace", "--cores-dir", str(made), "--",
                str(suite.root / "segv_child"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    (core,) = made.iterdir()
    export = _journal_export(tmp_path, core, "run-42")
    r = coreepi("ci", "run", "--capture", "systemd", "--journal-export", str(export),
                "--junit-xml", str(tmp_path / "j.xml"), "--", "true", cwd=tmp_path,
                env={"COREEPI_CI_RUN": "run-42"})
    assert r.returncode == 1, r.stderr
    assert "capture mode: systemd" in r.stderr
    cases = junit_cases(tmp_path / "j.xml")
    assert [c["name"] for c in cases] == [SEGV_SIGNATURE,
                                         "segv_child killed by SIGSEGV (no stack)"]
    failure = ET.parse(tmp_path / "j.xml").getroot().findall(".//failure")[1]
    assert "stored no core" in (failure.text or "")
    assert junit_properties(tmp_path / "j.xml")["exit_status"] == "0"


def test_an_unwritable_output_fails_before_the_command_runs(tmp_path: Path) -> None:
    # a fresh user's long suite ran to the end, then "cannot write" (exit 2)
    ran = tmp_path / "ran"
    r = coreepi("ci", "run", "--junit-xml", str(tmp_path / "missing" / "j.xml"), "--",
                "touch", str(ran), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--junit-xml" in r.stderr and "no directory" in r.stderr
    assert not ran.exists()  # refused before the command ran
