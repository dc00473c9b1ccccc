"""Differential test: coreepi's signatures against siggen, Socorro's signature
generation (https://pypi.org/project/siggen/), on the same frames.

Both generators read the very same frames (coreepi's, after stack scanning):
function, module file name, module offset, pc. Where the two are expected to
agree they must agree exactly; every systematic difference is named here,
asserted in its exact shape, and explained in docs/signatures.md
("Differences from Socorro"):

D1 frame count: Socorro stops at the first frame not on its prefix list;
   coreepi takes the top N (5) relevant frames.
D2 abort path: Socorro keeps raise/abort as prefix frames (they join the
   signature); coreepi drops them.
D3 unsymbolized frames: Socorro names them by module only; coreepi by
   module+offset of the function's start.
D4 unusable stacks: Socorro writes the bad pc (``@0x0``) or whatever the pc
   happens to hit; coreepi heads the signature with the phenotype.
D5 trust: Socorro ignores frame trust; coreepi uses scanned frames only when
   nothing better is left.
D6 compiler clones: Socorro keeps ``.constprop.0``/``.isra.0`` suffixes;
   coreepi strips them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from reference_cores import REFERENCE_CASES, get_reference_crash, shared_factory
from test_signature import LIB, make_report

from coreepi.analyze.signature import SignatureConfig, generate_signature
from coreepi.analyze.signature.normalize import module_name
from coreepi.ingest.artifacts import inspect_core
from coreepi.model.report import CrashReport

siggen_generator = pytest.importorskip("siggen.generator")


def siggen(report: CrashReport) -> str:
    """siggen's signature of ``report``'s crashing thread, frames as Socorro's
    processor would pass them (schema: siggen/schema.rst)."""
    thread = report.crashed_thread
    assert thread is not None
    frames = []
    for f in thread.frames:
        frame: dict[str, object] = {"offset": f"0x{f.pc:x}"}
        if f.function:
            frame["function"] = f.function
        if f.module:
            frame["module"] = module_name(f.module)
            frame["module_offset"] = f"0x{f.module_offset or 0:x}"
        frames.append(frame)
    data = {"crashing_thread": 0, "threads": [{"frames": frames}]}
    return str(siggen_generator.SignatureGenerator().generate(data).signature)


def coreepi(report: CrashReport, top_n: int = 5) -> str:
    return generate_signature(report, SignatureConfig(top_n=top_n)).signature


@pytest.fixture(scope="module")
def real(get_crash, tmp_path_factory) -> Callable[[str], CrashReport]:  # type: ignore[no-untyped-def]
    """``real(case)``: the analysed report of a crasher or reference core."""
    cache: dict[str, CrashReport] = {}

    def get(name: str) -> CrashReport:
        if name not in cache:
            if name in REFERENCE_CASES:
                factory = shared_factory(tmp_path_factory.mktemp("reference"))
                crash = get_reference_crash(factory, name)
            else:
                crash = get_crash(name)
            cache[name] = inspect_core(crash.core, exe=crash.binary)
        return cache[name]

    return get


@pytest.mark.parametrize(
    "case",
    ["null_deref", "readonly_write", "threads50", "assert", "stack_overflow", "divzero@kernel"],
)
def test_agree_on_the_top_frame(real, case: str) -> None:
    """Ordinary crashes in our own code: with one frame, the two agree."""
    report = real(case)
    assert coreepi(report, top_n=1) == siggen(report)


@pytest.mark.parametrize("case", ["null_deref", "threads50", "readonly_write"])
def test_d1_coreepi_keeps_the_callers(real, case: str) -> None:
    report = real(case)
    ours = coreepi(report).split(" | ")
    assert ours[0] == siggen(report) and len(ours) > 1


def test_d2_abort_frames_are_not_part_of_the_signature(real) -> None:
    report = real("abort@kernel")
    assert siggen(report) == "raise | abort | give_up"
    assert coreepi(report) == "give_up | main"


def test_d2_d3_uncaught_exception_named_by_its_thrower(real) -> None:
    """Socorro's signature of every uncaught C++ exception in a process with
    a distribution's (symbol-less) libstdc++ is the same three words."""
    report = real("cxx_exception")
    assert siggen(report) == "raise | abort | libstdc++.so.6"
    assert coreepi(report) == "load_config | main"


def test_d3_unsymbolized_frames_keep_their_function() -> None:
    one = make_report([(None, "context", LIB + 0x1200), ("main", "cfi")])
    two = make_report([(None, "context", LIB + 0x5600), ("main", "cfi")])
    assert siggen(one) == siggen(two) == "libfoo.so.1"  # one bucket for two functions
    assert coreepi(one) == "libfoo.so.1+0x1200 | main"
    assert coreepi(two) == "libfoo.so.1+0x5600 | main"


def test_d4_unusable_stacks(real) -> None:
    b = real("unwind_race")
    assert siggen(b) == "@0x0 | SlotGuard::~SlotGuard"
    assert coreepi(b).startswith("return-to-null | SlotGuard::~SlotGuard | ")
    # disease (a): Socorro's buckets follow wherever the bad `ret` went
    a = [c for c in REFERENCE_CASES if c.startswith("misaligned:")]
    assert {siggen(real(c)) for c in a} == {
        "release_buffer", "@0x0 | parse_header", "request_arena"
    }  # fmt: skip
    assert {coreepi(real(c)) for c in a} == {"stack-misaligned | misaligned_ret"}


def test_d5_scanned_frames_only_when_nothing_better() -> None:
    report = make_report([("Parser::parse()", "context"), ("stale_callback()", "scan")])
    assert coreepi(report) == "Parser::parse"
    # Socorro stops at the first frame anyway; with a prefix frame on top it
    # reads on into the scanned one
    report = make_report([("memcpy", "context"), ("stale_callback()", "scan"), ("main", "cfi")])
    assert siggen(report) == "memcpy | stale_callback"
    assert coreepi(report) == "memcpy | main"


def test_d6_compiler_clone_suffixes() -> None:
    report = make_report([("compress_block.constprop.0", "context"), ("main", "cfi")])
    assert siggen(report) == "compress_block.constprop.0"
    assert coreepi(report) == "compress_block | main"
