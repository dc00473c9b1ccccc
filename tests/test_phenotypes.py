"""Built-in phenotypes on real cores: each rule fires on a core made to show
it, does not fire on the others, and records exact evidence.

Expected values come from the programs (what they print), from the cores'
notes read by eu-readelf (``crash.notes``), and from binutils, not from
coreepi. Cores are made once per session (tests/analyze_cores.py). Two
cores are labelled SIMULATED where working hardware cannot produce the
crash: see ``test_sigbus_mce_*`` and ``test_illegal_instruction_valid_opcode``.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

pytest_plugins = ("analyze_cores",)  # fixtures: analyze_crash, analyzed
from coreepi.analyze.phenotypes import builtin_rules
from coreepi.model.report import CrashReport, Phenotype

# Which built-ins fire on which core: the positive and negative cases of every
# rule in one table. Cases without '@' or from tests/crashers/ are gcore cores.
EXPECTED: dict[str, set[str]] = {
    "null_deref": {"null-deref"},
    "readonly_write": {"write-to-readonly"},
    "abort@kernel": set(),
    "assert": {"abort-with-message"},
    "stack_overflow": {"stack-overflow"},
    "divzero@kernel": {"divide-error"},
    "ud2": {"illegal-instruction"},
    "sigbus@kernel": set(),
    "cxx_exception": {"in-exception-unwind", "uncaught-exception"},
    "wild_pointer": {"wild-pointer"},
    "noncanonical": {"non-canonical-address"},
    "rodata_write": {"write-to-readonly"},
    "null_fnptr": {"null-deref", "pc-not-executable"},
    "call_noncanonical_reg": {"non-canonical-address"},
    "call_noncanonical_mem": {"non-canonical-address"},
    "ret_null": {"null-deref", "pc-not-executable", "return-to-null"},
    "ret_bogus": {"pc-not-executable", "return-to-bogus"},
    "ret_noncanonical": {"non-canonical-address", "return-to-bogus"},
    "ret_misaligned": {"pc-not-executable", "return-to-bogus", "stack-misaligned"},
    "movaps_misaligned": {"stack-misaligned"},
    "handler_crash": {"null-deref", "signal-handler-active"},
    # abort() in a SIGSEGV handler: the handled page fault at 0x10
    "handler_abort@kernel": {"null-deref", "signal-handler-active"},
    "rust_panic": {"rust-panic"},  # skipped without rustc
    "noexcept_throw": {"in-exception-unwind", "uncaught-exception"},
    "bitflip": {"possible-bit-flip", "wild-pointer"},
    "double_free": {"abort-with-message", "double-free-or-heap-corruption"},
    "corrupted_top": {"abort-with-message", "double-free-or-heap-corruption"},
    "thread_overflow": {"stack-overflow"},
    "queued_sigill": {"illegal-instruction"},  # SIMULATED, see below
    "queued_mce": {"sigbus-mce"},  # SIMULATED, see below
}


def phenotype(report: Any, name: str) -> Phenotype:
    found = [p for p in report.phenotypes if p.name == name]
    assert len(found) == 1, (
        f"{name} fired {len(found)} times: {[p.name for p in report.phenotypes]}"
    )
    return found[0]


def nt_file_base(crash: Any, path: str) -> int:
    """Start of the file-offset-0 mapping of ``path`` in the core's NT_FILE."""
    return min(start for start, _, offset, p in crash.notes.files if p == path and offset == 0)


def test_every_builtin_rule_has_a_positive_and_a_negative_core() -> None:
    names = {rule.name for rule in builtin_rules()}
    fired = set().union(*EXPECTED.values())
    assert names == fired, f"rules without a positive core: {names - fired}"
    for name in names:
        assert any(name not in v for v in EXPECTED.values())


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_which_phenotypes_fire(analyzed: Any, case: str) -> None:
    report = analyzed(case)
    builtin = {rule.name for rule in builtin_rules()}
    names = [p.name for p in report.phenotypes if p.name in builtin]
    assert set(names) == EXPECTED[case]
    assert len(names) == len(set(names))
    assert not [w for w in report.analysis.warnings if "phenotype rule" in w]


