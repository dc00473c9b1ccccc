"""``coreepi inspect`` on bad input: one clear line on stderr, exit status 2.

Every case runs the real CLI (``python -m coreepi inspect FILE``) in a
subprocess, under an address-space limit and a timeout, and the child's own
peak RSS is taken from ``wait4``. A bad input must give exactly one stderr
line that names the input, exit status 2, no traceback, and bounded memory
and time; a core that is only cut short in its memory must still give a
report, marked truncated.

The inputs are made from two real seeds (:mod:`badcore`): a gcore core of a
NULL dereference (notes after the memory) and the same core laid out as the
kernel writes it (notes first).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from badcore import (
    EHDR_SIZE,
    PHDR_SIZE,
    ExtraLoad,
    SeedUnavailable,
    craft_core,
    gcore_core,
    layout,
    note,
    notes_first,
    patch,
    with_pn_xnum,
)

from coreepi.parse.elf.core import MAX_STACK_TOP, parse_core

NT_PRSTATUS, NT_AUXV, NT_FILE = 1, 6, 0x46494C45
AT_EXECFN = 31
CHILD_ADDRESS_SPACE = 4 << 30  # RLIMIT_AS of every inspect run: runaway allocations fail fast
TIMEOUT = 120.0
#: extra peak RSS a bad input may cost over inspecting the intact seed core
RSS_MARGIN_KIB = 96 << 10


@dataclass
class Run:
    """One finished ``coreepi inspect`` child."""

    returncode: int
    stdout: str
    stderr: str
    maxrss_kib: int
    cpu_seconds: float  # user + system: unlike wall time, not inflated by a busy machine

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


# Limits through prlimit(1), which execs the command (same pid, so wait4 still
# measures it): preexec_fn is unsafe with the threads that run cases in parallel.
PRLIMIT = shutil.which("prlimit")
LIMITS = [PRLIMIT, f"--as={CHILD_ADDRESS_SPACE}", "--core=0", "--"] if PRLIMIT else []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_inspect(path: Path, *args: str, timeout: float = TIMEOUT) -> Run:
    """``python -m coreepi inspect PATH ARGS`` with its peak RSS and CPU time
    (from wait4, so only this child counts)."""
    out_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    with (
        open(os.devnull, "rb") as stdin,
        tempfile.TemporaryFile(dir=out_dir) as stdout,
        tempfile.TemporaryFile(dir=out_dir) as stderr,
    ):
        proc = subprocess.Popen(
            [*LIMITS, sys.executable, "-m", "coreepi", "inspect", str(path), *args],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "COLUMNS": "120"},
        )
        timer = threading.Timer(timeout, _kill, (proc.pid,))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        return Run(
            proc.returncode,
            stdout.read().decode("utf-8", "replace"),
            stderr.read().decode("utf-8", "replace"),
            usage.ru_maxrss,
            usage.ru_utime + usage.ru_stime,
        )


# -- the cases ------------------------------------------------------------------


@dataclass(frozen=True)
class Seeds:
    """The seed cores (bytes) and a scratch directory for inputs."""

    gcore: bytes
    kernel: bytes  # the same core, notes first
    binary: Path  # the crashed program (an ET_DYN executable)
    workdir: Path


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[Seeds, Path], Path]
    #: substrings the one stderr line must contain (besides the input's name)
    says: tuple[str, ...] = ()
    ok: bool = False  # True: the input is usable; a report is expected
    extra_args: tuple[str, ...] = ()
    max_seconds: float | None = None
    rss_margin_kib: int = RSS_MARGIN_KIB
    #: for usable inputs run with --json: a substring of some analysis warning
    warns: str | None = None


def _write(data: bytes) -> Callable[[Seeds, Path], Path]:
    def make(_seeds: Seeds, out: Path) -> Path:
        out.write_bytes(data)
        return out

    return make


def _from(seed: str, transform: Callable[[bytes], bytes]) -> Callable[[Seeds, Path], Path]:
    def make(seeds: Seeds, out: Path) -> Path:
        out.write_bytes(transform(getattr(seeds, seed)))
        return out

    return make


def _cut_in_notes(core: bytes) -> bytes:
    seg = layout(core).note_segment
    return core[: seg.offset + seg.filesz // 2]


def _cut_in_last_load(core: bytes) -> bytes:
    """Cut inside the PT_LOAD data that ends last in the file."""
    last = max((p for p in layout(core).loads if p.filesz), key=lambda p: p.offset + p.filesz)
    return core[: last.offset + last.filesz // 2]


def _cut_in_first_load(core: bytes) -> bytes:
    first = min((p for p in layout(core).loads if p.filesz), key=lambda p: p.offset)
    return core[: first.offset + first.filesz // 2]


def _first_note_field(field_offset: int, value: int) -> Callable[[bytes], bytes]:
    def transform(core: bytes) -> bytes:
        return patch(core, layout(core).notes[0].at + field_offset, "<I", value)

    return transform


def _big_endian(core: bytes) -> bytes:
    """A big-endian core header (EI_DATA = ELFDATA2MSB, e_type and e_machine
    byte-swapped, e_machine = EM_S390): what a s390x core starts with."""
    out = patch(core, 5, "<B", 2)
    return patch(out, 16, ">HH", 4, 22)


def _elf32(core: bytes) -> bytes:
    """A 32-bit core header (ELFCLASS32, EM_386). The rest of the file is
    left 64-bit: coreepi must refuse on the header alone."""
    return patch(patch(core, 4, "<B", 1), 18, "<H", 3)


def _without_prstatus(seeds: Seeds, out: Path) -> Path:
    """The seed's notes, minus every NT_PRSTATUS, in a new note segment."""
    core = seeds.kernel
    lay = layout(core)
    kept = b"".join(
        core[n.at : n.desc_at + ((n.descsz + 3) & ~3)] for n in lay.notes if n.type != NT_PRSTATUS
    )
    return craft_core(out, core, extra_notes=kept, drop_notes=True)


