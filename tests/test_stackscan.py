"""Stack scanning (:mod:`coreepi.analyze.stackscan`) on real cores whose
return addresses were overwritten, and on hand-made stacks.

Real cores come from ``tests/crashers_reference/`` (see
:mod:`reference_cores`): ``overwrite_ret`` writes 0 over its own saved return
address, ``misaligned_ret`` returns with rsp 8 bytes off. In each, CFI
unwinding cannot get past frame 0 (or past the bad `ret`), and the callers
must come back as ``scan`` frames, named as in the source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from reference_cores import get_reference_crash, shared_factory

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.stackscan import MAX_SCAN_BYTES, run_stack_scan, scan_thread
from coreepi.ingest.artifacts import inspect_core
from coreepi.model.report import (
    AnalysisInfo,
    CrashReport,
    Frame,
    FrameTrust,
    Mapping,
    Module,
    Source,
    Thread,
)
from coreepi.parse.elf.core import open_core


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], CrashReport]:
    """``scanned(case)``: the analysed report of one reference core."""
    factory = shared_factory(tmp_path_factory.mktemp("reference"))
    cache: dict[str, CrashReport] = {}

    def get(name: str) -> CrashReport:
        if name not in cache:
            crash = get_reference_crash(factory, name)
            cache[name] = inspect_core(crash.core, exe=crash.binary)
        return cache[name]

    return get


def _names(report: CrashReport) -> list[tuple[str | None, str]]:
    thread = report.crashed_thread
    assert thread is not None
    return [(f.function, f.trust.value) for f in thread.frames]


@pytest.mark.parametrize("case", ["overwrite_ret", "overwrite_ret-O2"])
def test_zeroed_return_address_callers_recovered(scanned, case: str) -> None:
    report = scanned(case)
    frames = report.crashed_thread.frames
    assert frames[0].pc == 0 and frames[0].trust == FrameTrust.CONTEXT
    # commit_batch comes back from main's direct `call commit_batch` (its own
    # pc is lost with the zeroed slot), main from the stack word above it.
    assert _names(report)[1:3] == [("commit_batch", "scan"), ("main", "scan")]
    assert frames[2].module_offset is not None and frames[2].function_offset is not None
    assert [f.index for f in frames] == list(range(len(frames)))
    assert frames[-1].function == "_start"


@pytest.mark.parametrize(
    "case, caller",
    [
        ("misaligned:parse_header:low", "parse_header"),
        ("misaligned:flush_output:low", "flush_output"),
    ],
)
def test_rsp_too_low_every_caller_recovered(scanned, case: str, caller: str) -> None:
    """`ret` with rsp 8 too low pops the saved rbp and jumps into the stack;
    the real return address is then at sp: release_buffer (the callee of the
    recovered call), its caller, handle_request and main all come back."""
    names = _names(scanned(case))
    assert names[0] == (None, "context")
    assert names[1:5] == [
        ("release_buffer", "scan"),
        (caller, "scan"),
        ("handle_request", "scan"),
        ("main", "scan"),
    ]


def test_ret_faulting_with_rsp_too_high_keeps_frame_zero(scanned) -> None:
    """The `ret` itself faults (#GP: it would pop a non-canonical address).
    Frame 0 is good (release_buffer, from the registers); CFI's frame 1 is the
    popped garbage and is replaced by scanned callers. parse_body's own return
    address sits just below sp and is lost; its caller is recovered."""
    report = scanned("misaligned:parse_body:high")
    names = _names(report)
    assert names[0] == ("release_buffer", "context")
    assert names[1:3] == [("handle_request", "scan"), ("main", "scan")]
    assert 0xDEAD00000000BEEF not in [f.pc for f in report.crashed_thread.frames]


def test_healthy_stack_is_left_alone(get_crash) -> None:
    crash = get_crash("null_deref")
    with open_core(crash.core, exe=crash.binary) as parsed:
        before = [f.model_copy() for f in parsed.report.crashed_thread.frames]
        ctx = AnalysisContext(parsed.report, parsed.memory)
        assert scan_thread(ctx, parsed.report.crashed_thread) is None
        assert parsed.report.crashed_thread.frames == before


# ---------------------------------------------------------------------------
# hand-made stacks: a fake memory with one code page and one stack page

CODE, STACK = 0x400000, 0x7FF000000000
CALL_REL32 = b"\xe8\x00\x00\x00\x00"  # call +0: ends exactly where it returns


@dataclass
class FakeRegion:
    start: int
    end: int
    perms: str
    path: str | None = None


class FakeMemory:
    """Process memory from a dict of regions; reads outside them are None."""

    arch = "x86_64"

    def __init__(self, code: bytes, stack: bytes) -> None:
        self.data = {CODE: code, STACK: stack}
        self.regions = [
            FakeRegion(CODE, CODE + len(code), "r-x", "/srv/app"),
            FakeRegion(STACK, STACK + len(stack), "rw-"),
        ]

    def region_for(self, address: int) -> FakeRegion | None:
        return next((r for r in self.regions if r.start <= address < r.end), None)

    def is_executable(self, address: int) -> bool:
        r = self.region_for(address)
        return r is not None and "x" in r.perms

    def read(self, address: int, size: int) -> bytes | None:
        r = self.region_for(address)
        if r is None or address + size > r.end:
            return None
        base = self.data[r.start]
        return base[address - r.start : address - r.start + size]

    def read_word(self, address: int) -> int | None:
        data = self.read(address, 8)
        return None if data is None else int.from_bytes(data, "little")


def _report(frames: list[Frame], sp: int, pc: int) -> CrashReport:
    return CrashReport(
        crash_id="x",
        source=Source.ELF_CORE,
        arch="x86_64",
        threads=[Thread(tid=1, crashed=True, registers={"rip": pc, "rsp": sp}, frames=frames)],
        modules=[Module(path="/srv/app", base=CODE, end=CODE + 0x1000)],
        memory_map=[
            Mapping(start=CODE, end=CODE + 0x1000, perms="r-x", in_core=False),
            Mapping(start=STACK, end=STACK + 0x20000, perms="rw-", in_core=True),
        ],
        analysis=AnalysisInfo(analyzer_version="test"),
    )


def _code_with_calls(*returns: int) -> bytes:
    """A code page with a 5-byte direct call ending at each offset in ``returns``."""
    code = bytearray(b"\x90" * 0x1000)  # nop
    for off in returns:
        code[off - 5 : off] = CALL_REL32
    return bytes(code)


def _word(value: int) -> bytes:
    return value.to_bytes(8, "little")


def test_only_words_after_a_call_are_frames() -> None:
    code = _code_with_calls(0x105, 0x205)
    stack = bytearray(0x20000)
    stack[0:8] = _word(CODE + 0x105)  # a return address
    stack[8:16] = _word(CODE + 0x300)  # points into code, but no call before it
    stack[16:24] = _word(STACK + 64)  # a stack pointer
    stack[24:32] = _word(CODE + 0x205)  # another return address
    report = _report([Frame(index=0, pc=0, sp=STACK, trust=FrameTrust.CONTEXT)], STACK, 0)
    run_stack_scan(AnalysisContext(report, FakeMemory(code, bytes(stack))))
    frames = report.crashed_thread.frames
    pcs = [f.pc for f in frames if f.trust == FrameTrust.SCAN and f.sp is not None]
    assert pcs == [CODE + 0x105, CODE + 0x205]
    assert frames[-1].sp == STACK + 32  # one word above where it was found
    assert all(f.module == "/srv/app" for f in frames[1:])


def test_unwinding_loop_is_cut_and_scanned() -> None:
    code = _code_with_calls(0x105, 0x205)
    stack = bytearray(0x20000)
    stack[0x40:0x48] = _word(CODE + 0x205)
    looping = [
        Frame(index=0, pc=CODE + 0x10, sp=STACK, trust=FrameTrust.CONTEXT),
        Frame(index=1, pc=CODE + 0x105, sp=STACK + 0x10, trust=FrameTrust.CFI),
        Frame(index=2, pc=CODE + 0x105, sp=STACK + 0x10, trust=FrameTrust.CFI),
    ]
    report = _report(looping, STACK, CODE + 0x10)
    result = scan_thread(
        AnalysisContext(report, FakeMemory(code, bytes(stack))), report.crashed_thread
    )
    assert result is not None and "loop" in result.reason
    assert [f.pc for f in report.crashed_thread.frames] == [CODE + 0x10, CODE + 0x105, CODE + 0x205]


def test_scan_is_bounded_and_survives_unreadable_memory() -> None:
    code = _code_with_calls(0x105)
    stack = bytearray(0x20000)
    stack[MAX_SCAN_BYTES + 8 : MAX_SCAN_BYTES + 16] = _word(CODE + 0x105)  # beyond the bound
    report = _report([Frame(index=0, pc=0, sp=STACK, trust=FrameTrust.CONTEXT)], STACK, 0)
    run_stack_scan(AnalysisContext(report, FakeMemory(code, bytes(stack))))
    assert len(report.crashed_thread.frames) == 1
    # sp outside every mapping (a wild rsp): nothing to scan, no exception
    report = _report([Frame(index=0, pc=0, sp=0x1234, trust=FrameTrust.CONTEXT)], 0x1234, 0)
    run_stack_scan(AnalysisContext(report, FakeMemory(code, bytes(stack))))
    assert len(report.crashed_thread.frames) == 1


def test_no_memory_no_scan() -> None:
    report = _report([Frame(index=0, pc=0, sp=STACK, trust=FrameTrust.CONTEXT)], STACK, 0)
    run_stack_scan(AnalysisContext(report, None))
    assert len(report.crashed_thread.frames) == 1


def test_aarch64_bl_and_blr_recognized() -> None:
    from coreepi.analyze.stackscan import _call_before

    code = bytearray(0x1000)
    code[0x100:0x104] = (0x94000000 | 0x10).to_bytes(4, "little")  # bl +0x40
    code[0x200:0x204] = (0xD63F0000 | (3 << 5)).to_bytes(4, "little")  # blr x3
    code[0x300:0x304] = (0xD65F03C0).to_bytes(4, "little")  # ret: not a call
    memory = FakeMemory(bytes(code), bytes(0x20000))
    memory.arch = "aarch64"
    report = _report([], STACK, 0)
    report.arch = "aarch64"
    ctx = AnalysisContext(report, memory)
    assert _call_before(ctx, CODE + 0x104) == (CODE + 0x100, CODE + 0x140)
    assert _call_before(ctx, CODE + 0x204) == (CODE + 0x200, None)
    assert _call_before(ctx, CODE + 0x304) is None
    assert _call_before(ctx, CODE + 0x102) is None  # not 4-aligned
