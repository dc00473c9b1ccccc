"""Signatures (:mod:`coreepi.analyze.signature`): normalization, the lists,
trust, unusable stacks, the trail, configuration, and real cores."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreepi.analyze.signature import (
    SignatureConfig,
    SignatureGenerator,
    generate_signature,
    normalize_function,
)
from coreepi.analyze.signature.rules import SignatureRule, SignatureState
from coreepi.ingest.artifacts import inspect_core
from coreepi.model.report import (
    AnalysisInfo,
    CrashReport,
    Frame,
    FrameTrust,
    Mapping,
    Module,
    Phenotype,
    ProcessInfo,
    Source,
    Thread,
)

CODE, LIB = 0x555555554000, 0x7F0000000000


def make_report(
    frames: list[tuple[str | None, str] | tuple[str | None, str, int]],
    *,
    phenotypes: tuple[str, ...] = (),
    pc0: int | None = None,
) -> CrashReport:
    """A report whose crashed thread has ``frames`` ((function, trust[, pc])),
    in the executable ``/srv/bin/app`` unless a pc says otherwise."""
    out = []
    for i, spec in enumerate(frames):
        function, trust = spec[0], spec[1]
        pc = spec[2] if len(spec) == 3 else CODE + 0x1000 + 0x10 * i  # type: ignore[misc]
        if i == 0 and pc0 is not None:
            pc = pc0
        module = "/srv/bin/app" if CODE <= pc < CODE + 0x10000 else None
        if LIB <= pc < LIB + 0x10000:
            module = "/usr/lib/libfoo.so.1"
        base = CODE if module == "/srv/bin/app" else LIB
        out.append(
            Frame(
                index=i,
                pc=pc,
                module=module,
                module_offset=pc - base if module else None,
                function=function,
                trust=FrameTrust(trust),
            )
        )
    return CrashReport(
        crash_id="t",
        source=Source.ELF_CORE,
        arch="x86_64",
        process=ProcessInfo(exe="/srv/bin/app"),
        threads=[Thread(tid=1, crashed=True, frames=out)],
        modules=[
            Module(path="/srv/bin/app", base=CODE, end=CODE + 0x10000),
            Module(path="/usr/lib/libfoo.so.1", base=LIB, end=LIB + 0x10000),
        ],
        memory_map=[
            Mapping(start=CODE, end=CODE + 0x10000, perms="r-x", in_core=False),
            Mapping(start=LIB, end=LIB + 0x10000, perms="r-x", in_core=False),
        ],
        phenotypes=[Phenotype(name=p) for p in phenotypes],
        analysis=AnalysisInfo(analyzer_version="test"),
    )


def sig(report: CrashReport, **config: object) -> str:
    return generate_signature(report, SignatureConfig(**config)).signature  # type: ignore[arg-type]


# -- normalization ----------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Parser::parse(int)", "Parser::parse"),
        (
            "void Parser::parse<Token>(std::span<char const>, int) const [clone .cold]",
            "Parser::parse<T>",
        ),
        ("compress_block.constprop.0", "compress_block"),
        ("hash_insert.isra.0.part.0", "hash_insert"),
        (
            "std::vector<int, std::allocator<int> >::operator[](unsigned long)",
            "std::vector<T>::operator[]",
        ),
        ("Foo::operator()(int) const &", "Foo::operator()"),
        ("operator new(unsigned long)", "operator new"),
        ("Foo::operator bool() const", "Foo::operator bool"),
        ("a::b::operator<(a::b const&)", "a::b::operator<"),
        ("(anonymous namespace)::worker(void*)", "(anonymous namespace)::worker"),
        ("main::{lambda(int)#1}::operator()(int) const", "main::{lambda}::operator()"),
        (
            "std::__cxx11::basic_string<char>::basic_string[abi:cxx11](char const*)",
            "std::__cxx11::basic_string<T>::basic_string",
        ),
        ("SlotGuard::~SlotGuard()", "SlotGuard::~SlotGuard"),
        ("memcpy", "memcpy"),
    ],
)
def test_normalize_function(raw: str, expected: str) -> None:
    assert normalize_function(raw) == expected


def test_templates_kept_when_configured() -> None:
    assert normalize_function("Pool<Node>::get(int)", strip_templates=False) == "Pool<Node>::get"
    report = make_report([("Pool<Node>::get(int)", "context"), ("main", "cfi")])
    assert sig(report, strip_templates=False) == "Pool<Node>::get | main"
    assert sig(report) == "Pool<T>::get | main"


def test_unsymbolized_frame_is_module_plus_function_start() -> None:
    report = make_report([(None, "context", LIB + 0x1234), ("main", "cfi")])
    assert sig(report) == "libfoo.so.1+0x1234 | main"
    thread = report.crashed_thread
    thread.frames[0] = thread.frames[0].model_copy(update={"function_offset": 0x34})
    assert sig(report) == "libfoo.so.1+0x1200 | main"  # rounded to the function's start


# -- lists ------------------------------------------------------------------


def test_abort_prefix_and_startup_frames_skipped() -> None:
    report = make_report(
        [
            ("__pthread_kill_implementation", "context"),
            ("raise", "cfi"),
            ("abort", "cfi"),
            ("__assert_fail", "cfi"),
            ("Index::check(int)", "cfi"),
            ("main", "cfi"),
            ("__libc_start_call_main", "cfi"),
            ("__libc_start_main_impl", "cfi"),
            ("_start", "cfi"),
        ]
    )
    signature = generate_signature(report)
    assert signature.signature == "Index::check | main"
    assert signature.frames_used == [4, 5]
    dropped = [s.before for s in signature.trail if s.rule == "prefix"]
    assert dropped == [
        "#0 __pthread_kill_implementation",
        "#1 raise",
        "#2 abort",
        "#3 __assert_fail",
    ]


def test_prefix_frames_only_skipped_at_the_top() -> None:
    report = make_report([("Job::run()", "context"), ("abort", "cfi"), ("main", "cfi")])
    assert sig(report) == "Job::run | abort | main"


def test_irrelevant_frames_skipped_anywhere() -> None:
    report = make_report(
        [
            ("handler(int)", "context"),
            ("__restore_rt", "cfi"),
            ("Loop::poll()", "cfi"),
            ("_Unwind_RaiseException", "cfi"),
            ("main", "cfi"),
        ]
    )
    assert sig(report) == "handler | Loop::poll | main"


def test_trimmed_module_frames_collapse(tmp_path: Path) -> None:
    (tmp_path / "trim_modules.txt").write_text("libfoo\\.so.*\n")
    report = make_report(
        [(None, "context", LIB + 0x10), (None, "cfi", LIB + 0x900), ("Gpu::submit()", "cfi")]
    )
    assert sig(report) == "libfoo.so.1+0x10 | libfoo.so.1+0x900 | Gpu::submit"
    assert sig(report, list_dirs=(tmp_path,)) == "libfoo.so.1 | Gpu::submit"


def test_extra_lists_extend_and_can_replace(tmp_path: Path) -> None:
    (tmp_path / "prefix.txt").write_text("# ours\nlog_fatal\n")
    report = make_report([("log_fatal", "context"), ("abort", "cfi"), ("Db::open()", "cfi")])
    assert sig(report) == "log_fatal | abort | Db::open"
    assert sig(report, list_dirs=(tmp_path,)) == "Db::open"
    assert sig(report, list_dirs=(tmp_path,), builtin_lists=False) == "abort | Db::open"


def test_bad_list_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "irrelevant.txt").write_text("fine_one\n([unclosed\nfine_two\n")
    with pytest.raises(ValueError, match=r"irrelevant.txt: '\(\[unclosed'"):
        SignatureGenerator(SignatureConfig(list_dirs=(tmp_path,)))


def test_lines_that_only_clash_together_are_an_error(tmp_path: Path) -> None:
    """Each line compiles alone; joined, two groups share a name."""
    (tmp_path / "prefix.txt").write_text("(?P<f>alpha)\n(?P<f>beta)\n")
    with pytest.raises(ValueError, match="bad regular expressions in prefix.txt: redefinition"):
        SignatureGenerator(SignatureConfig(list_dirs=(tmp_path,)))


# -- trust, recursion, length ----------------------------------------------


def test_scanned_frames_only_when_nothing_better() -> None:
    report = make_report([("Parser::parse()", "context"), ("stale()", "scan"), ("main", "scan")])
    assert sig(report) == "Parser::parse"
    report = make_report(
        [(None, "context", 0), ("DocumentTree::update()", "scan"), ("main", "scan")]
    )
    assert sig(report) == "DocumentTree::update | main"


def test_top_n_and_recursion() -> None:
    frames = [(f"f{i}", "cfi") for i in range(10)]
    frames[0] = ("f0", "context")
    report = make_report(frames)
    assert sig(report) == "f0 | f1 | f2 | f3 | f4"
    assert sig(report, top_n=2) == "f0 | f1"
    report = make_report(
        [("walk", "context"), ("walk", "cfi"), ("walk", "cfi"), ("Tree::visit()", "cfi")]
    )
    assert sig(report) == "walk | Tree::visit"


def test_truncated_to_max_length() -> None:
    report = make_report([("x" * 100, "context"), ("y" * 100, "cfi"), ("z" * 100, "cfi")])
    signature = sig(report)
    assert len(signature) == 255 and signature.endswith("...")


def test_empty_signatures_say_why() -> None:
    report = make_report([])
    assert sig(report) == "EMPTY: no frame data available"
    report.threads = []
    assert sig(report) == "EMPTY: no crashing thread identified"


# -- unusable stacks ---------------------------------------------------------


def test_unusable_stack_starts_with_phenotype() -> None:
    report = make_report(
        [(None, "context", 0), ("DocumentTree::update()", "scan"), ("main", "scan")],
        phenotypes=("null-deref", "pc-not-executable", "return-to-null"),
    )
    signature = generate_signature(report)
    assert signature.signature == "return-to-null | DocumentTree::update | main"
    assert signature.frames_used == [1, 2]
    assert ("unusable-stack", "", "return-to-null") in [
        (s.rule, s.before, s.after) for s in signature.trail
    ]


def test_stack_misaligned_wins_and_keys_by_executable() -> None:
    report = make_report(
        [(None, "context", 0), ("Allocator::release()", "scan"), ("main", "scan")],
        phenotypes=("return-to-null", "stack-misaligned"),
    )
    assert sig(report) == "stack-misaligned | app"


def test_phenotype_on_a_healthy_stack_does_not_head_it() -> None:
    """A misfiring phenotype must not move an ordinary crash (CFI-unwound,
    frame 0 in code) into a disease's bucket."""
    report = make_report(
        [("store_field", "context"), ("main", "cfi")], phenotypes=("stack-misaligned",)
    )
    assert sig(report) == "store_field | main"