def _many_tiny_notes(seeds: Seeds, out: Path) -> Path:
    """Two million empty notes (12 bytes each) in a second note segment."""
    return craft_core(out, seeds.kernel, extra_notes=note(b"", 0, b"") * 2_000_000)


def _nt_file_absurd_count(core: bytes) -> bytes:
    nt_file = layout(core).note(NT_FILE)
    return patch(core, nt_file.desc_at, "<Q", 1 << 60)


def _many_nt_file_entries(seeds: Seeds, out: Path) -> Path:
    """A second NT_FILE of 30,000 one-page mappings of distinct files, not in
    the core: coreepi used to match them against each other (quadratic)."""
    n, base = 30_000, 0x100000000
    table = b"".join(struct.pack("<QQQ", base + i * 4096, base + i * 4096 + 4096, 0)
                     for i in range(n))
    names = b"".join(b"/lib/many/%06d.so\0" % i for i in range(n))
    desc = struct.pack("<QQ", n, 4096) + table + names
    return craft_core(out, seeds.kernel, extra_notes=note(b"CORE", NT_FILE, desc))


def _one_file_many_times(seeds: Seeds, out: Path) -> Path:
    """A second NT_FILE naming the crashed program (which exists) 10,000
    times, at pages the core does not hold: its program headers were read
    once per entry (seconds each thousand)."""
    n, base = 10_000, 0x100000000
    table = b"".join(struct.pack("<QQQ", base + i * 4096, base + i * 4096 + 4096, i)
                     for i in range(n))
    names = (str(seeds.binary).encode() + b"\0") * n
    desc = struct.pack("<QQ", n, 4096) + table + names
    return craft_core(out, seeds.kernel, extra_notes=note(b"CORE", NT_FILE, desc))


SPARSE_VADDR = 0x7E0000000000
SPARSE_SIZE = 200 << 20


def _sparse_load(seeds: Seeds, out: Path) -> Path:
    """A 200 MiB PT_LOAD that is a hole in a sparse file."""
    hole = ExtraLoad(SPARSE_VADDR, SPARSE_SIZE, SPARSE_SIZE)
    return craft_core(out, seeds.kernel, extra_loads=(hole,))


def _sparse_stack(seeds: Seeds, out: Path) -> Path:
    """The sparse 200 MiB PT_LOAD, with AT_EXECFN pointing at its top: the
    stack that argv is recovered from is now 200 MiB."""
    core = seeds.kernel
    auxv = layout(core).note(NT_AUXV)
    for i in range(0, auxv.descsz - 15, 16):
        (key,) = struct.unpack_from("<Q", core, auxv.desc_at + i)
        if key == AT_EXECFN:
            core = patch(core, auxv.desc_at + i + 8, "<Q", SPARSE_VADDR + SPARSE_SIZE - 64)
    hole = ExtraLoad(SPARSE_VADDR, SPARSE_SIZE, SPARSE_SIZE)
    return craft_core(out, core, extra_loads=(hole,))


def _non_utf8_path(seeds: Seeds, out: Path) -> Path:
    """The program's path, as NT_FILE, argv and AT_EXECFN spell it, with a
    byte that is not UTF-8 (same length, so nothing moves)."""
    old = str(seeds.binary).encode()
    new = old[:-1] + b"\xff"
    out.write_bytes(seeds.kernel.replace(old, new))
    return out


