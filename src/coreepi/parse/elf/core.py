"""ELF core dump -> CrashReport.

Notes (signal, threads, registers, process, file mappings) are decoded by
coreepi itself from the memory-mapped file (:mod:`.elf_core_file`,
:mod:`.core_notes`); modules, unwinding and symbols come from drgn
(:mod:`.unwind`). The core is never read whole.
"""

from __future__ import annotations

import bisect
import itertools
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from coreepi import __version__
from coreepi.errors import CorruptCoreError, InputError
from coreepi.model.report import (
    AnalysisInfo,
    CoreInfo,
    CrashReport,
    Frame,
    Mapping,
    Module,
    ProcessInfo,
    SignalInfo,
    Source,
    Thread,
    stable_crash_id,
)
from coreepi.parse import signals
from coreepi.parse.elf.corefile import CoreFile
from coreepi.parse.elf.linkmap import LinkMapObject, link_map_objects
from coreepi.parse.elf.memory import ProcessMemory, file_build_id
from coreepi.parse.elf.notes import AT_NAMES, CoreNotes, FileMapping, read_notes
from coreepi.parse.elf.python_frames import is_cpython, python_runtime
from coreepi.parse.elf.unidentified import (
    build_id_in_core,
    exe_refusal,
    local_files,
    maps_elf_header,
)
from coreepi.parse.elf.unwind import Unwinding, UnwoundFrame, is_drgn_error, unwind_core

__all__ = ["ParsedCore", "open_core", "parse_core"]

AT_ENTRY, AT_EXECFN = 9, 31
MAX_ARGS = 65_536
# Bytes at the top of the initial stack searched for argv's pointers (above
# them: the argv/envp strings, at most 6 MiB, execve(2)), and the most argv
# strings read. A larger argv falls back to NT_PRPSINFO's first 80 bytes.
MAX_STACK_TOP = 8 << 20


def parse_core(
    path: str | os.PathLike[str],
    *,
    exe: str | os.PathLike[str] | None = None,
    sysroot: str | os.PathLike[str] | None = None,
    debug_dirs: Sequence[str | os.PathLike[str]] = (),
) -> CrashReport:
    """Read the ELF core dump at ``path`` (x86-64 or aarch64) into a CrashReport.

    ``exe``: the crashed executable, when it is not at the path the core
    records. ``sysroot``: a directory holding the core's modules at their
    recorded paths (e.g. a copy of the crashed host's ``/``). ``debug_dirs``:
    directories of separate debug files (``.build-id/xx/yyyy.debug`` layout).
    A file is used only if its build-id matches the core's.

    Raises :class:`coreepi.errors.NotACoreError`, :class:`CorruptCoreError` or
    :class:`UnsupportedArchError` (all :class:`InputError`) for unusable
    input. Problems that still leave a report (truncated core, missing debug
    info, a thread that cannot be unwound) go to ``analysis.warnings``.
    """
    with open_core(path, exe=exe, sysroot=sysroot, debug_dirs=debug_dirs) as parsed:
        return parsed.report


@dataclass(slots=True)
class ParsedCore:
    """A parsed core still open: its report and its process memory."""

    report: CrashReport
    memory: ProcessMemory


