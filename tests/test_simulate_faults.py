"""The fault injector on its own: real workloads, real faults from outside
(gdb), real cores, analysed by coreepi.

* rsp off by 8, injected at a random instant into a healthy kvstore run,
  crashes it wherever the bad `ret` lands, and the analyzer's
  stack-misaligned rule (``analyze/phenotypes/stack_misaligned.py``,
  check ``after-ret``) sees it;
* flipped register and heap bits crash it too (in varied ways);
* runs without faults crash from the program's own bug, or not at all when
  the version does not have it;
* the indexer's high exception profile crashes with return-to-NULL.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from coreepi.ingest.artifacts import inspect_core
from coreepi.model.report import CrashReport
from coreepi.simulate.faults import GdbRun, run_under_gdb
from coreepi.simulate.sampling import REGISTERS
from coreepi.simulate.workloads import build_workload

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 workloads and registers"),
    pytest.mark.skipif(
        shutil.which("gdb") is None or shutil.which("g++") is None, reason="needs gdb, gcc and g++"
    ),
]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cache = tmp_path_factory.mktemp("workload-cache")
    return {
        "kvstore-1": build_workload("kvstore", "kvstore.c", ["APP_VERSION=1"], cache),
        "kvstore-2": build_workload("kvstore", "kvstore.c", ["APP_VERSION=2"], cache),
        "indexer": build_workload("indexer", "indexer.cpp", [], cache),
    }


def _run(binary: Path, argv: list[str], work: Path, **kw: object) -> GdbRun:
    return run_under_gdb(binary, argv, work / "core", work, timeout=60, **kw)  # type: ignore[arg-type]


def _report(run: GdbRun, binary: Path) -> CrashReport:
    assert run.outcome == "crashed" and run.core is not None, run.as_dict()
    return inspect_core(run.core, exe=binary)


def _names(report: CrashReport) -> set[str]:
    return {p.name for p in report.phenotypes}


def test_rsp_minus_8_gives_stack_misaligned(binaries: dict[str, Path], tmp_path: Path) -> None:
    binary = binaries["kvstore-1"]
    faults = [{"kind": "rsp-8", "delay_ms": d} for d in (120, 40, 40, 40)]
    with ThreadPoolExecutor(2) as pool:
        runs = list(
            pool.map(
                lambda k: _run(binary, ["none", "4"], tmp_path / f"r{k}", faults=faults), range(3)
            )
        )
    # the program's own functions: a stop inside libc (free's bookkeeping) makes libc abort
    # on the bad stack ("free(): invalid pointer"), an abort, not a misaligned return — a
    # real outcome of the fault, seen once in CI; the phenotype is asserted for the rest
    own = {line.split()[2] for line in subprocess.run(
        ["nm", "--defined-only", str(binary)], capture_output=True, text=True, check=True
    ).stdout.splitlines() if len(line.split()) == 3 and line.split()[1] in "Tt"}
    judged = 0
    for run in runs:
        applied = [f for f in run.faults if "skipped" not in f]
        assert applied, run.as_dict()
        first = applied[0]
        assert first["target"] == "rsp"
        assert int(first["old"], 16) - int(first["new"], 16) == 8
        assert first["at"]["symbol"], first
        if first["at"]["symbol"].split(" + ")[0].split("+")[0] not in own:
            continue
        judged += 1
        report = _report(run, binary)
        names = _names(report)
        assert "stack-misaligned" in names, (names, run.as_dict())
        (p,) = [p for p in report.phenotypes if p.name == "stack-misaligned"]
        assert p.evidence["check"] == "after-ret"
        assert p.evidence["off_by"] == "rsp 8 bytes too low"
        assert p.hardware_indicative
        assert report.signature is not None
        assert report.signature.signature == "stack-misaligned | kvstore"
    assert judged >= 2, [r.as_dict()["faults"] for r in runs]


def test_a_stop_before_the_process_ran_adds_no_second_fault(binaries: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """The flake of the test above: on a loaded machine a stop could arrive
    while gdb still applied the last fault, so a second rsp-8 struck before
    the process ran one instruction (same pc, rsp now 16 off; seen: two faults
    at ``parse_request + 116``, read as null-deref, or 16 off read as "8 too
    high"). Stops 2-8 ms apart land while gdb applies the last fault: none
    may strike before the process has moved."""
    faults = [{"kind": "rsp-8", "delay_ms": 120}] + [{"kind": "rsp-8", "delay_ms": d} for d in (2, 4, 6, 8) * 4]
    run = _run(binaries["kvstore-1"], ["none", "4"], tmp_path, faults=faults)
    applied = [f for f in run.faults if "skipped" not in f]
    assert applied, run.as_dict()
    for before, after in zip(applied, applied[1:]):
        assert (after["at"]["pc"], after["at"]["sp"]) != (before["at"]["pc"], before["new"]), run.as_dict()


def test_rsp_minus_8_at_a_call_from_entry_reads_too_low(binaries: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """The one-instruction window the random stop of the test above can hit:
    rsp-8 at kvstore's ``table_lookup: call table_find`` (a call straight from
    the entry). table_find returns fine; table_lookup's ``ret`` pops the slot
    8 below its return address. The slot above holds table_lookup's genuine
    return address, which the rule had put down to an overwritten return of
    table_find (return-to-null in -O2 code) and so named nothing; the return
    address of that very call, 8 below the popped slot, says the call itself
    ran with rsp 8 too low. gdb stops there by a breakpoint (its 20th pass:
    the slot above is stale data of earlier requests), ASLR on."""
    binary = binaries["kvstore-1"]
    core = tmp_path / "core"
    cmds = ["set pagination off", "set confirm off", "set disable-randomization off", "starti",
            "break *table_lookup", "ignore 1 20", "continue", "set $rsp = $rsp - 8", "delete",
            "continue", f"gcore {core}"]
    subprocess.run(["gdb", "-batch", "-nx", *(x for c in cmds for x in ("-ex", c)),
                    "--args", str(binary), "none", "4"], capture_output=True, timeout=120,
                   check=False)
    assert core.exists()
    report = inspect_core(core, exe=binary)
    (p,) = [p for p in report.phenotypes if p.name == "stack-misaligned"]
    assert (p.evidence["check"], p.evidence["off_by"]) == ("after-ret", "rsp 8 bytes too low")
    assert p.hardware_indicative and report.signature is not None
    assert report.signature.signature == "stack-misaligned | kvstore"


def test_rsp_plus_8_gives_stack_misaligned(binaries: dict[str, Path], tmp_path: Path) -> None:
    binary = binaries["kvstore-1"]
    run = _run(binary, ["none", "4"], tmp_path, faults=[{"kind": "rsp+8", "delay_ms": 100}] * 3)
    report = _report(run, binary)
    assert "stack-misaligned" in _names(report), (_names(report), run.as_dict())
    # The direction is not always recoverable: with rsp 8 too high the ret pops
    # the caller's lowest word, and when the word above that is the caller's
    # own return address, both neighbours of the popped slot are return
    # addresses; the rule tries "too low" first (stack_misaligned.py,
    # _genuine_return), so it may say "too low" here.
    (p,) = [p for p in report.phenotypes if p.name == "stack-misaligned"]
    assert p.evidence["off_by"] in {"rsp 8 bytes too high", "rsp 8 bytes too low"}


def _bitflips(kind: str, n: int, seed: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for k in range(n):
        f: dict[str, object] = {
            "kind": kind,
            "delay_ms": 80 if k == 0 else 25,
            "bit": int(rng.integers(48)),
        }
        if kind == "reg-bitflip":
            f["register"] = REGISTERS[int(rng.integers(len(REGISTERS)))]
        else:
            f["fraction"] = float(rng.random())
        out.append(f)
    return out


@pytest.mark.parametrize("kind, seed", [("reg-bitflip", 1), ("heap-bitflip", 2)])
def test_bit_flips_give_crashes(
    binaries: dict[str, Path], tmp_path: Path, kind: str, seed: int
) -> None:
    """Flipped bits crash the program sooner or later (most flips hit dead
    values: the process takes faults until one matters, as on a bad host)."""
    binary = binaries["kvstore-1"]
    run = _run(binary, ["none", "6"], tmp_path, faults=_bitflips(kind, 60, seed))
    report = _report(run, binary)
    applied = [f for f in run.faults if "skipped" not in f]
    assert applied and all(
        (int(f["old"], 16) ^ int(f["new"], 16)).bit_count() == 1 for f in applied
    ), run.faults
    assert report.signal is not None and report.signal.name in {
        "SIGSEGV",
        "SIGBUS",
        "SIGILL",
        "SIGFPE",
        "SIGABRT",
        "SIGTRAP",
    }
    assert report.signature is not None and report.signature.signature


def test_bug_runs_crash_on_their_own(binaries: dict[str, Path], tmp_path: Path) -> None:
    v2 = _run(binaries["kvstore-2"], ["null-deref-v2", "20"], tmp_path / "v2")
    report = _report(v2, binaries["kvstore-2"])
    assert "null-deref" in _names(report)
    assert report.signature is not None
    assert report.signature.signature.startswith("cache_refresh | table_lookup")
    v1 = _run(binaries["kvstore-1"], ["null-deref-v2", "0.3"], tmp_path / "v1")
    assert v1.outcome == "exited" and v1.core is None  # version 1 has no such bug


def test_high_exception_profile_returns_to_null(binaries: dict[str, Path], tmp_path: Path) -> None:
    binary = binaries["indexer"]
    run = _run(
        binary, ["none", "high-exceptions+sigusr2", "30"], tmp_path, pass_signals=["SIGUSR2"]
    )
    report = _report(run, binary)
    names = _names(report)
    assert "return-to-null" in names and "stack-misaligned" not in names, names
    assert report.signature is not None
    assert report.signature.signature.startswith("return-to-null | SlotGuard::~SlotGuard")
