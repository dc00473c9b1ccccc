"""Real cores for the fleet/store/ingest tests: a tiny C crasher, built with
gcc and crashed under gdb (``gcore``), once per session.

``crasher N`` dereferences the address ``N * 8``, so every N gives a core
with its own fault address, hence its own crash_id.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CRASHER_C = r"""
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? strtol(argv[1], 0, 0) : 0;
    volatile int *p = (volatile int *)(n * 8);
    return *p;
}
"""


def tools_missing() -> str | None:
    for tool in ("gcc", "gdb"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (needed to make real cores)"
    return None


def build_crasher(directory: Path, name: str = "crasher", extra: tuple[str, ...] = ()) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / f"{name}.c"
    src.write_text(CRASHER_C)
    out = directory / name
    subprocess.run(["gcc", "-g", "-O0", "-Wl,--build-id", *extra, "-o", out, src],
                   check=True, capture_output=True, timeout=60)
    return out


def make_core(binary: Path, n: int, out: Path) -> Path:
    """A gcore core of ``binary n`` at ``out``."""
    env = dict(os.environ, DEBUGINFOD_URLS="")
    proc = subprocess.run(
        ["gdb", "-batch", "-nx", "-ex", "set debuginfod enabled off", "-ex", "run",
         "-ex", f"gcore {out}", "-ex", "kill", "--args", str(binary), str(n)],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL, check=False,
    )
    if not out.exists():
        raise AssertionError(f"gdb made no core:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return out


class CoreSet:
    """The crasher binary and ``count`` distinct cores of it."""

    def __init__(self, root: Path, count: int) -> None:
        self.root = root
        self.binary = build_crasher(root / "bin")
        self.cores = [make_core(self.binary, n, root / f"core.{n}") for n in range(1, count + 1)]


@pytest.fixture(scope="session")
def coreset(tmp_path_factory: pytest.TempPathFactory) -> CoreSet:
    if reason := tools_missing():
        pytest.skip(reason)
    return CoreSet(tmp_path_factory.mktemp("fleetcores"), 8)