def _shnum_absurd(core: bytes) -> bytes:
    """PN_XNUM, and section header 0's sh_size (the section count when
    e_shnum is 0) absurd: our reader needs only sh_info, libelf (in drgn)
    refuses the file ("invalid ELF file data")."""
    out = patch(with_pn_xnum(core), 60, "<H", 0)  # e_shnum = 0
    (shoff,) = struct.unpack_from("<Q", out, 40)
    return patch(out, shoff + 32, "<Q", 1 << 60)  # sh_size


def _no_auxv(core: bytes) -> bytes:
    """NT_AUXV renamed to an unknown note type: drgn cannot list modules."""
    return patch(core, layout(core).note(NT_AUXV).at + 8, "<I", 0x7777)


def _copy_of(path: str) -> Callable[[Seeds, Path], Path]:
    def make(_seeds: Seeds, out: Path) -> Path:
        if not Path(path).is_file():
            pytest.skip(f"{path} is absent")
        shutil.copyfile(path, out)
        return out

    return make


def _compiled(kind: str) -> Callable[[Seeds, Path], Path]:
    """A non-core ELF file built with gcc: a shared object or a relocatable object."""

    def make(seeds: Seeds, out: Path) -> Path:
        source = seeds.workdir / "lib.c"
        source.write_text("int answer(void) { return 42; }\n")
        flags = ["-shared", "-fPIC"] if kind == "shared" else ["-c"]
        subprocess.run(["gcc", *flags, "-o", out, source], check=True, timeout=120)
        return out

    return make


def _directory(_seeds: Seeds, out: Path) -> Path:
    out.mkdir()
    return out


def _nonexistent(_seeds: Seeds, out: Path) -> Path:
    return out


RANDOM_BYTES = random.Random(2).randbytes(64 << 10)

CASES: list[Case] = [
    Case("empty-file", _write(b"")),
    Case("text-file", _write(b"this is not a core dump\n" * 40)),
    Case("random-bytes", _write(RANDOM_BYTES)),
    Case("elf-magic-only", _write(b"\x7fELF"), ("truncated",)),
    Case("directory", _directory, ("directory",)),
    Case("nonexistent", _nonexistent, ("no such file",)),
    Case("elf-executable", _copy_of("/bin/true"), ("not a core",)),
    Case("shared-object", _compiled("shared"), ("not a core", "shared library")),
    Case("relocatable-object", _compiled("object"), ("not a core", "relocatable")),
    # truncated cores
    Case("cut-in-elf-header", _from("gcore", lambda c: c[:40]), ("ELF header truncated",)),
    Case("cut-in-program-headers", _from("gcore", lambda c: c[: EHDR_SIZE + PHDR_SIZE + 20]),
         ("program header",)),
    Case("cut-after-program-headers", _from("kernel", lambda c: c[: layout(c).headers_end])),
    Case("cut-in-notes", _from("kernel", _cut_in_notes), ("note",)),
    # gdb writes the notes after the memory: cutting the memory loses them
    Case("cut-in-memory-gcore-layout", _from("gcore", _cut_in_first_load), ("NT_PRSTATUS",)),
    # absurd sizes and counts
    Case("note-descsz-huge", _from("kernel", _first_note_field(4, 0xFFFFFFF0)), ("note",)),
    Case("note-namesz-huge", _from("gcore", _first_note_field(0, 0xFFFFFFF0)), ("note",)),
    Case("phnum-huge", _from("gcore", lambda c: patch(c, 56, "<H", 0xFFFE))),
    Case("phoff-past-eof", _from("gcore", lambda c: patch(c, 32, "<Q", len(c) + 4096)),
         ("program header",)),
    Case("phentsize-wrong", _from("gcore", lambda c: patch(c, 54, "<H", 32)), ("program header",)),
    Case("pn-xnum-without-section-header", _from("gcore", lambda c: with_pn_xnum(c, shoff=0)),
         ("PN_XNUM",)),
    Case("pn-xnum-section-header-past-eof",
         _from("gcore", lambda c: with_pn_xnum(c, shoff=len(c) + (1 << 20))), ("PN_XNUM",)),
    Case("pn-xnum-count-huge", _from("gcore", lambda c: with_pn_xnum(c, sh_info=0xFFFFFFFF)),
         ("program header",)),
    Case("no-note-segment", _from("gcore", lambda c: patch(c, layout(c).note_segment.at, "<I", 0)),
         ("PT_NOTE",)),
    Case("no-prstatus-note", _without_prstatus, ("NT_PRSTATUS",)),
    Case("millions-of-tiny-notes", _many_tiny_notes, ("more than",), max_seconds=30),
    # other architectures
    Case("arm-core", _from("gcore", lambda c: patch(c, 18, "<H", 40)), ("arm",)),
    Case("32-bit-core", _from("gcore", _elf32), ("32-bit",)),
    Case("big-endian-core", _from("gcore", _big_endian), ("big-endian",)),
    # usable inputs: a report, not an error
    Case("intact-gcore-layout", _from("gcore", lambda c: c), ok=True),
    Case("intact-kernel-layout", _from("kernel", lambda c: c), ok=True),
    Case("cut-in-memory-kernel-layout", _from("kernel", _cut_in_last_load), ok=True,
         extra_args=("--json",)),
    Case("pn-xnum-valid", _from("gcore", with_pn_xnum), ok=True),
    Case("nt-file-count-absurd", _from("kernel", _nt_file_absurd_count), ok=True),
    Case("nt-file-30k-entries", _many_nt_file_entries, ok=True, max_seconds=30,
         rss_margin_kib=400 << 10),
    Case("nt-file-one-file-10k-times", _one_file_many_times, ok=True, max_seconds=20,
         rss_margin_kib=200 << 10),
    Case("sparse-200mib-segment", _sparse_load, ok=True),
    Case("sparse-200mib-stack", _sparse_stack, ok=True),
    Case("non-utf8-path", _non_utf8_path, ok=True, extra_args=("--json",)),
    Case("drgn-refuses-section-headers", _from("kernel", _shnum_absurd), ok=True,
         extra_args=("--json",), warns="drgn could not read the core"),
    Case("drgn-finds-no-auxv", _from("kernel", _no_auxv), ok=True, extra_args=("--json",),
         warns="could not list every loaded module"),
]  # fmt: skip

