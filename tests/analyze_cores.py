"""Real cores for the analyzer's tests (phenotypes, case definitions).

A thin layer over :mod:`corefactory`: the same builder, the same two ways of
making a core (gdb's ``gcore``, or the kernel through a temporary
core_pattern), the same independent readers; only the list of crashers
grows. Crashers of ``tests/crashers_analyze/`` are added to those of
``tests/crashers/`` (which stay the other corpus owner's). Everything is built
and crashed once per test session, on first use.

Fixtures (import them into a test module: ``from analyze_cores import ...``):

``analyzed(case)``
    the analysed :class:`coreepi.model.report.CrashReport` of a case's core
    (``inspect_core(core, exe=binary)``), cached per session.
``analyze_crash(case)``
    the :class:`corefactory.Crash` itself (binary, stdout, notes).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import corefactory
import pytest
from corefactory import Case, CoreFactory, Crash, CrasherUnavailable, Variant

__all__ = ["ANALYZE_CASES", "ANALYZE_VARIANTS", "AnalyzeCoreFactory", "analyze_crash", "analyzed"]

ANALYZE_DIR = Path(__file__).resolve().parent / "crashers_analyze"

# signal numbers and si_codes for queued_fault (asm-generic/siginfo.h)
SIGILL, ILL_ILLOPC = 4, 1
SIGBUS, BUS_MCEERR_AR = 7, 4

ANALYZE_VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("wild_pointer", "wild_pointer.c"),
        Variant("noncanonical", "noncanonical.c"),
        Variant("rodata_write", "rodata_write.c"),
        Variant("null_fnptr", "null_fnptr.c"),
        Variant("fnptr_noncanonical", "fnptr_noncanonical.c"),
        Variant("ret_corrupt", "ret_corrupt.c"),
        Variant("handler_crash", "handler_crash.c"),
        Variant("noexcept_throw", "noexcept_throw.cpp"),
        Variant("bitflip", "bitflip.c"),
        Variant("heap_corruption", "heap_corruption.c"),
        Variant("queued_fault", "queued_fault.c"),
        Variant("thread_overflow", "thread_overflow.c"),
    ]
}

# Kernel cores where gdb would get in the way: it stops at the first signal
# of any kind (SIGUSR1/SIGUSR2 here) and disables ASLR (bitflip wants the
# heap where it normally is).
ANALYZE_CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("wild_pointer", "wild_pointer", "kernel"),
        Case("noncanonical", "noncanonical", "kernel"),
        Case("rodata_write", "rodata_write", "kernel"),
        Case("null_fnptr", "null_fnptr", "kernel"),
        Case("call_noncanonical_reg", "fnptr_noncanonical", "kernel", args=("register",)),
        Case("call_noncanonical_mem", "fnptr_noncanonical", "kernel", args=("memory",)),
        Case("ret_null", "ret_corrupt", "kernel", args=("null",)),
        Case("ret_bogus", "ret_corrupt", "kernel", args=("bogus",)),
        Case("ret_noncanonical", "ret_corrupt", "kernel", args=("noncanonical-ret",)),
        Case("ret_misaligned", "ret_corrupt", "kernel", args=("misaligned",)),
        Case("movaps_misaligned", "ret_corrupt", "kernel", args=("movaps",)),
        Case("handler_crash", "handler_crash", "kernel"),
        Case("noexcept_throw", "noexcept_throw", "kernel"),
        Case("bitflip", "bitflip", "kernel"),
        Case("double_free", "heap_corruption", "kernel", args=("double-free",)),
        Case("corrupted_top", "heap_corruption", "kernel", args=("corrupted-top",)),
        Case("queued_sigill", "queued_fault", "kernel", args=(str(SIGILL), str(ILL_ILLOPC))),
        Case("queued_mce", "queued_fault", "kernel", args=(str(SIGBUS), str(BUS_MCEERR_AR))),
        Case("thread_overflow", "thread_overflow", "kernel"),
    ]
}


class AnalyzeCoreFactory(CoreFactory):
    """:class:`corefactory.CoreFactory` over both crasher directories. Our
    variants get absolute source paths: corefactory joins sources to its own
    directory, and a join with an absolute path is that path."""

    variants: ClassVar[dict[str, Variant]] = {
        **corefactory.VARIANTS,
        **{n: replace(v, source=str(ANALYZE_DIR / v.source)) for n, v in ANALYZE_VARIANTS.items()},
    }
    cases: ClassVar[dict[str, Case]] = {**corefactory.CASES, **ANALYZE_CASES}


@pytest.fixture(scope="session")
def analyze_factory(tmp_path_factory: pytest.TempPathFactory) -> AnalyzeCoreFactory:
    if platform.machine() != "x86_64":
        pytest.skip(f"the analyzer crashers are x86-64 specific; this is {platform.machine()}")
    return AnalyzeCoreFactory(tmp_path_factory.mktemp("analyze-crashers"))


@pytest.fixture(scope="session")
def analyze_crash(analyze_factory: AnalyzeCoreFactory) -> Callable[[str], Crash]:
    """``analyze_crash("wild_pointer")`` -> the Crash; skips when tools are missing."""

    def get(name: str) -> Crash:
        try:
            return analyze_factory.crash(name)
        except CrasherUnavailable as exc:
            pytest.skip(str(exc))

    return get


@pytest.fixture(scope="session")
def analyzed(analyze_crash: Callable[[str], Crash]) -> Callable[[str], object]:
    """``analyzed("wild_pointer")`` -> the analysed CrashReport, once per session."""
    from coreepi.ingest.artifacts import inspect_core

    cache: dict[str, object] = {}

    def get(name: str) -> object:
        if name not in cache:
            crash = analyze_crash(name)
            cache[name] = inspect_core(crash.core, exe=crash.binary)
        return cache[name]

    return get
