"""Build the crasher programs of ``tests/crashers/`` and make real core dumps of them.

Every core is made in a private temporary directory, by one of two methods:

``gcore``
    run the program under ``gdb -batch`` and, when the fatal signal stops it,
    write the core with gdb's ``gcore`` (before the signal is delivered). No
    global state is touched. gdb's ``$_siginfo`` at the fault is recorded too,
    so a test can check that the core's NT_SIGINFO says the same thing.
``kernel``
    let the kernel write the core: ``/proc/sys/kernel/core_pattern`` is set to
    a file pattern in the temporary directory for the duration of one run (under
    an exclusive ``flock`` on the core_pattern file itself, so concurrent test
    sessions cannot interleave their save/restore) and always restored;
    RLIMIT_CORE is raised in the child only (``ulimit`` in a ``sh`` wrapper that
    then ``exec``s the program). Needs root and a writable core_pattern.

Expected values are read independently of coreepi: the core's notes with
``eu-readelf -n``, its program headers with ``readelf -lW``, build-ids with
``readelf -n``, symbols with ``addr2line``/``objdump``.

Register names and the ``ud2`` crasher are x86-64 specific.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import resource
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

__all__ = [
    "CASES",
    "CORE_PATTERN",
    "VARIANTS",
    "Case",
    "CoreFactory",
    "CoreNotes",
    "Crash",
    "CrasherUnavailable",
    "PtLoad",
    "Variant",
    "build_id_of",
    "core_pattern_override",
    "gdb_available",
    "kernel_cores_unavailable_reason",
    "marker_line",
    "read_core_notes",
    "read_pt_loads",
]

CRASHERS_DIR = Path(__file__).resolve().parent / "crashers"
CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")

#: seconds a crasher (or gdb running it) may take before we give up
RUN_TIMEOUT = 60

#: RLIMIT_STACK for the stack-overflow crasher: 1 MiB keeps its core small
SMALL_STACK_KIB = 1024


class CrasherUnavailable(Exception):
    """A tool or permission needed to make a core is missing; tests skip on it."""


# --------------------------------------------------------------------------
# what to build and how to crash it


@dataclass(frozen=True)
class Variant:
    """One binary built from one crasher source."""

    name: str
    source: str
    flags: tuple[str, ...] = ("-g", "-O0", "-fno-omit-frame-pointer")
    stripped: bool = False
    build_id: bool = True  # False: linked with --build-id=none (nothing to match files by)

    @property
    def cxx(self) -> bool:
        return self.source.endswith(".cpp")

    @property
    def compiler(self) -> str:
        """gcc, g++ or rustc, by the source's suffix."""
        if self.source.endswith(".rs"):
            return "rustc"
        return "g++" if self.cxx else "gcc"


@dataclass(frozen=True)
class Case:
    """One crash: a variant, its arguments and the method that makes the core."""

    name: str
    variant: str
    method: str  # "gcore" or "kernel"
    args: tuple[str, ...] = ()  # "{tmp}" is replaced by the case's private directory
    stack_kib: int | None = None  # RLIMIT_STACK of the crashing process, if not inherited


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("null_deref", "null_deref.c"),
        Variant("null_deref-stripped", "null_deref.c", stripped=True),
        Variant("null_deref-O2", "null_deref.c", flags=("-g", "-O2", "-fomit-frame-pointer")),
        Variant("readonly_write", "readonly_write.c"),
        Variant("abort", "abort.c"),
        Variant("assert", "assert.c"),
        Variant("stack_overflow", "stack_overflow.c"),
        Variant("divzero", "divzero.c"),
        Variant("ud2", "ud2.c"),
        Variant("sigbus", "sigbus.c"),
        Variant("threads50", "threads50.c"),
        Variant("cxx_exception", "cxx_exception.cpp"),
        Variant("handler_abort", "handler_abort.c"),
        # the profile of a release build with panic = "abort", plus line tables
        Variant("rust_panic", "rust_panic.rs",
                flags=("-C", "opt-level=1", "-C", "panic=abort", "-C", "debuginfo=1")),
    ]
}