# -- running them (concurrently, once) ------------------------------------------


@dataclass
class Outcome:
    case: Case
    path: Path | None = None
    run: Run | None = None
    skip: str | None = None


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> Seeds:
    workdir = tmp_path_factory.mktemp("badinput")
    try:
        core = gcore_core(workdir / "seed")
    except SeedUnavailable as exc:
        pytest.skip(str(exc))
    data = core.read_bytes()
    return Seeds(data, notes_first(data), workdir / "seed" / "null_deref", workdir)


@pytest.fixture(scope="module")
def outcomes(seeds: Seeds) -> dict[str, Outcome]:
    """Every case made and inspected, a few at a time (each child is ~1 s of
    Python start-up and imports)."""
    results = {c.id: Outcome(c) for c in CASES}
    for outcome in results.values():
        out = seeds.workdir / outcome.case.id
        try:
            outcome.path = outcome.case.make(seeds, out)
        except pytest.skip.Exception as exc:
            outcome.skip = str(exc)
        except (OSError, subprocess.SubprocessError) as exc:
            outcome.skip = f"cannot make the input: {exc}"

    def go(outcome: Outcome) -> None:
        if outcome.path is not None:
            outcome.run = run_inspect(outcome.path, *outcome.case.extra_args)

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        list(pool.map(go, results.values()))
    return results


def _outcome(outcomes: dict[str, Outcome], case_id: str) -> tuple[Outcome, Run]:
    outcome = outcomes[case_id]
    if outcome.skip:
        pytest.skip(outcome.skip)
    assert outcome.run is not None and outcome.path is not None
    return outcome, outcome.run


@pytest.mark.parametrize("case_id", [c.id for c in CASES if not c.ok])
def test_bad_input_is_one_line_and_exit_2(outcomes: dict[str, Outcome], case_id: str) -> None:
    outcome, run = _outcome(outcomes, case_id)
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert len(run.stderr_lines) == 1, run.stderr
    line = run.stderr_lines[0]
    assert line.startswith("coreepi: error: "), line
    assert str(outcome.path) in line, line
    for words in outcome.case.says:
        assert words in line, line
    assert run.stdout == ""


@pytest.mark.parametrize("case_id", [c.id for c in CASES if c.ok])
def test_usable_input_gives_a_report(outcomes: dict[str, Outcome], case_id: str) -> None:
    outcome, run = _outcome(outcomes, case_id)
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode == 0, run.stderr
    if "--json" in outcome.case.extra_args:
        report = json.loads(run.stdout)
        assert report["signal"]["name"] == "SIGSEGV"
        if outcome.case.warns:
            assert any(outcome.case.warns in w for w in report["analysis"]["warnings"]), report[
                "analysis"
            ]["warnings"]
    else:
        assert "crashing thread" in run.stdout
        assert "SIGSEGV" in run.stdout