def test_hardware_indicative_flags(analyzed: Any) -> None:
    hw = {
        (case, p.name)
        for case in EXPECTED
        for p in analyzed(case).phenotypes
        if p.hardware_indicative
    }
    assert hw == {
        ("ret_misaligned", "stack-misaligned"),
        ("movaps_misaligned", "stack-misaligned"),
        ("bitflip", "possible-bit-flip"),
        ("queued_sigill", "illegal-instruction"),
        ("queued_mce", "sigbus-mce"),
    }


# -- memory-access phenotypes


def test_null_deref_evidence(analyzed: Any, analyze_crash: Any) -> None:
    p = phenotype(analyzed("null_deref"), "null-deref")
    assert p.evidence == {
        "fault_address": "0x10",
        "si_code": "SEGV_MAPERR",
        "offset_from_null": 16,
        "access": "data",
    }
    assert phenotype(analyzed("null_fnptr"), "null-deref").evidence["access"] == "execute"


def test_wild_pointer_evidence(analyzed: Any, analyze_crash: Any) -> None:
    p = phenotype(analyzed("wild_pointer"), "wild-pointer")
    assert p.evidence["fault_address"] == "0x3ead0000beef"
    assert analyze_crash("wild_pointer").notes.siginfo.fault_address == 0x3EAD0000BEEF
    assert p.evidence["si_code"] == "SEGV_MAPERR"


def test_non_canonical_address_from_the_decoded_instruction(
    analyzed: Any, analyze_crash: Any
) -> None:
    crash = analyze_crash("noncanonical")
    assert crash.notes.siginfo.code == 0x80  # SI_KERNEL
    assert crash.notes.siginfo.fault_address in (None, 0)
    p = phenotype(analyzed("noncanonical"), "non-canonical-address")
    rax = crash.notes.crashed.registers["rax"] & ((1 << 64) - 1)  # eu-readelf prints it signed
    assert rax == 0x8000000000000000
    assert p.evidence["instruction"] == "mov rax, qword ptr [rax + 0x10]"
    assert p.evidence["instruction_bytes"] == "488b4010"
    assert p.evidence["operand"] == "[rax + 0x10]"
    assert p.evidence["address"] == "0x8000000000000010"
    assert p.evidence["registers"] == {"rax": "0x8000000000000000"}
    assert p.evidence["instruction_address"] == f"0x{crash.notes.crashed.registers['rip']:x}"


def test_non_canonical_return_address(analyzed: Any, analyze_crash: Any) -> None:
    regs = analyze_crash("ret_noncanonical").notes.crashed.registers
    report = analyzed("ret_noncanonical")
    p = phenotype(report, "non-canonical-address")
    assert p.evidence["instruction"] == "ret"
    assert p.evidence["address"] == "0x8000000000001000"
    assert p.evidence["registers"] == {"rsp": f"0x{regs['rsp']:x}"}
    bogus = phenotype(report, "return-to-bogus")
    assert bogus.evidence["return_address"] == "0x8000000000001000"
    assert bogus.evidence["pc"] == f"0x{regs['rip']:x}"