CASES: dict[str, Case] = {
    c.name: c
    for c in [
        Case("null_deref", "null_deref", "gcore"),
        Case("null_deref@kernel", "null_deref", "kernel"),
        Case("null_deref-stripped", "null_deref-stripped", "gcore"),
        Case("null_deref-O2", "null_deref-O2", "gcore"),
        Case("readonly_write", "readonly_write", "gcore"),
        Case("abort@kernel", "abort", "kernel"),
        Case("assert", "assert", "gcore"),
        Case("stack_overflow", "stack_overflow", "gcore", stack_kib=SMALL_STACK_KIB),
        Case("divzero@kernel", "divzero", "kernel"),
        Case("ud2", "ud2", "gcore"),
        Case("sigbus@kernel", "sigbus", "kernel", args=("{tmp}/sixteen-bytes",)),
        Case("threads50", "threads50", "gcore"),
        Case("threads50@kernel", "threads50", "kernel"),
        Case("cxx_exception", "cxx_exception", "gcore"),
        # the kernel's core: gdb would write one at the SIGSEGV, before the handler runs
        Case("handler_abort@kernel", "handler_abort", "kernel"),
        Case("rust_panic", "rust_panic", "gcore"),
    ]
}


# --------------------------------------------------------------------------
# independent readers of the artifacts


def _run(
    argv: Sequence[str | os.PathLike[str]], **kwargs: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=RUN_TIMEOUT,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def marker_line(source: Path, marker: str) -> int:
    """1-based line of ``source`` holding the comment ``marker`` (exactly once)."""
    lines = [
        n
        for n, text in enumerate(source.read_text().splitlines(), start=1)
        if re.search(rf"(/\*|//)\s*{re.escape(marker)}\b", text)
    ]
    if len(lines) != 1:
        raise AssertionError(f"{source.name}: marker {marker} found on lines {lines}, want one")
    return lines[0]


def build_id_of(path: Path | str) -> str | None:
    """The GNU build-id of an ELF file as ``readelf -n`` prints it, or None."""
    out = _run(["readelf", "-n", path]).stdout
    m = re.search(r"Build ID:\s*([0-9a-f]+)", out)
    return m.group(1) if m else None


@dataclass
class NoteThread:
    """One NT_PRSTATUS of a core."""

    tid: int
    cursig: int
    registers: dict[str, int]


@dataclass
class NoteSiginfo:
    """One NT_SIGINFO of a core, and the index of the NT_PRSTATUS it follows."""

    thread_index: int
    signo: int
    errno: int
    code: int
    fault_address: int | None


@dataclass
class CoreNotes:
    """What ``eu-readelf -n`` says about a core."""

    pid: int
    ppid: int
    uid: int
    fname: str
    psargs: str
    threads: list[NoteThread]
    siginfos: list[NoteSiginfo]
    files: list[tuple[int, int, int, str]]  # NT_FILE: start, end, file offset, path

    @property
    def crashed(self) -> NoteThread:
        """Linux (and gdb's gcore) write the thread that took the signal first."""
        return self.threads[0]

    @property
    def siginfo(self) -> NoteSiginfo:
        """The NT_SIGINFO of the crashing thread (the kernel writes only that one;
        gcore writes one per thread, the others saying SIGSTOP)."""
        return next(s for s in self.siginfos if s.thread_index == 0)

    def file_paths(self) -> set[str]:
        return {path for _, _, _, path in self.files}


_FILE_RE = re.compile(r"\s+([0-9a-f]+)-([0-9a-f]+) ([0-9a-f]+) \d+\s+(.*)$")
_REG_RE = re.compile(r"\b([a-z][a-z0-9_.]*):\s+(0x[0-9a-f]+|-?\d+)")


def read_core_notes(core: Path) -> CoreNotes:
    """Parse ``eu-readelf -n CORE`` (elfutils) into :class:`CoreNotes`."""
    proc = _run(["eu-readelf", "-n", core])
    if proc.returncode != 0:
        raise AssertionError(f"eu-readelf -n {core} failed: {proc.stderr}")
    pid = ppid = uid = -1
    fname = psargs = ""
    threads: list[NoteThread] = []
    siginfos: list[NoteSiginfo] = []
    files: list[tuple[int, int, int, str]] = []
    section: str | None = None
    for line in proc.stdout.splitlines():
        head = re.match(r"^\s{2}(\S+)\s+(\d+)\s+(\S+)", line)
        if head and head.group(1) in ("CORE", "LINUX", "GDB"):
            section = head.group(3)
            if section == "PRSTATUS":
                threads.append(NoteThread(tid=-1, cursig=-1, registers={}))
            continue
        if section == "PRPSINFO":
            if m := re.search(r"uid: (\d+), gid: \d+, pid: (\d+), ppid: (\d+)", line):
                uid, pid, ppid = (int(g) for g in m.groups())
            # eu-readelf puts fname and psargs on one line, or two when long
            if m := re.search(r"fname: (.*?)(?:, psargs: |$)", line):
                fname = m.group(1)
            if m := re.search(r"psargs: (.*)$", line):
                psargs = m.group(1).strip()
        elif section == "PRSTATUS":
            t = threads[-1]
            if m := re.search(r"cursig: (\d+)", line):
                t.cursig = int(m.group(1))
            if m := re.match(r"\s+pid: (\d+),", line):
                t.tid = int(m.group(1))
            elif "sigpend" not in line and "sighold" not in line and "info." not in line:
                for name, value in _REG_RE.findall(line):
                    t.registers[name] = int(value, 16) if value.startswith("0x") else int(value)
        elif section == "SIGINFO":
            if m := re.search(r"si_signo: (\d+), si_errno: (-?\d+), si_code: (-?\d+)", line):
                siginfos.append(
                    NoteSiginfo(
                        len(threads) - 1, int(m.group(1)), int(m.group(2)), int(m.group(3)), None
                    )
                )
            elif m := re.search(r"fault address: (0x[0-9a-f]+)", line):
                siginfos[-1].fault_address = int(m.group(1), 16)
        elif section == "FILE" and (m := _FILE_RE.match(line)):
            files.append(
                (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), m.group(4))
            )
    return CoreNotes(pid, ppid, uid, fname, psargs, threads, siginfos, files)