def test_unusable_stack_rules_are_configurable(tmp_path: Path) -> None:
    (tmp_path / "unusable_stack.txt").write_text("return-to-null frames 1\n")
    report = make_report(
        [(None, "context", 0), ("A::f()", "scan"), ("B::g()", "scan")],
        phenotypes=("return-to-null",),
    )
    assert sig(report) == "return-to-null | A::f | B::g"
    assert sig(report, list_dirs=(tmp_path,)) == "return-to-null | A::f"


# -- robustness --------------------------------------------------------------


class Exploding(SignatureRule):
    name = "exploding"

    def action(self, state: SignatureState) -> None:
        raise RuntimeError("odd input")


def test_failing_rule_is_reported_and_the_others_run() -> None:
    from coreepi.analyze.signature import RULES

    report = make_report([("f()", "context"), ("main", "cfi")])
    result = SignatureGenerator(rules=(RULES[0], Exploding, *RULES[1:])).generate(report)
    assert result.signature.signature == "f | main"
    assert result.errors == ["exploding: RuntimeError: odd input"]


def test_pipeline_failure_becomes_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from coreepi.analyze import analyze
    from coreepi.analyze.signature import rules

    def boom(self: object, state: SignatureState) -> None:
        raise KeyError("x")

    monkeypatch.setattr(rules.TrimModules, "action", boom)
    report = analyze(make_report([("f()", "context"), ("main", "cfi")]))
    assert report.signature is not None and report.signature.signature == "f | main"
    assert "signature rule trim-module: KeyError: 'x'" in report.analysis.warnings


# -- real cores --------------------------------------------------------------


@pytest.mark.parametrize(
    "case, expected",
    [
        ("null_deref", "store_field | handle_request | main"),
        ("null_deref-O2", "store_field | handle_request | main"),
        ("null_deref-stripped", "store_field | handle_request | main"),
        ("abort@kernel", "give_up | main"),
        ("assert", "check_invariant | main"),
        ("cxx_exception", "load_config | main"),
        ("threads50", "crash_in_worker | worker"),
        ("stack_overflow", "recurse"),
    ],
)
def test_real_core_signatures(get_crash, case: str, expected: str) -> None:
    crash = get_crash(case)
    debug = [crash.debug_dir] if crash.debug_dir else []
    report = inspect_core(crash.core, exe=crash.binary, debug_dirs=debug)
    assert report.signature is not None
    assert report.signature.signature == expected
    # the trail ends in the join that produced the signature
    assert report.signature.trail[-1].rule == "join"
    assert report.signature.trail[-1].after == expected
