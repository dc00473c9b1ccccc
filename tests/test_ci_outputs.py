"""``ci run``'s JUnit XML and GitLab code-quality outputs for a suite whose
one crash repeats: CI servers merge JUnit cases of equal classname+name and
GitLab keys issues by fingerprint, so a repeated crash is one case / one
issue with its count; the suite's time covers its cases; every code-quality
location is a repository-relative path (breaker4 #16, #17)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cikit import SEGV_SIGNATURE, Suite, build_suite, coreepi


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return build_suite(tmp_path_factory.mktemp("ci-outputs"))


def test_repeated_crash_is_one_case_and_one_issue(suite: Suite, tmp_path: Path) -> None:
    script = suite.root / "twice.sh"
    script.write_text("./segv_child; ./segv_child; bash -c 'kill -ABRT $$'; exit 1\n")
    r = coreepi("ci", "run", "--capture", "ptrace", "--junit-xml", str(tmp_path / "j.xml"),
                "--gitlab-codequality", str(tmp_path / "cq.json"), "--", "sh", str(script),
                cwd=suite.root, env={"CI_PROJECT_DIR": str(suite.root)})
    assert r.returncode == 1, r.stderr
    assert "3 crashes, 2 signatures" in r.stderr

    suite_el = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite_el is not None
    cases = suite_el.findall("testcase")
    keys = [(c.get("classname"), c.get("name")) for c in cases]
    assert len(keys) == len(set(keys)) == 2, keys
    assert suite_el.get("tests") == suite_el.get("failures") == "2"
    assert float(suite_el.get("time", "0")) >= sum(float(c.get("time", "0")) for c in cases)
    segv = next(c for c in cases if c.get("name") == SEGV_SIGNATURE)
    failure = segv.find("failure")
    assert failure is not None and "(2 crashes: pids " in failure.get("message", "")
    assert (failure.text or "").count("poke_record") >= 2  # each crash's frames

    issues = json.loads((tmp_path / "cq.json").read_text())
    assert len(issues) == 2 and len({i["fingerprint"] for i in issues}) == 2
    paths = {i["location"]["path"] for i in issues}
    assert paths == {"segv_child.c", "coreepi-crash/bash"}, paths
    assert all(not p.startswith("/") for p in paths)
    assert all(set(i) == {"description", "check_name", "fingerprint", "severity", "location"}
               and i["location"]["lines"]["begin"] >= 1 for i in issues)
    assert any("(2 crashes: pids " in i["description"] for i in issues)
