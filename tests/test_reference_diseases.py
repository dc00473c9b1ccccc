"""The two reference diseases of DESIGN.md, as real programs and real cores.

(a) ``misaligned_ret.c``: a `ret` executed with rsp off by 8, in varied
    callers and with varied results (a jump into the stack, a return to NULL,
    #GP on the `ret` itself, a jump into data).
(b) ``unwind_race.cpp``: return-to-NULL from a race in the exception path,
    under a SIGUSR2 every 50 us; the race really is a race (which signal hits
    the window differs every run), so several independent runs are compared.

Each core must show its disease's phenotype, and the signatures must put
each disease into exactly one bucket, never the same one.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from reference_cores import REFERENCE_CASES, get_reference_crash, shared_factory

from coreepi.analyze import analyze
from coreepi.model.report import CrashReport, FrameTrust
from coreepi.parse.elf.core import open_core

DISEASE_A = [name for name in REFERENCE_CASES if name.startswith("misaligned:")]
# (case, run): the same case run again is an independent crash
DISEASE_B = [("unwind_race", 0), ("unwind_race@kernel", 0), ("unwind_race@kernel", 1),
             ("unwind_race:spin8@kernel", 0)]  # fmt: skip


@pytest.fixture(scope="module")
def reports(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, int], tuple[CrashReport, dict]]:
    """``reports(case, run)``: (analysed report, facts read from the core's
    memory: the word just below sp)."""
    factory = shared_factory(tmp_path_factory.mktemp("reference"))
    cases = [(name, 0) for name in DISEASE_A] + DISEASE_B
    with ThreadPoolExecutor(max_workers=2) as pool:  # make the cores two at a time
        list(pool.map(lambda c: _try(factory, *c), cases))
    cache: dict[tuple[str, int], tuple[CrashReport, dict]] = {}

    def get(name: str, run: int = 0) -> tuple[CrashReport, dict]:
        if (name, run) not in cache:
            crash = get_reference_crash(factory, name, run)
            with open_core(crash.core, exe=crash.binary) as parsed:
                sp = parsed.report.crashed_thread.registers["rsp"]
                facts = {"below_sp": parsed.memory.read_word(sp - 8)}
                cache[(name, run)] = (analyze(parsed.report, parsed.memory), facts)
        return cache[(name, run)]

    return get


def _try(factory, name: str, run: int) -> None:  # type: ignore[no-untyped-def]
    try:
        factory.crash(name, run)
    except Exception:  # noqa: BLE001, S110 - re-raised (or skipped) when a test asks for it
        pass


@pytest.mark.parametrize("case", DISEASE_A)
def test_disease_a_is_stack_misaligned(reports, case: str) -> None:
    report, _ = reports(case)
    names = {p.name for p in report.phenotypes}
    assert "stack-misaligned" in names, names
    assert report.signature is not None
    assert report.signature.signature.startswith("stack-misaligned | ")


@pytest.mark.parametrize("case, run", DISEASE_B)
def test_disease_b_is_return_to_null_in_the_exception_path(reports, case: str, run: int) -> None:
    report, facts = reports(case, run)
    thread = report.crashed_thread
    # the mechanics: a `ret` to 0 -- pc 0, and the slot it popped holds 0
    assert thread.registers["rip"] == 0 and facts["below_sp"] == 0
    assert thread.registers["rsp"] % 16 == 0  # an ordinary return: rsp is not off
    names = {p.name for p in report.phenotypes}
    assert "return-to-null" in names and "stack-misaligned" not in names, names
    # the frames the zeroed return address hid come back by scanning
    scanned = [f.function for f in thread.frames if f.trust == FrameTrust.SCAN]
    assert scanned[:4] == ["SlotGuard::~SlotGuard()", "Parser::parse(int)",
                           "DocumentTree::update(int)", "main"]  # fmt: skip


def test_each_disease_is_one_bucket_and_they_never_mix(reports) -> None:
    a = {reports(case)[0].signature.signature for case in DISEASE_A}
    b = {reports(case, run)[0].signature.signature for case, run in DISEASE_B}
    assert a == {"stack-misaligned | misaligned_ret"}
    assert b == {
        "return-to-null | SlotGuard::~SlotGuard | Parser::parse | DocumentTree::update | main"
    }


def test_misaligned_return_to_null_is_not_disease_b(reports) -> None:
    """parse_header's `ret` with rsp 8 too high pops a 0: pc 0 like disease
    (b), and return-to-null fires too. The misaligned stack explains it, so
    it goes to disease (a)'s bucket."""
    report, facts = reports("misaligned:parse_header:high")
    assert report.crashed_thread.registers["rip"] == 0 and facts["below_sp"] == 0
    assert {"return-to-null", "stack-misaligned"} <= {p.name for p in report.phenotypes}
    assert report.signature.signature == "stack-misaligned | misaligned_ret"


def test_varied_callers_all_recovered(reports) -> None:
    """The bucket ignores the callers, the frames keep them for the reader."""
    for case in DISEASE_A:
        report, _ = reports(case)
        functions = [f.function for f in report.crashed_thread.frames]
        caller = case.split(":")[1]
        if case != "misaligned:parse_body:high":  # its caller's slot is below sp
            assert caller in functions, (case, functions)
        assert "handle_request" in functions and "main" in functions
