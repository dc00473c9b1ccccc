"""Helpers for the ``coreepi ci run`` tests: build the small test suite of
``tests/ci_suite/`` with gcc/g++, run the CLI as a real process, read JUnit XML."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

SUITE_SRC = Path(__file__).resolve().parent / "ci_suite"
SEGV_SIGNATURE = "poke_record | child_work | main"
ABORT_SIGNATURE_START = "check_invariant | worker_loop"


@dataclass(frozen=True)
class Suite:
    root: Path

    @property
    def script(self) -> Path:
        return self.root / "suite.sh"


def build_suite(dest: Path) -> Suite:
    """Copy the suite's sources to ``dest`` and compile them (-g -O0)."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in SUITE_SRC.iterdir():
        shutil.copy(src, dest / src.name)
    for name, compiler, extra in (("ok", "gcc", []), ("segv_child", "gcc", []),
                                  ("thread_abort", "g++", ["-pthread"])):
        ext = ".cpp" if compiler == "g++" else ".c"
        subprocess.run([compiler, "-g", "-O0", "-fno-omit-frame-pointer", *extra, "-o",
                        str(dest / name), str(dest / (name + ext))], check=True, timeout=120)
    return Suite(dest)


def coreepi(*args: str, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m coreepi ARGS`` in ``cwd``; its output as text."""
    return subprocess.run([sys.executable, "-m", "coreepi", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})


def junit_cases(path: Path) -> list[dict[str, str]]:
    """[{name, classname, type, message}] of every testcase (type/message of its failure)."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        out.append({"name": case.get("name", ""), "classname": case.get("classname", ""),
                    "type": failure.get("type", "") if failure is not None else "",
                    "message": failure.get("message", "") if failure is not None else ""})
    return out


def junit_properties(path: Path) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "")
            for p in ET.parse(path).getroot().iter("property")}