@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_memory_and_time_stay_bounded(outcomes: dict[str, Outcome], case_id: str) -> None:
    """Peak RSS of each run stays within a margin of inspecting the intact
    core (mmap'd pages count: reading a 200 MiB segment whole would show)."""
    outcome, run = _outcome(outcomes, case_id)
    _, baseline = _outcome(outcomes, "intact-kernel-layout")
    assert run.maxrss_kib < baseline.maxrss_kib + outcome.case.rss_margin_kib, (
        f"peak RSS {run.maxrss_kib >> 10} MiB, {baseline.maxrss_kib >> 10} MiB for the intact core"
    )
    assert run.cpu_seconds < (outcome.case.max_seconds or 15), f"{run.cpu_seconds:.1f} s of CPU"


def test_truncated_memory_is_a_warning_and_flagged(outcomes: dict[str, Outcome]) -> None:
    """Notes intact, memory cut short: a report with core.truncated and a
    warning; the crashing thread still has its registers and signal."""
    _, run = _outcome(outcomes, "cut-in-memory-kernel-layout")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["core"]["truncated"] is True
    assert any("truncated" in w for w in report["analysis"]["warnings"])
    assert report["signal"]["name"] == "SIGSEGV"
    assert report["threads"][0]["registers"]["rip"]


@pytest.mark.parametrize(
    ("case_id", "allowed"),
    [
        ("sparse-200mib-segment", SPARSE_SIZE // 20),
        # argv is looked for in the top MAX_STACK_TOP bytes of the stack (mapped + copied)
        ("sparse-200mib-stack", 3 * MAX_STACK_TOP),
    ],
)
def test_sparse_segment_is_not_read(
    outcomes: dict[str, Outcome], case_id: str, allowed: int
) -> None:
    """A 200 MiB segment costs (almost) nothing: the core is never read whole."""
    outcome, run = _outcome(outcomes, case_id)
    assert outcome.path is not None
    size = outcome.path.stat().st_size
    assert size > SPARSE_SIZE
    _, baseline = _outcome(outcomes, "intact-kernel-layout")
    grew = (run.maxrss_kib - baseline.maxrss_kib) * 1024
    assert grew < allowed, f"RSS grew by {grew >> 20} MiB for a {size >> 20} MiB core"


def test_non_utf8_bytes_are_escaped(outcomes: dict[str, Outcome], seeds: Seeds) -> None:
    """A path byte that is not UTF-8 reaches the JSON as a visible escape."""
    _, run = _outcome(outcomes, "non-utf8-path")
    report = json.loads(run.stdout)
    spelled = str(seeds.binary)[:-1] + "\\xff"
    assert report["process"]["exe"] == spelled
    assert any(m["path"] == spelled for m in report["memory_map"])


@pytest.mark.parametrize(
    ("make", "allowed"),
    [(_sparse_load, 8 << 20), (_sparse_stack, 2 * MAX_STACK_TOP + (8 << 20))],
    ids=["segment", "stack"],
)
def test_parse_core_allocates_little_for_a_large_core(
    seeds: Seeds, make: Callable[[Seeds, Path], Path], allowed: int
) -> None:
    """In-process: Python allocations while parsing a core with a 200 MiB
    segment stay far below its size."""
    path = make(seeds, seeds.workdir / f"inprocess-{make.__name__}.core")
    tracemalloc.start()
    try:
        report = parse_core(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.core.size_bytes is not None and report.core.size_bytes > SPARSE_SIZE
    assert peak < allowed, f"peak {peak >> 20} MiB of Python allocations"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_unreadable_file(seeds: Seeds) -> None:
    path = seeds.workdir / "unreadable.core"
    path.write_bytes(seeds.kernel)
    path.chmod(0)
    run = run_inspect(path)
    assert run.returncode == 2
    assert len(run.stderr_lines) == 1
    assert str(path) in run.stderr and "Traceback" not in run.stderr


def test_markup_in_a_path_is_printed_as_is(seeds: Seeds) -> None:
    """Paths come from the core: Rich must print them, not read them as markup."""
    core = seeds.workdir / "markup.core"
    data = seeds.kernel
    old = str(seeds.binary).encode()
    new = old[:-5] + b"[/x]" + old[-1:]  # same length: the notes keep their layout
    core.write_bytes(data.replace(old, new))
    run = run_inspect(core)
    assert run.returncode == 0, run.stderr
    assert "[/x]" in run.stdout