@contextmanager
def open_core(
    path: str | os.PathLike[str],
    *,
    exe: str | os.PathLike[str] | None = None,
    sysroot: str | os.PathLike[str] | None = None,
    debug_dirs: Sequence[str | os.PathLike[str]] = (),
) -> Iterator[ParsedCore]:
    """Like :func:`parse_core`, but keeps the core open: yields a
    :class:`ParsedCore` whose ``memory`` the analyzers read (stack words,
    instruction bytes). Same arguments and errors as :func:`parse_core`."""
    started = time.monotonic()
    if exe is not None and not os.path.isfile(exe):
        raise InputError(os.fspath(exe), "--exe: no such executable file")
    with CoreFile(path) as core:
        notes = read_notes(core)
        if not notes.threads:
            raise CorruptCoreError(core.name, "core has no NT_PRSTATUS note (no threads)")
        warnings = [*core.warnings, *notes.warnings]
        link_map = _files_from_link_map(core, notes, warnings) if not notes.files else []
        if exe is not None:
            refusal = exe_refusal(core, notes, os.fspath(exe))
            if refusal is not None:
                warnings.append(refusal)
                exe = None
        files = local_files(core, notes, exe=os.fspath(exe) if exe is not None else None,
                            sysroot=os.fspath(sysroot) if sysroot is not None else None,
                            warnings=warnings)
        try:
            unwinding: Unwinding | None = unwind_core(
                path,
                exe=Path(exe) if exe is not None else None,
                sysroot=Path(sysroot) if sysroot is not None else None,
                debug_dirs=[Path(d) for d in debug_dirs],
                link_map=link_map,
                local_files=files,
            )
        except Exception as exc:
            if not is_drgn_error(exc):
                raise
            warnings.append(f"drgn could not read the core, so no modules or frames: {exc}")
            unwinding = None
        if unwinding is not None:
            warnings.extend(unwinding.warnings)
        modules = _modules(core, unwinding, notes, link_map,
                           os.fspath(sysroot) if sysroot is not None else None)
        drgn_paths = {m.path for m in unwinding.modules} if unwinding is not None else set()
        unread = [m.path for m in modules if m.path not in drgn_paths]
        if unread:
            warnings.append(
                "no usable file for these modules (they state no build-id, and no file was "
                "found that fits what the core holds of them), so their frames get module + "
                "offset only: "
                + ", ".join(unread)
            )
        threads = _threads(core.arch, notes, unwinding, modules)
        process = _process(core, notes, modules)
        signal = _signal(notes, warnings)
        crashed = threads[0]
        report = CrashReport(
            crash_id=stable_crash_id(
                Source.ELF_CORE,
                modules[0].build_id if modules else None,
                process.pid,
                crashed.tid,
                signal.number if signal else None,
                signal.si_code if signal else None,
                signal.fault_address if signal else None,
                *sorted(crashed.registers.items()),
            ),
            source=Source.ELF_CORE,
            arch=core.arch,
            process=process,
            signal=signal,
            threads=threads,
            modules=modules,
            core=CoreInfo(size_bytes=core.size, truncated=core.truncated),
            analysis=AnalysisInfo(analyzer_version=__version__, warnings=warnings),
        )
        report.analysis.duration_seconds = round(time.monotonic() - started, 6)
        build_ids = {m.path: m.build_id for m in report.modules}
        main_exe = None
        if exe is not None and report.modules:
            main_exe = (report.modules[0].path, Path(exe))
            expected, given = report.modules[0].build_id, file_build_id(os.fspath(exe))
            if expected is not None and given != expected:
                report.analysis.warnings.append(
                    f"--exe {os.fspath(exe)}: its build-id {given or '(none)'} is not the "
                    f"core's {expected}; not used"
                )
        memory = ProcessMemory(
            core,
            notes.files,
            build_ids=build_ids,
            sysroot=Path(sysroot) if sysroot is not None else None,
            exe=main_exe,
            checked={f.name: f.path for f in files},
        )
        report.memory_map = _memory_map(memory)
        if is_cpython(report.modules):
            runtime = python_runtime(
                path, _main_executable(report, exe, sysroot), report.analysis.warnings
            )
            if runtime is not None:
                report.runtime = runtime
        _make_utf8(report)  # after ProcessMemory: it matches paths as the core spells them
        yield ParsedCore(report, memory)


def _main_executable(
    report: CrashReport,
    exe: str | os.PathLike[str] | None,
    sysroot: str | os.PathLike[str] | None,
) -> str:
    """The crashed executable's file: ``--exe``, else the main module's path
    under the sysroot, else as the core records it."""
    if exe is not None:
        return os.fspath(exe)
    path = report.modules[0].path if report.modules else (report.process.exe or "")
    if sysroot is not None:
        return os.path.join(os.fspath(sysroot), path.lstrip("/"))
    return path