@dataclass(frozen=True)
class PtLoad:
    vaddr: int
    memsz: int
    filesz: int
    flags: str
    offset: int = 0  # in the file, bytes


def read_pt_loads(core: Path) -> list[PtLoad]:
    """The PT_LOAD program headers of an ELF file (``readelf -lW``)."""
    out = _run(["readelf", "-lW", core]).stdout
    loads = []
    for m in re.finditer(
        r"^\s+LOAD\s+(0x[0-9a-f]+) (0x[0-9a-f]+) 0x[0-9a-f]+ (0x[0-9a-f]+) (0x[0-9a-f]+) (.{3})",
        out,
        re.MULTILINE,
    ):
        vaddr, filesz, memsz = (int(m.group(i), 16) for i in (2, 3, 4))
        loads.append(PtLoad(vaddr, memsz, filesz, m.group(5), offset=int(m.group(1), 16)))
    return loads


# --------------------------------------------------------------------------
# tools and permissions


def gdb_available() -> str | None:
    """None if gdb can make cores, else why not."""
    if shutil.which("gdb") is None:
        return "gdb is not installed (needed for gcore cores and the differential test)"
    return None


def _compiler_reason(tool: str) -> str | None:
    if shutil.which(tool) is None:
        return f"{tool} is not installed (needed to build the crasher programs)"
    for t in ("readelf", "eu-readelf", "strip", "objcopy"):
        if shutil.which(t) is None:
            return f"{t} is not installed (needed to build or read the crasher cores)"
    return None


def kernel_cores_unavailable_reason() -> str | None:
    """None if this process may point core_pattern at a file for a while."""
    if os.geteuid() != 0:
        return "kernel cores need root to set /proc/sys/kernel/core_pattern"
    if not os.access(CORE_PATTERN, os.W_OK):
        return f"{CORE_PATTERN} is not writable (read-only /proc/sys, e.g. in a container)"
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    if hard == 0:
        return "the hard RLIMIT_CORE is 0, so no child can dump core"
    return None


_PATTERN_LOCK = threading.Lock()


@contextlib.contextmanager
def core_pattern_override(pattern: str) -> Iterator[None]:
    """Set core_pattern to ``pattern`` for the ``with`` block, then restore it.

    An exclusive flock on the core_pattern file itself serialises this with any
    other test session doing the same, so nobody saves another's temporary
    value as "the original". The original is written back in ``finally``.
    """
    if len(pattern.encode()) >= 128:  # CORENAME_MAX_SIZE
        raise CrasherUnavailable(f"core pattern longer than 127 bytes: {pattern}")
    with _PATTERN_LOCK, open(CORE_PATTERN, "r+b", buffering=0) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            original = fh.read()
            try:
                CORE_PATTERN.write_bytes(pattern.encode() + b"\n")
                yield
            finally:
                CORE_PATTERN.write_bytes(original)
                now = CORE_PATTERN.read_bytes()
                if now != original:
                    raise RuntimeError(f"could not restore {CORE_PATTERN}: {original!r} -> {now!r}")
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------
# the factory


