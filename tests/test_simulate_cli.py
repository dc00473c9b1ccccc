"""``coreepi simulate`` and ``coreepi demo`` as a user runs them: a relative
``-o`` makes real cores, a bug that can never fire is refused before any run,
bundled names and ``--example`` work, a run that makes nothing exits 1 with
the reason, and two demos of one scenario share its cached fleet (the second
waits for the first) instead of simulating into the same directory."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.cli.simulate import EXIT_NOTHING_MADE, _judge
from coreepi.simulate import bundled_scenario
from coreepi.simulate.cores import progress_reporter
from coreepi.simulate.scenario import scenario_from_dict
from coreepi.simulate.simulation import SimulationResult

needs_tools = pytest.mark.skipif(
    platform.machine() != "x86_64" or shutil.which("gdb") is None or shutil.which("g++") is None,
    reason="x86-64 workloads; needs gdb, gcc and g++")
COREEPI = str(Path(sys.executable).with_name("coreepi"))


def tiny_scenario(path: Path, disease: str) -> Path:
    """reference-small's fleet at 4 hosts, with ``disease`` as its only disease."""
    head, _, _ = bundled_scenario("reference-small").read_text().partition("\n[[disease]]\n")
    path.write_text(head.replace("hosts = 40", "hosts = 4") + "\n" + disease)
    return path


ASSERT_DISEASE = """[[disease]]
name = "v1-assert"
kind = "software"
workload = "kvstore"
bug = "assert"
rate_per_node_day = 0.05
"""


def env_with_cache(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "COREEPI_CACHE": str(tmp_path / "cache")}


@needs_tools
def test_relative_out_makes_cores(tmp_path: Path) -> None:
    tiny_scenario(tmp_path / "sc.toml", ASSERT_DISEASE)
    proc = subprocess.run([COREEPI, "simulate", "sc.toml", "-o", "sc/fleet", "-j", "1",
                           "--seed", "2"], cwd=tmp_path,
                          env={**os.environ, "COREEPI_CACHE": "cache"},  # relative too
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    truth = json.loads((tmp_path / "sc" / "fleet" / "truth.json").read_text())
    planned = truth["diseases"][0]["planned_crashes"]
    assert planned >= 1
    assert len(truth["crashes"]) == planned, proc.stderr  # every planned crash made
    assert len(list((tmp_path / "sc" / "fleet" / "crashes").glob("*.zst"))) == planned
    assert f"{planned} of {planned} planned crashes made" in proc.stdout
    assert not (tmp_path / "sc" / "fleet.partial").exists()


def test_a_bug_that_cannot_fire_is_refused(tmp_path: Path) -> None:
    sc = tiny_scenario(tmp_path / "v1.toml", ASSERT_DISEASE.replace('"assert"',
                                                                    '"null-deref-v2"'))
    res = CliRunner().invoke(app, ["simulate", str(sc), "-o", str(tmp_path / "f")])
    assert res.exit_code == 2, res.output
    assert (f"{sc}: disease[0].bug: 'null-deref-v2' can never fire in kvstore 1.4.2: needs "
            "APP_VERSION=2 or above, built with APP_VERSION=1; name a version built with it "
            "in when.app_version") in res.output
    assert not (tmp_path / "f").exists()
    # on the version that has it, the same disease is fine
    ok = tiny_scenario(tmp_path / "v2.toml", ASSERT_DISEASE.replace('"assert"', '"null-deref-v2"')
                       + 'when = { app_version = "2.0.0" }\n')
    scenario_from_dict(tomllib.loads(ok.read_text()), str(ok))


def test_bundled_names_and_example(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["simulate", "--example"])
    assert res.exit_code == 0
    assert res.output == bundled_scenario("reference").read_text()
    assert scenario_from_dict(tomllib.loads(res.output)).scenario.name == "reference"
    res = CliRunner().invoke(app, ["simulate", "reference-tiny", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2
    assert ("reference-tiny: no such scenario file or bundled scenario name (bundled: "
            "reference, reference-small)") in res.output
    res = CliRunner().invoke(app, ["simulate", "reference-small"])
    assert res.exit_code == 2 and "--out DIR" in res.output
    res = CliRunner().invoke(app, ["simulate", "--help"])
    assert "docs/simulate.md" in res.output and "reference-small" in res.output


def result(produced: int, failures: dict[str, str], out: Path) -> SimulationResult:
    return SimulationResult(out=out, crashes_planned=produced + len(failures),
                            crashes_produced=produced, not_produced=sorted(failures),
                            failures=failures)


def test_nothing_made_exits_1_some_made_warns(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    why = "no-gdb-log: warning: x/inject.py: No such file or directory"
    with pytest.raises(SystemExit) as stop:
        _judge(result(0, {"crash-00001": why, "crash-00002": why}, tmp_path))
    assert stop.value.code == EXIT_NOTHING_MADE == 1
    assert capsys.readouterr().err == (
        f"coreepi: error: no crash made of the 2 planned: 2 x {why} (every attempt is in "
        f"{tmp_path / 'run.json'})\n")
    _judge(result(5, {"crash-00003": "exited"}, tmp_path))
    assert capsys.readouterr().err.startswith(
        "coreepi: warning: 1 of 6 planned crashes not made: 1 x exited")
    _judge(result(5, {}, tmp_path))
    assert capsys.readouterr().err == ""


def test_progress_names_each_crash_that_failed() -> None:
    lines: list[str] = []
    say = progress_reporter(lines.append, "runs done")
    say({"name": "crash-00001", "outcome": "exited", "attempts": [{}, {}, {}]})
    for i in range(24):
        say({"name": f"crash-{i + 2:05d}", "outcome": "crashed", "attempts": [{}]})
    assert lines == [("  crash-00001: no crash in 3 attempts (exited: the program ran to its "
                      "end, the bug or fault did not fire)"), "  25 runs done"]


@needs_tools
def test_two_demos_share_the_cached_fleet(tmp_path: Path) -> None:
    """Two real ``coreepi demo`` processes, the second started while the first
    holds the cache entry (the first is stopped with SIGSTOP there, so the
    second surely comes while it simulates): the second says it waits, naming
    the first's pid, then uses the fleet the first made."""
    sc = tiny_scenario(tmp_path / "sc.toml", ASSERT_DISEASE)
    env = env_with_cache(tmp_path)
    argv = [COREEPI, "demo", "--scenario", str(sc), "--seed", "2", "-j", "1"]
    first = subprocess.Popen([*argv, "--data-dir", str(tmp_path / "d1")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = None
    resume = threading.Timer(120, os.kill, (first.pid, signal.SIGCONT))  # never left stopped
    try:
        deadline = time.monotonic() + 300
        while not any(p.read_text().strip() == str(first.pid)
                      for p in (tmp_path / "cache" / "demo").glob("sc-*/lock")):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGSTOP)  # inside the lock, before it compiles or simulates
        resume.start()
        second = subprocess.Popen([*argv, "--data-dir", str(tmp_path / "d2")], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert second.stderr is not None
        waiting = second.stderr.readline()  # the second's first line: it waits
        os.kill(first.pid, signal.SIGCONT)
        out1, err1 = first.communicate(timeout=600)
        out2, err2 = second.communicate(timeout=600)
    finally:
        resume.cancel()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert "demo: simulating scenario sc" in err1
    assert waiting.startswith(f"demo: another coreepi demo is simulating this fleet (pid "
                              f"{first.pid})"), waiting
    assert "using the simulated fleet cached in" in err2 and "demo: simulating" not in err2
    assert "HTML report:" in out1 and "HTML report:" in out2