def _make_utf8(model: BaseModel) -> None:
    """Make every string of ``model`` valid UTF-8, in place, so it serializes
    to JSON. Paths, argv and symbol names come from the core as bytes and are
    decoded with ``surrogateescape``; a byte that is not UTF-8 becomes
    ``\\xNN``. Cheap when there is nothing to do (the usual case)."""
    try:
        model.model_dump_json()
        return
    except PydanticSerializationError:
        pass
    for name in type(model).model_fields:
        value = getattr(model, name)
        fixed = _utf8_value(value)
        if fixed is not value:
            setattr(model, name, fixed)


def _utf8_value(value: object) -> object:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            try:
                raw = value.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raw = value.encode("utf-8", "surrogatepass")
            return raw.decode("utf-8", "backslashreplace")
    if isinstance(value, BaseModel):
        _make_utf8(value)
        return value
    if isinstance(value, list):
        items = [_utf8_value(v) for v in value]
        return items if items != value else value
    if isinstance(value, dict):
        fixed = {_utf8_value(k): _utf8_value(v) for k, v in value.items()}
        return fixed if fixed != value else value
    return value


def _signal(notes: CoreNotes, warnings: list[str]) -> SignalInfo | None:
    si = notes.siginfo
    if si is None:
        cursig = notes.threads[0].cursig
        if not cursig:
            return None
        warnings.append("core has no NT_SIGINFO; signal taken from NT_PRSTATUS (no si_code)")
        return SignalInfo(number=cursig, name=signals.signal_name(cursig))
    return SignalInfo(
        number=si.signo,
        name=signals.signal_name(si.signo),
        si_code=si.code,
        si_code_name=signals.si_code_name(si.signo, si.code),
        fault_address=si.addr if signals.has_fault_address(si.signo, si.code) else None,
        errno=si.errno,
        sender_pid=si.pid if signals.has_sender(si.code) else None,
        sender_uid=si.uid if signals.has_sender(si.code) else None,
    )


def _files_from_link_map(
    core: CoreFile, notes: CoreNotes, warnings: list[str]
) -> list[LinkMapObject]:
    """For a core without NT_FILE: the link map's objects, the main program
    named by AT_EXECFN (the link map names it ""), and their PT_LOAD file
    mappings put in ``notes.files`` in NT_FILE's place (so memory reads fall
    back to the files and the memory map names them)."""
    objects = link_map_objects(core, notes.auxv)
    if objects and not objects[0].name:
        execfn = core.read_c_string(notes.auxv[AT_EXECFN]) if AT_EXECFN in notes.auxv else None
        if execfn:
            main = objects[0]
            name = execfn.decode("utf-8", "surrogateescape")
            objects[0] = replace(
                main, name=name, mappings=tuple(replace(f, path=name) for f in main.mappings)
            )
    notes.files = [f for obj in objects if obj.name for f in obj.mappings]
    warnings.append(
        "core has no NT_FILE note: "
        + (
            f"{len(objects)} modules named from the dynamic linker's link map (r_debug)"
            if objects
            else "no link map in memory either (static program?), so modules are unnamed"
        )
    )
    return objects


