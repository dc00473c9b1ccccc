"""Real cores of the reference diseases and the overwritten-return-address
programs of ``tests/crashers_reference/``.

Reuses :mod:`corefactory` (building, gdb ``gcore``, kernel cores with a
temporary core_pattern) for a second source directory, without changing it:
:class:`ReferenceCoreFactory` keeps its own variants and cases and hands the
work to the factory's builders. Two additions that directory needs:

* several cores of one case (``crash(name, run=k)``): a disease is a
  population, so tests compare the signatures of independent runs;
* gdb that passes SIGUSR2 to the program (``gcore-pass-sigusr2``): the
  return-to-NULL program is signal-heavy and gdb would stop at every signal.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import ClassVar

from corefactory import (
    RUN_TIMEOUT,
    Case,
    CoreFactory,
    Crash,
    CrasherUnavailable,
    Variant,
    gdb_available,
)

__all__ = ["REFERENCE_CASES", "REFERENCE_DIR", "REFERENCE_VARIANTS", "ReferenceCoreFactory"]

REFERENCE_DIR = Path(__file__).resolve().parent / "crashers_reference"

_O0 = ("-g", "-O0", "-fno-omit-frame-pointer")
_O2 = ("-g", "-O2", "-fomit-frame-pointer")

# Sources are absolute: corefactory joins them to its own directory, and a
# join with an absolute path is that path.
REFERENCE_VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("misaligned_ret", str(REFERENCE_DIR / "misaligned_ret.c"), flags=_O0),
        Variant("unwind_race", str(REFERENCE_DIR / "unwind_race.cpp"), flags=_O0),
        Variant("overwrite_ret", str(REFERENCE_DIR / "overwrite_ret.c"), flags=_O0),
        Variant("overwrite_ret-O2", str(REFERENCE_DIR / "overwrite_ret.c"), flags=_O2),
    ]
}

REFERENCE_CASES: dict[str, Case] = {
    c.name: c
    for c in [
        # disease (a): one bad `ret`, varied callers, varied ways to crash
        Case("misaligned:parse_header:low", "misaligned_ret", "gcore", ("parse_header", "low")),
        Case("misaligned:parse_body:low", "misaligned_ret", "kernel", ("parse_body", "low")),
        Case("misaligned:flush_output:low", "misaligned_ret", "gcore", ("flush_output", "low")),
        Case("misaligned:compact_index:low", "misaligned_ret", "gcore", ("compact_index", "low")),
        Case("misaligned:parse_header:high", "misaligned_ret", "gcore", ("parse_header", "high")),
        Case("misaligned:parse_body:high", "misaligned_ret", "gcore", ("parse_body", "high")),
        Case("misaligned:flush_output:high", "misaligned_ret", "kernel", ("flush_output", "high")),
        # disease (b): return-to-NULL in the exception path under SIGUSR2
        Case("unwind_race", "unwind_race", "gcore-pass-sigusr2"),
        Case("unwind_race@kernel", "unwind_race", "kernel"),
        Case("unwind_race:spin8@kernel", "unwind_race", "kernel", ("8",)),
        # stack scanning
        Case("overwrite_ret", "overwrite_ret", "gcore"),
        Case("overwrite_ret-O2", "overwrite_ret-O2", "gcore"),
    ]
}


class ReferenceCoreFactory(CoreFactory):
    """A :class:`corefactory.CoreFactory` for ``tests/crashers_reference/``,
    with one more way to make a core (``gcore-pass-sigusr2``)."""

    variants: ClassVar[dict[str, Variant]] = REFERENCE_VARIANTS
    cases: ClassVar[dict[str, Case]] = REFERENCE_CASES

    def _make_core(
        self, case: Case, binary: Path, args: list[str], workdir: Path
    ) -> tuple[Path, str, int, dict[str, int] | None]:
        if case.method == "gcore-pass-sigusr2":
            return (*self._gcore_passing(binary, args, workdir, "SIGUSR2"), None)
        return super()._make_core(case, binary, args, workdir)

    @staticmethod
    def _gcore_passing(
        binary: Path, args: list[str], workdir: Path, signal: str
    ) -> tuple[Path, str, int]:
        """Like corefactory's gcore, but gdb hands ``signal`` to the program
        silently instead of stopping at it."""
        if reason := gdb_available():
            raise CrasherUnavailable(reason)
        core = workdir / "core"
        argv = [
            "gdb", "-batch", "-nx",
            "-ex", "set pagination off",
            "-ex", "set confirm off",
            "-ex", "set debuginfod enabled off",
            "-ex", f"handle {signal} nostop noprint pass",
            "-ex", "run",
            "-ex", f"gcore {core}",
            "-ex", "kill",
            "--args", str(binary), *args,
        ]  # fmt: skip
        env = dict(os.environ, DEBUGINFOD_URLS="")
        proc = subprocess.run(
            argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True,
            text=True, errors="replace", timeout=RUN_TIMEOUT, check=False,
        )  # fmt: skip
        if not core.exists():
            raise AssertionError(f"gdb made no core of {binary.name}:\n{proc.stdout[-3000:]}")
        return core, proc.stdout, proc.returncode


_FACTORY: ReferenceCoreFactory | None = None


def shared_factory(root: Path) -> ReferenceCoreFactory:
    """One factory per test session, whichever test module asks first (so
    each core is made once even when several modules use it). Skips the
    caller's tests off x86-64, where the programs do not build."""
    import platform

    import pytest

    global _FACTORY
    if platform.machine() != "x86_64":
        pytest.skip("the reference disease programs are x86-64 (inline asm)")
    if _FACTORY is None:
        _FACTORY = ReferenceCoreFactory(root)
    return _FACTORY


def get_reference_crash(factory: ReferenceCoreFactory, name: str, run: int = 0) -> Crash:
    """``factory.crash(name, run)``, skipping the test when a tool or a
    permission is missing (no gdb, no root for kernel cores)."""
    import pytest

    try:
        return factory.crash(name, run)
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))