def _objdump_call(binary: Any, function: str) -> tuple[int, str]:
    """(offset, AT&T text) of the one indirect call in ``function``, by objdump."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--disassemble={function}", str(binary)],
        capture_output=True, text=True, check=True,
    ).stdout
    calls = re.findall(r"^\s*([0-9a-f]+):\s+(call\s+\*\S+)", out, re.M)
    assert len(calls) == 1, out
    return int(calls[0][0], 16), calls[0][1]


@pytest.mark.parametrize(
    ("case", "function", "att", "intel", "operand"),
    [
        ("call_noncanonical_reg", "dispatch", "call   *%rdx", "call rdx", "rdx"),
        (
            "call_noncanonical_mem", "close_via", "call   *0x8(%rax)",
            "call qword ptr [rax + 8]", "[rax + 0x8]",
        ),
    ],
)
def test_non_canonical_branch_target(
    analyzed: Any, analyze_crash: Any, case: str, function: str, att: str, intel: str,
    operand: str,
) -> None:
    """A call through a function pointer overwritten with 0x4141414141414141
    faults on the call itself (#GP): no fault address, pc at the call."""
    crash = analyze_crash(case)
    assert crash.notes.siginfo.code == 0x80  # SI_KERNEL
    assert crash.notes.siginfo.fault_address in (None, 0)
    regs = {k: v & ((1 << 64) - 1) for k, v in crash.notes.crashed.registers.items()}
    offset, text = _objdump_call(crash.binary, function)
    assert text == att
    p = phenotype(analyzed(case), "non-canonical-address")
    assert p.evidence["instruction_address"] == f"0x{regs['rip']:x}"
    assert p.evidence["instruction"] == intel
    assert p.evidence["operand"] == operand
    assert p.evidence["branch_target"] == p.evidence["address"] == "0x4141414141414141"
    if operand == "rdx":
        assert regs["rdx"] == 0x4141414141414141
        assert p.evidence["registers"] == {"rdx": "0x4141414141414141"}
        assert "target_slot" not in p.evidence
    else:
        nm = subprocess.run(["nm", str(crash.binary)], capture_output=True, text=True).stdout
        table = int(re.search(r"^([0-9a-f]+) D table$", nm, re.M).group(1), 16)  # type: ignore[union-attr]
        load_bias = regs["rip"] - offset  # PIE linked at 0
        assert regs["rax"] == load_bias + table
        assert p.evidence["registers"] == {"rax": f"0x{regs['rax']:x}"}
        assert p.evidence["target_slot"] == f"0x{load_bias + table + 8:x}"


def test_write_to_readonly_rodata(analyzed: Any, analyze_crash: Any) -> None:
    crash = analyze_crash("rodata_write")
    p = phenotype(analyzed("rodata_write"), "write-to-readonly")
    assert p.evidence["fault_address"] == f"0x{crash.printed_fault_address:x}"
    assert p.evidence["mapping_path"] == str(crash.binary)
    assert p.evidence["mapping"].endswith(" r--")
    assert p.evidence["instruction"] == "mov byte ptr [rax], 0x48"  # 'H'
    assert p.evidence["operand"] == "[rax]"


def test_write_to_readonly_anonymous_page(analyzed: Any) -> None:
    p = phenotype(analyzed("readonly_write"), "write-to-readonly")
    assert p.evidence["fault_address"] == "0x5a5a0018"
    assert p.evidence["mapping"] == "0x5a5a0000-0x5a5a1000 r--"
    assert p.evidence["mapping_path"] is None


# -- control-flow phenotypes


def test_pc_not_executable_call_through_null(analyzed: Any, analyze_crash: Any) -> None:
    p = phenotype(analyzed("null_fnptr"), "pc-not-executable")
    assert p.evidence == {"pc": "0x0", "pc_mapping": None, "pc_mapping_path": None}
    assert analyze_crash("null_fnptr").notes.crashed.registers["rip"] == 0


def test_return_to_null_slot_below_sp(analyzed: Any, analyze_crash: Any) -> None:
    regs = analyze_crash("ret_null").notes.crashed.registers
    p = phenotype(analyzed("ret_null"), "return-to-null")
    assert regs["rip"] == 0
    assert p.evidence == {
        "pc": "0x0",
        "sp": f"0x{regs['rsp']:x}",
        "return_slot": f"0x{regs['rsp'] - 8:x}",
        "return_slot_value": "0x0",
    }


def test_return_to_bogus_evidence(analyzed: Any, analyze_crash: Any) -> None:
    regs = analyze_crash("ret_bogus").notes.crashed.registers
    p = phenotype(analyzed("ret_bogus"), "return-to-bogus")
    assert p.evidence == {
        "pc": "0x100000001000",
        "sp": f"0x{regs['rsp']:x}",
        "pc_perms": None,
        "return_slot": f"0x{regs['rsp'] - 8:x}",
        "return_slot_value": "0x100000001000",
    }


def _symbol_offset(binary: Any, name: str) -> int:
    out = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    return int(re.search(rf"^([0-9a-f]+) T {name}$", out, re.MULTILINE).group(1), 16)  # type: ignore[union-attr]


def test_stack_misaligned_after_ret(analyzed: Any, analyze_crash: Any) -> None:
    """`leave; sub $8,%rsp; ret` pops the saved rbp: the real return address
    (into worker, after `call misaligned_return`) is 8 bytes above."""
    crash = analyze_crash("ret_misaligned")
    regs = crash.notes.crashed.registers
    base = nt_file_base(crash, str(crash.binary))
    target = base + _symbol_offset(crash.binary, "misaligned_return")
    p = phenotype(analyzed("ret_misaligned"), "stack-misaligned")
    assert regs["rsp"] % 16 == 8
    assert p.confidence == 0.9
    assert p.evidence["check"] == "after-ret"
    assert p.evidence["sp_mod_16"] == 8
    assert p.evidence["off_by"] == "rsp 8 bytes too low"
    assert p.evidence["return_slot"] == f"0x{regs['rsp'] - 8:x}"
    assert p.evidence["return_slot_value"] == f"0x{regs['rip']:x}"
    assert p.evidence["genuine_return_slot"] == f"0x{regs['rsp']:x}"
    assert p.evidence["genuine_call"].endswith(f": call 0x{target:x}")


def test_stack_misaligned_movaps(analyzed: Any, analyze_crash: Any) -> None:
    regs = analyze_crash("movaps_misaligned").notes.crashed.registers
    p = phenotype(analyzed("movaps_misaligned"), "stack-misaligned")
    assert regs["rsp"] % 16 == 8
    assert p.evidence["check"] == "aligned-access"
    assert p.evidence["instruction"] == "movaps xmmword ptr [rsp], xmm0"
    assert p.evidence["instruction_bytes"] == "0f290424"
    assert p.evidence["operand_address"] == f"0x{regs['rsp']:x}"


def test_stack_misaligned_not_on_gcc_local_call(analyzed: Any, analyze_crash: Any) -> None:
    """GCC calls store_field (binds locally, needs no alignment) with rsp ≡ 8
    (mod 16): a legal exception to the psABI rule, not the disease."""
    report = analyzed("null_deref")
    caller = report.crashed_thread.frames[1]
    assert caller.function == "handle_request" and caller.sp % 16 == 8
    assert "stack-misaligned" not in [p.name for p in report.phenotypes]


def test_stack_overflow_main_thread_guard_gap(analyzed: Any, analyze_crash: Any) -> None:
    crash = analyze_crash("stack_overflow")
    p = phenotype(analyzed("stack_overflow"), "stack-overflow")
    fault = crash.notes.siginfo.fault_address
    assert p.evidence["fault_address"] == f"0x{fault:x}"
    assert p.evidence["sp"] == f"0x{crash.notes.crashed.registers['rsp']:x}"
    assert p.evidence["guard"] == "guard-gap"
    start = int(p.evidence["stack_mapping"].split("-")[0], 16)
    assert p.evidence["bytes_below_stack"] == start - fault > 0


def test_stack_overflow_thread_guard_page(analyzed: Any, analyze_crash: Any) -> None:
    crash = analyze_crash("thread_overflow")
    p = phenotype(analyzed("thread_overflow"), "stack-overflow")
    assert crash.notes.siginfo.code == 2  # SEGV_ACCERR: the PROT_NONE guard
    assert p.evidence["guard"] == "guard-page"
    assert p.evidence["guard_mapping"].endswith(" ---")


# -- abort phenotypes


def _abort_msg_address(crash: Any) -> int:
    libc = next(p for _, _, _, p in crash.notes.files if "/libc.so" in p)
    out = subprocess.run(
        ["readelf", "-W", "--dyn-syms", libc], capture_output=True, text=True, check=True
    ).stdout
    value = int(
        re.search(r"([0-9a-f]{16})\s+\d+\s+OBJECT\s+GLOBAL\s+\w+\s+\d+ __abort_msg@", out).group(1),
        16,
    )  # type: ignore[union-attr]
    return nt_file_base(crash, libc) + value


def test_abort_with_message_assert(analyzed: Any, analyze_crash: Any) -> None:
    crash = analyze_crash("assert")
    line = crash.line("CRASH-LINE")
    p = phenotype(analyzed("assert"), "abort-with-message")
    assert p.evidence["message"] == (
        f"assert: {crash.source}:{line}: check_invariant: Assertion `value == 42' failed."
    )
    assert p.evidence["message_kind"] == "assert"
    assert p.evidence["assertion"] == "value == 42"
    assert p.evidence["abort_msg_symbol"] == f"0x{_abort_msg_address(crash):x}"


def test_double_free_message(analyzed: Any) -> None:
    report = analyzed("double_free")
    assert phenotype(report, "abort-with-message").evidence["message"] == (
        "free(): double free detected in tcache 2"
    )
    p = phenotype(report, "double-free-or-heap-corruption")
    assert p.evidence["message"] == "free(): double free detected in tcache 2"
    assert p.evidence["kind"] == "double-free"
    assert [f["function"] for f in p.evidence["reporter_frames"]] == ["malloc_printerr"]


def test_heap_corruption_message(analyzed: Any) -> None:
    p = phenotype(analyzed("corrupted_top"), "double-free-or-heap-corruption")
    assert p.evidence["message"] == "malloc(): corrupted top size"
    assert p.evidence["kind"] == "heap-corruption"


def test_uncaught_exception_type_and_what(analyzed: Any) -> None:
    report = analyzed("cxx_exception")
    p = phenotype(report, "uncaught-exception")
    assert p.evidence["exception_type"] == "std::runtime_error"
    assert p.evidence["mangled_type"] == "St13runtime_error"
    assert p.evidence["what"] == "unsupported config version"
    frames = report.crashed_thread.frames
    assert frames[p.evidence["terminate_frame"]].function == "std::terminate()"


def test_uncaught_exception_through_noexcept(analyzed: Any) -> None:
    """std::terminate is unnamed here (libstdc++ has no symbols for it): the
    exception header found from the stack is the evidence."""
    report = analyzed("noexcept_throw")
    p = phenotype(report, "uncaught-exception")
    assert p.evidence["exception_type"] == "std::out_of_range"
    assert p.evidence["what"] == "header too long"
    assert p.evidence["dependent_exception"] is False
    unwind = phenotype(report, "in-exception-unwind")
    names = [f["function"] for f in unwind.evidence["unwind_frames"]]
    assert names == ["__gxx_personality_v0", "_Unwind_RaiseException", "__cxa_throw"]
    assert unwind.evidence["innermost"] == "__gxx_personality_v0"


# -- instruction phenotypes


def test_illegal_instruction_ud2_is_not_hardware(analyzed: Any, analyze_crash: Any) -> None:
    p = phenotype(analyzed("ud2"), "illegal-instruction")
    assert p.hardware_indicative is False
    assert p.evidence["verdict"] == "deliberate-trap"
    assert p.evidence["instruction"] == "ud2"
    assert p.evidence["instruction_bytes"] == "0f0b"
    assert p.evidence["pc"] == f"0x{analyze_crash('ud2').notes.crashed.registers['rip']:x}"


def test_illegal_instruction_valid_opcode(analyzed: Any, analyze_crash: Any) -> None:
    """SIMULATED hardware fault: a real kernel-written core whose SIGILL
    (ILL_ILLOPC) was queued by the process to itself with rt_sigqueueinfo
    while its pc was set to an ordinary `add %rsi,%rdi` (queued_fault.c).
    A working CPU does not raise SIGILL there; a faulty one would leave
    exactly this core."""
    crash = analyze_crash("queued_sigill")
    pc = int(re.search(r"^pc (0x[0-9a-f]+)", crash.stdout, re.MULTILINE).group(1), 16)  # type: ignore[union-attr]
    assert crash.notes.crashed.registers["rip"] == pc
    p = phenotype(analyzed("queued_sigill"), "illegal-instruction")
    assert p.hardware_indicative is True
    assert p.evidence["verdict"] == "valid-ordinary-instruction"
    assert p.evidence["instruction"] == "add rdi, rsi"
    assert p.evidence["instruction_bytes"] == "4801f7"
    assert p.evidence["bytes_at_pc"].startswith("4801f70f0b")  # add, then ud2
    assert p.evidence["si_code"] == "ILL_ILLOPC"


def test_divide_error_divisor(analyzed: Any, analyze_crash: Any) -> None:
    p = phenotype(analyzed("divzero@kernel"), "divide-error")
    assert p.evidence["cause"] == "divide-by-zero"
    assert p.evidence["divisor"] == 0
    assert p.evidence["instruction"].startswith("idiv ")
    assert (
        p.evidence["instruction_address"]
        == f"0x{analyze_crash('divzero@kernel').notes.siginfo.fault_address:x}"
    )


def _patched(report: CrashReport, si_code: int, name: str) -> CrashReport:
    patched = report.model_copy(deep=True)
    assert patched.signal is not None
    patched.signal.si_code = si_code
    patched.signal.si_code_name = name
    return patched


def test_sigbus_mce_patched_real_sigbus_core(analyze_crash: Any) -> None:
    """LIMIT: no real memory-failure SIGBUS can be made here (this kernel has
    no CONFIG_MEMORY_FAILURE: madvise(MADV_HWPOISON) fails with EINVAL). So a
    REAL SIGBUS core (BUS_ADRERR, read beyond EOF of a mapped file) is used
    with its report's si_code PATCHED to BUS_MCEERR_AR / _AO; the unpatched
    report is the negative case."""
    from coreepi.analyze import analyze
    from coreepi.parse.elf.core import open_core

    crash = analyze_crash("sigbus@kernel")
    for code, name, action_required in ((4, "BUS_MCEERR_AR", True), (5, "BUS_MCEERR_AO", False)):
        with open_core(crash.core, exe=crash.binary) as parsed:
            assert parsed.report.signal.si_code_name == "BUS_ADRERR"
            report = analyze(_patched(parsed.report, code, name), parsed.memory)
        p = phenotype(report, "sigbus-mce")
        assert p.hardware_indicative is True
        assert p.evidence == {
            "si_code": name,
            "action_required": action_required,
            "fault_address": "0x5b5b1020",
        }


def test_sigbus_mce_self_queued_core(analyzed: Any, analyze_crash: Any) -> None:
    """SIMULATED: a kernel-written core whose NT_SIGINFO says SIGBUS /
    BUS_MCEERR_AR because the process queued it to itself (queued_fault.c);
    it exercises NT_SIGINFO -> report -> rule end to end, not a real MCE."""
    crash = analyze_crash("queued_mce")
    assert (crash.notes.siginfo.signo, crash.notes.siginfo.code) == (7, 4)
    p = phenotype(analyzed("queued_mce"), "sigbus-mce")
    assert p.evidence["fault_address"] == f"0x{crash.printed_fault_address:x}"


# -- context phenotypes


def test_signal_handler_active_sigframe(analyzed: Any, analyze_crash: Any) -> None:
    crash = analyze_crash("handler_crash")
    rsp = crash.notes.crashed.registers["rsp"]
    report = analyzed("handler_crash")
    p = phenotype(report, "signal-handler-active")
    # on_usr1 (-O0, leaf) pushed only rbp: the frame's pretcode is just above
    assert p.evidence["sigframe_address"] == f"0x{rsp + 8:x}"
    trampoline = int(p.evidence["trampoline"], 16)
    libc = next(path for s, e, _, path in crash.notes.files if s <= trampoline < e)
    start, _, offset, _ = next(f for f in crash.notes.files if f[0] <= trampoline < f[1])
    with open(libc, "rb") as fh:
        fh.seek(offset + trampoline - start)
        assert fh.read(9).hex() == "48c7c00f0000000f05"  # mov $15,%rax; syscall
    interrupted = int(p.evidence["interrupted_pc"], 16)
    assert any(f.pc == interrupted for f in report.crashed_thread.frames)


def test_in_exception_unwind_uncaught(analyzed: Any) -> None:
    p = phenotype(analyzed("cxx_exception"), "in-exception-unwind")
    assert [f["function"] for f in p.evidence["unwind_frames"]] == ["__cxa_throw"]


def test_possible_bit_flip_heap_pointer(analyzed: Any, analyze_crash: Any) -> None:
    crash = analyze_crash("bitflip")
    original = int(re.search(r"^original (0x[0-9a-f]+)", crash.stdout, re.MULTILINE).group(1), 16)  # type: ignore[union-attr]
    p = phenotype(analyzed("bitflip"), "possible-bit-flip")
    best = p.evidence["best"]
    assert best["observed"] == f"0x{crash.printed_fault_address:x}"
    assert best["candidate"] == f"0x{original:x}"
    assert best["flipped_bit"] == 40
    assert best["candidate_perms"] == "rw-"
    assert p.confidence == best["confidence"] >= 0.25