def _modules(
    core: CoreFile, unwinding: Unwinding | None, notes: CoreNotes, link_map: list[LinkMapObject],
    sysroot: str | None,
) -> list[Module]:
    """Modules from drgn, plus the ELF files of NT_FILE that drgn left out
    (those have no build-id; ``sysroot``: where their files may be, to tell
    a data file from one when the core lacks its first page). The main executable comes first (it is the one
    AT_ENTRY falls in). ``link_map``: for a core without NT_FILE, names drgn's
    unnamed main module."""
    modules: list[Module] = []
    names = {obj.start: obj.name for obj in link_map}
    if unwinding is not None:
        for m in unwinding.modules:
            modules.append(
                Module(
                    path=m.path or names.get(m.base, ""),
                    build_id=m.build_id,
                    base=m.base,
                    end=m.end,
                    load_bias=m.load_bias,
                    debug_file=m.debug_file or m.loaded_file,
                )
            )
    # NT_FILE objects drgn did not report (drgn skips ELF objects without a
    # build-id): keep them, so every frame in them still gets module + offset.
    # An NT_FILE path may name a module drgn knows under another name (the
    # link map has the symlink, NT_FILE the target): skip overlapping ones.
    known = {m.path for m in modules}
    drgn_modules = _ModuleFinder(modules)
    spans: dict[str, tuple[int, int]] = {}
    heads: dict[str, list[FileMapping]] = {}  # the mappings of file offset 0, by path
    for f in notes.files:
        if f.offset == 0:
            heads.setdefault(f.path, []).append(f)
        if f.path in known or f.path.startswith(("/dev/", "/memfd:", "/SYSV")):
            continue
        if drgn_modules.overlaps(f.start, f.end):
            continue
        lo, hi = spans.get(f.path, (f.start, f.end))
        spans[f.path] = (min(lo, f.start), max(hi, f.end))
    modules += [
        Module(path=p, base=lo, end=hi, build_id=build_id_in_core(core, heads.get(p, [])))
        for p, (lo, hi) in spans.items()
        if maps_elf_header(core, heads.get(p, []), sysroot)
    ]
    entry = notes.auxv.get(AT_ENTRY)
    modules.sort(key=lambda m: (not (entry is not None and m.base <= entry < m.end), m.base))
    return modules


class _ModuleFinder:
    """``next(m for m in modules if m.base <= address < m.end)`` in O(log n)
    (a core may list a million mappings): modules sorted by base, with the
    running maximum of their ends so that overlapping ones are still found."""

    def __init__(self, modules: list[Module]) -> None:
        self._rank = {id(m): i for i, m in enumerate(modules)}
        self._sorted = sorted(modules, key=lambda m: m.base)
        self._bases = [m.base for m in self._sorted]
        self._max_end = list(itertools.accumulate((m.end for m in self._sorted), max))

    def find(self, address: int) -> Module | None:
        best = None
        i = bisect.bisect_right(self._bases, address) - 1
        while i >= 0 and self._max_end[i] > address:
            m = self._sorted[i]
            if address < m.end and (best is None or self._rank[id(m)] < self._rank[id(best)]):
                best = m
            i -= 1
        return best

    def overlaps(self, start: int, end: int) -> bool:
        """True when some module overlaps [start, end)."""
        i = bisect.bisect_left(self._bases, end) - 1  # the modules with base < end
        return i >= 0 and self._max_end[i] > start


def _frame(index: int, f: UnwoundFrame, modules: _ModuleFinder) -> Frame:
    module = modules.find(f.pc)
    return Frame(
        index=index,
        pc=f.pc,
        sp=f.sp,
        module=module.path if module else None,
        build_id=module.build_id if module else None,
        module_offset=f.pc - module.base if module else None,
        function=f.function,
        function_offset=f.function_offset,
        file=f.file,
        line=f.line,
        column=f.column,
        inlined=f.inlined,
        trust=f.trust,
    )


def _threads(
    arch: str, notes: CoreNotes, unwinding: Unwinding | None, modules: list[Module]
) -> list[Thread]:
    """Threads in note order. The kernel (fs/binfmt_elf.c, fill_note_info) and
    gdb's gcore both write the thread that took the signal first."""
    comm = notes.prpsinfo.fname if notes.prpsinfo else None
    pid = notes.prpsinfo.pid if notes.prpsinfo else None
    threads = []
    finder = _ModuleFinder(modules)
    for i, status in enumerate(notes.threads):
        unwound = unwinding.threads.get(status.tid) if unwinding else None
        frames = [_frame(j, f, finder) for j, f in enumerate(unwound.frames)] if unwound else []
        threads.append(
            Thread(
                tid=status.tid,
                # Cores keep no per-thread names; comm is the thread-group leader's.
                name=comm if status.tid == pid else None,
                crashed=i == 0,
                registers=status.registers,
                frames=frames,
                unwind_error=unwound.error if unwound else "not unwound",
            )
        )
    return threads