@dataclass
class Crash:
    """One real crash: the binary, its source, the core and what we know about it."""

    case: Case
    variant: Variant
    binary: Path  # the binary that ran (stripped for the stripped variant)
    unstripped: Path  # same code with symbols (== binary unless stripped)
    debug_dir: Path | None  # .build-id tree holding the separate debug file, if stripped
    source: Path
    core: Path
    stdout: str
    returncode: int
    live_siginfo: dict[str, int] | None  # gdb's $_siginfo at the fault (gcore only)
    notes: CoreNotes = field(repr=False)

    def line(self, marker: str) -> int:
        return marker_line(self.source, marker)

    @property
    def printed_fault_address(self) -> int | None:
        """The address the program said it would fault at, if it said one."""
        m = re.search(r"fault-address (0x[0-9a-f]+)", self.stdout)
        return int(m.group(1), 16) if m else None


_SIGINFO_PRINTF = (
    'printf "LIVE-SIGINFO %d %d %d %lu\\n", $_siginfo.si_signo, $_siginfo.si_errno, '
    "$_siginfo.si_code, (unsigned long)$_siginfo._sifields._sigfault.si_addr"
)


class CoreFactory:
    """Builds binaries and cores on demand, once each, under ``root``.

    Subclasses for other crasher directories set ``variants`` and ``cases``
    (with absolute source paths) and, for a new way of making a core, extend
    :meth:`_make_core`."""

    variants: ClassVar[dict[str, Variant]] = VARIANTS
    cases: ClassVar[dict[str, Case]] = CASES

    def __init__(self, root: Path) -> None:
        self.root = root
        self._binaries: dict[str, tuple[Path, Path, Path | None]] = {}
        self._crashes: dict[str, Crash] = {}
        self._failures: dict[str, BaseException] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    # -- build

    def binary(self, variant_name: str) -> tuple[Path, Path, Path | None]:
        """(binary, unstripped binary, debug dir) for a variant, built once."""
        with self._lock("build:" + variant_name):
            if variant_name not in self._binaries:
                self._binaries[variant_name] = self._build(self.variants[variant_name])
            return self._binaries[variant_name]

    def _build(self, v: Variant) -> tuple[Path, Path, Path | None]:
        if reason := _compiler_reason(v.compiler):
            raise CrasherUnavailable(reason)
        outdir = self.root / "bin"
        outdir.mkdir(exist_ok=True)
        out = outdir / v.name
        build_id = "-Wl,--build-id" if v.build_id else "-Wl,--build-id=none"
        if v.compiler == "rustc":
            argv = ["rustc", *v.flags, "-C", f"link-arg={build_id}", "-o", out]
        else:
            argv = [v.compiler, *v.flags, "-Wall", "-pthread", build_id, "-o", out]
        argv.append(CRASHERS_DIR / v.source)
        proc = _run(argv)
        if proc.returncode != 0:
            raise AssertionError(f"building {v.name} failed:\n{proc.stderr}")
        if not v.stripped:
            return out, out, None
        unstripped = outdir / f"{v.name}.unstripped"
        out.rename(unstripped)
        proc = _run(["strip", "--strip-all", "-o", out, unstripped])
        if proc.returncode != 0:
            raise AssertionError(f"strip failed: {proc.stderr}")
        build_id = build_id_of(out)
        assert build_id, f"{out} has no build-id"
        debug_dir = self.root / f"debug-{v.name}"
        debug_file = debug_dir / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
        debug_file.parent.mkdir(parents=True)
        proc = _run(["objcopy", "--only-keep-debug", unstripped, debug_file])
        if proc.returncode != 0:
            raise AssertionError(f"objcopy --only-keep-debug failed: {proc.stderr}")
        return out, unstripped, debug_dir

    # -- crash

    def crash(self, case_name: str, run: int = 0) -> Crash:
        """The core of one run of a case, made once; failures are remembered
        and re-raised. Several runs of one case are independent cores."""
        key = f"{case_name}#{run}"
        with self._lock("crash:" + key):
            if key in self._failures:
                raise self._failures[key]
            if key not in self._crashes:
                try:
                    self._crashes[key] = self._make(self.cases[case_name], run)
                except BaseException as exc:
                    self._failures[key] = exc
                    raise
            return self._crashes[key]

    def _make(self, case: Case, run: int) -> Crash:
        variant = self.variants[case.variant]
        binary, unstripped, debug_dir = self.binary(case.variant)
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", case.name) + (f"-{run}" if run else "")
        workdir = self.root / "cores" / name
        workdir.mkdir(parents=True)
        args = [a.replace("{tmp}", str(workdir)) for a in case.args]
        core, stdout, rc, live = self._make_core(case, binary, args, workdir)
        return Crash(
            case=case,
            variant=variant,
            binary=binary,
            unstripped=unstripped,
            debug_dir=debug_dir,
            source=CRASHERS_DIR / variant.source,
            core=core,
            stdout=stdout,
            returncode=rc,
            live_siginfo=live,
            notes=read_core_notes(core),
        )

    def _make_core(
        self, case: Case, binary: Path, args: list[str], workdir: Path
    ) -> tuple[Path, str, int, dict[str, int] | None]:
        """(core, program output, exit status, gdb's live siginfo or None)."""
        if case.method == "gcore":
            return self._gcore(binary, args, workdir, case.stack_kib)
        if case.method == "kernel":
            return (*self._kernel_core(binary, args, workdir, case.stack_kib), None)
        raise ValueError(case.method)

    @staticmethod
    def _limits_wrapper(stack_kib: int | None, core: bool) -> list[str]:
        """``sh -c 'ulimit …; exec "$0" "$@"'``: limits set in the child only.

        (A shell wrapper instead of ``preexec_fn`` because cores may be made
        from several threads at once, where ``preexec_fn`` is unsafe.)
        """
        cmds = []
        if core:
            hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
            cmds.append(
                "ulimit -S -c "
                + ("unlimited" if hard == resource.RLIM_INFINITY else str(hard // 1024))
            )
        if stack_kib is not None:
            cmds.append(f"ulimit -S -s {stack_kib}")
        if not cmds:
            return []
        return ["/bin/sh", "-c", "; ".join(cmds) + ' && exec "$0" "$@"']

    def _gcore(
        self, binary: Path, args: list[str], workdir: Path, stack_kib: int | None
    ) -> tuple[Path, str, int, dict[str, int]]:
        if reason := gdb_available():
            raise CrasherUnavailable(reason)
        core = workdir / "core"
        argv = [
            *self._limits_wrapper(stack_kib, core=False),
            "gdb", "-batch", "-nx",
            "-ex", "set pagination off",
            "-ex", "set confirm off",
            "-ex", "set debuginfod enabled off",
            "-ex", "run",
            "-ex", _SIGINFO_PRINTF,
            "-ex", f"gcore {core}",
            "-ex", "kill",
            "--args", str(binary), *args,
        ]  # fmt: skip
        env = dict(os.environ, DEBUGINFOD_URLS="")
        proc = _run(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL)
        text = proc.stdout + proc.stderr
        m = re.search(r"LIVE-SIGINFO (\d+) (-?\d+) (-?\d+) (\d+)", proc.stdout)
        if not core.exists() or m is None:
            raise AssertionError(f"gdb made no core of {binary.name}:\n{text[-3000:]}")
        live = {
            "signo": int(m.group(1)),
            "errno": int(m.group(2)),
            "code": int(m.group(3)),
            "addr": int(m.group(4)),
        }
        return core, proc.stdout, proc.returncode, live

    def _kernel_core(
        self, binary: Path, args: list[str], workdir: Path, stack_kib: int | None
    ) -> tuple[Path, str, int]:
        if reason := kernel_cores_unavailable_reason():
            raise CrasherUnavailable(reason)
        coredir = workdir / "kernel"
        coredir.mkdir()
        argv = [*self._limits_wrapper(stack_kib, core=True), str(binary), *args]
        with core_pattern_override(f"{coredir}/core.%p"):
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
            try:
                stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise AssertionError(f"{binary.name} did not crash within {RUN_TIMEOUT}s") from None
        # The shell execs the program, so the crashing pid is the Popen pid;
        # the kernel has finished writing the core before the parent is woken.
        core = coredir / f"core.{proc.pid}"
        if proc.returncode >= 0 or not core.exists():
            raise AssertionError(
                f"{binary.name} exited with {proc.returncode} and left "
                f"{sorted(p.name for p in coredir.iterdir())}: {stderr[-2000:]}"
            )
        return core, stdout, proc.returncode