def _process(core: CoreFile, notes: CoreNotes, modules: list[Module]) -> ProcessInfo:
    ps = notes.prpsinfo
    execfn = None
    if AT_EXECFN in notes.auxv:
        raw = core.read_c_string(notes.auxv[AT_EXECFN])
        execfn = raw.decode("utf-8", "surrogateescape") if raw else None
    entry = notes.auxv.get(AT_ENTRY)
    exe = None
    if modules and entry is not None and modules[0].base <= entry < modules[0].end:
        exe = modules[0].path
    exe = exe or execfn or (ps.psargs.split(" ", 1)[0] if ps and ps.psargs else None)
    argv = _recover_argv(core, notes)
    truncated = False
    if argv is None:
        psargs = ps.psargs if ps else ""
        argv = psargs.split() if psargs else []
        truncated = len(psargs.encode()) >= 79  # ELF_PRARGSZ - 1: the kernel cut it
    return ProcessInfo(
        pid=ps.pid if ps else notes.threads[0].tid,
        ppid=ps.ppid if ps else notes.threads[0].ppid,
        tid=notes.threads[0].tid,
        exe=exe,
        comm=ps.fname if ps else None,
        cmdline=argv,
        cmdline_truncated=truncated,
        uid=ps.uid if ps else None,
        gid=ps.gid if ps else None,
        auxv={AT_NAMES.get(k, f"AT_{k}"): v for k, v in notes.auxv.items()},
    )


def _recover_argv(core: CoreFile, notes: CoreNotes) -> list[str] | None:
    """argv in full, read from the initial process stack.

    The kernel lays out the new stack as argc, argv[], NULL, envp[], NULL,
    auxv (fs/binfmt_elf.c, create_elf_tables). The auxv words are known from
    NT_AUXV, so find them in the stack segment and walk back to argc. Returns
    None when the layout is not found (stack not dumped, overwritten).
    """
    if len(notes.auxv_raw) < 32 or AT_EXECFN not in notes.auxv:
        return None
    seg = core.segment_for(notes.auxv[AT_EXECFN])
    if seg is None or not seg.filesz:
        return None
    # argv, envp and auxv lie just below the strings at the top of the stack:
    # read the top of the segment only, not a (hostile) segment of any size.
    size = min(seg.filesz, MAX_STACK_TOP)
    stack = core.read(seg.vaddr + seg.filesz - size, size)
    if stack is None:
        return None
    hit = stack.rfind(notes.auxv_raw[:32])
    if hit < 16 or hit % 8:
        return None

    def word(offset: int) -> int:
        return int.from_bytes(stack[offset : offset + 8], "little")

    pos = hit - 8
    if word(pos) != 0:  # envp's terminating NULL
        return None
    pos -= 8
    while pos >= 0 and word(pos) != 0:  # envp entries
        pos -= 8
    pointers: list[int] = []
    pos -= 8
    while pos >= 0 and len(pointers) < MAX_ARGS:
        value = word(pos)
        if value == len(pointers) and pointers:
            break  # argc
        pointers.append(value)
        pos -= 8
    else:
        return None
    argv = []
    total = 0
    for pointer in reversed(pointers):
        raw = core.read_c_string(pointer, limit=1 << 17)
        total += len(raw) + 1 if raw is not None else 0
        if raw is None or total > MAX_STACK_TOP:
            return None
        argv.append(raw.decode("utf-8", "surrogateescape"))
    return argv


def _memory_map(memory: ProcessMemory) -> list[Mapping]:
    """One mapping per PT_LOAD segment or NT_FILE entry (see
    ProcessMemory.regions). Cores do not record private vs shared."""
    return [
        Mapping(start=r.start, end=r.end, perms=r.perms, offset=r.offset, path=r.path,
                in_core=r.in_core)
        for r in memory.regions
    ]
