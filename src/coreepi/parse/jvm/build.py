"""Turn the facts scanned from an hs_err log into a CrashReport.

Phenotypes and the signature are not made here: the facts they need travel
as ``report.artifact.jvm`` (:class:`~coreepi.model.report.JvmErrorInfo`) and
the detailed ``runtime.frames``, and :func:`coreepi.analyze.analyze` reads
them.

Frames: the crashing thread's ``Native frames:`` list (or, when the log was
cut before it, the ``Problematic frame``) becomes ``Thread.frames`` and, with
HotSpot's frame kinds, ``runtime.frames``; index i is the same frame in
both. hs_err prints native frames as ``module+offset``: the absolute pc is
rebuilt from the module's base in ``Dynamic libraries``; frame 0 of a
signal crash takes the pc of the error line. Where neither is known the pc
is 0 (the model requires one; a warning says so, as the kernel-oops parser
does).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from coreepi import __version__
from coreepi.model.report import (
    AnalysisInfo,
    ArtifactInfo,
    CoreInfo,
    CrashReport,
    Frame,
    FrameTrust,
    JvmErrorInfo,
    Mapping,
    Module,
    ProcessInfo,
    Runtime,
    RuntimeFrame,
    SignalInfo,
    Source,
    Thread,
    stable_crash_id,
)
from coreepi.model.trusted import trusted
from coreepi.parse.jvm.facts import HsErrFacts
from coreepi.parse.jvm.jvm import JvmFacts, crash_time, host_facts, jvm_facts
from coreepi.parse.jvm.lines import RawFrame
from coreepi.parse.signals import si_code_name, signal_name

__all__ = ["ANALYZER", "build_report"]

ANALYZER: Final = f"coreepi {__version__} hs_err"
_PID_MAX: Final = 1 << 22  # Linux PID_MAX_LIMIT: a larger "tid" is a pthread_t, not a thread id
_MODULE_NAME: Final = re.compile(
    r"(?:\.so(?:\.|$)|\.dll$|\.dylib$|\.exe$|^\[vdso\]$|/java$)", re.IGNORECASE
)
_LAUNCHER: Final = re.compile(r"javaw?(?:\.exe)?", re.IGNORECASE)
_WINDOWS_ACCESS: Final = {
    0: "EXCEPTION_READ_FAULT",
    1: "EXCEPTION_WRITE_FAULT",
    8: "EXCEPTION_EXECUTE_FAULT",
}
_PC_REGISTERS: Final = ("rip", "eip", "pc")
_U64: Final = (1 << 64) - 1
_SP_REGISTERS: Final = {
    "x86_64": "rsp", "x86": "esp", "aarch64": "sp", "ppc64le": "r1", "ppc64": "r1", "s390x": "r15",
    "riscv64": "sp", "arm": "sp", "sparcv9": "o6",
}  # fmt: skip
_JVM_HOME: Final = re.compile(
    r"^(?P<home>.*?)(?:[/\\]jre)?[/\\](?:lib|bin)[/\\](?:[^/\\]+[/\\])?(?:server|client)"
    r"[/\\](?:lib)?jvm\.(?:so|dll|dylib)$"
)


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _modules(facts: HsErrFacts) -> tuple[list[Module], list[Mapping]]:
    """Modules and the memory map from ``Dynamic libraries``. A module's base
    is its load address (start minus file offset of its lowest mapping),
    which is what HotSpot's ``lib+0x…`` offsets are relative to."""
    spans: dict[str, list[int]] = {}
    memory_map: list[Mapping] = []
    for start, end, perms, offset, path in facts.mappings:
        if perms is not None and end is not None:
            memory_map.append(
                trusted(Mapping, start=start, end=end, perms=perms, offset=offset, path=path,
                        in_core=False)
            )
        if not path or (perms is not None and not (path.startswith("/") or path == "[vdso]")):
            continue
        if perms is not None and "x" not in perms and not _MODULE_NAME.search(path):
            continue
        base = start - offset if offset <= start else start
        span = spans.setdefault(path, [base, end if end is not None else start])
        span[0] = min(span[0], base)
        span[1] = max(span[1], end if end is not None else start)
    modules = [trusted(Module, path=p, base=b, end=max(e, b)) for p, (b, e) in spans.items()]
    return modules, memory_map


def _signed32(number: int) -> int:
    """A Windows exception code (an NTSTATUS, ``0xC0000005``) as the signed
    32-bit value Windows itself reports (``-1073741819``, a crashed
    process's exit code): in range of the store's INT32 ``signal_number``;
    the name (``EXCEPTION_ACCESS_VIOLATION``) says what it is. POSIX signal
    numbers are unchanged."""
    return number - (1 << 32) if (1 << 31) <= number < (1 << 32) else number


def _signal(facts: HsErrFacts) -> SignalInfo | None:
    error, info = facts.error, facts.siginfo
    number = name = None
    if error is not None and error.kind == "signal":
        number, name = error.code, error.name
    elif info is not None and (info.signo is not None or info.exception_code is not None):
        number = info.signo if info.signo is not None else info.exception_code
        name = info.name or (signal_name(number) if number is not None and number < 65 else None)
    if number is None:
        return None
    values: dict[str, Any] = {"number": _signed32(number), "name": name}
    if info is not None:
        if info.access is not None:
            values["si_code"] = info.access
            values["si_code_name"] = _WINDOWS_ACCESS.get(info.access)
        elif info.si_code is not None:
            values["si_code"] = info.si_code
            values["si_code_name"] = info.si_code_name or si_code_name(number, info.si_code)
        values["fault_address"] = info.fault_address
        values["errno"] = info.errno
        values["sender_pid"] = info.sender_pid
        values["sender_uid"] = info.sender_uid
    return trusted(SignalInfo, **values)


def _crash_pc(facts: HsErrFacts) -> int | None:
    if facts.error is not None and facts.error.pc is not None:
        return facts.error.pc
    if facts.error is None:  # a fragment: the context's pc is still printed further down
        for reg in _PC_REGISTERS:
            if reg in facts.registers:
                return facts.registers[reg]
        return facts.instructions_pc
    return None


def _stack(facts: HsErrFacts) -> list[RawFrame]:
    if facts.native_frames:
        return facts.native_frames
    return [facts.problematic] if facts.problematic is not None else []


def _function(raw: RawFrame) -> str | None:
    if raw.kind in "JAj":
        return raw.method
    if raw.kind == "v":
        return raw.stub.lstrip("~") if raw.stub else None
    return raw.symbol


def _frames(
    stack: Sequence[RawFrame],
    bases: dict[str, Module],
    modules: Sequence[Module],
    crash_pc: int | None,
    sp: int | None,
) -> tuple[list[Frame], int]:
    frames: list[Frame] = []
    unknown = 0
    for index, raw in enumerate(stack):
        pc, module, offset = raw.pc, raw.module, raw.module_offset
        if (
            module is not None
            and offset is not None
            and (found := bases.get(module.lower())) is not None
        ):
            module = found.path
            if pc is None and found.base + offset <= _U64:  # a garbled offset may overflow
                pc = found.base + offset
        context = index == 0 and crash_pc is not None
        if context:
            pc = crash_pc
        if raw.module is None and pc is not None:
            holder = next((m for m in modules if m.base <= pc < m.end), None)
            if holder is not None:
                module, offset = holder.path, pc - holder.base
        if pc is None:
            unknown += 1  # pc stays None: the log gives module+offset only
        frames.append(
            trusted(
                Frame,
                index=index,
                pc=pc,
                sp=sp if index == 0 else None,
                module=module,
                module_offset=offset,
                function=_function(raw),
                function_offset=raw.symbol_offset if raw.kind in "CV" else raw.code_offset,
                file=raw.source_file,
                line=raw.source_line,
                trust=FrameTrust.CONTEXT if context else FrameTrust.FRAME_POINTER,
            )
        )
    return frames, unknown


def _runtime_frame(raw: RawFrame) -> RuntimeFrame:
    """The frame with HotSpot's kind and everything its line printed."""
    if raw.kind in "CV":
        if raw.symbol:
            function = raw.symbol
        elif raw.module is not None and raw.module_offset is not None:
            function = f"{raw.module}+0x{raw.module_offset:x}"
        else:
            function = f"0x{raw.pc or 0:x}"
        file = raw.module
    else:
        function, file = _function(raw) or raw.text[:200], None
    return trusted(
        RuntimeFrame,
        function=function,
        file=file,
        kind=raw.kind,
        text=raw.text[:500],
        module=raw.module,
        module_offset=raw.module_offset,
        symbol=raw.symbol,
        symbol_offset=raw.symbol_offset,
        pc=raw.pc,
        method=raw.method,
        compiler=raw.compiler,
        compile_id=raw.compile_id,
        osr=raw.osr,
        stub=raw.stub,
    )


def _tid(facts: HsErrFacts) -> int | None:
    if facts.current is not None and facts.current.tid is not None:
        return facts.current.tid
    raw = facts.error.tid if facts.error else None
    if raw:
        value = int(raw, 16) if raw.startswith("0x") else int(raw)
        return value if value < _PID_MAX else None  # JDK 8 prints the pthread_t on Linux
    return None


def _crashed_thread(facts: HsErrFacts, tid: int | None, frames: list[Frame]) -> Thread | None:
    """The thread that crashed; None when the log shows nothing of it (a
    fragment, or an OOM header alone): no thread is made up."""
    current = facts.current
    if not (frames or facts.registers or current or tid is not None):
        return None
    return trusted(
        Thread,
        tid=tid if tid is not None else 0,
        crashed=True,
        registers=dict(facts.registers),
        name=(current.name or current.thread_type) if current else None,
        frames=frames,
    )


def _threads(
    facts: HsErrFacts, crashed: Thread | None, bases: dict[str, Module], modules: Sequence[Module]
) -> list[Thread]:
    """The crashed thread, then the listed ones by tid and name (no frames:
    the log shows only the crashing thread's stack), then, in a GC or VM
    thread crash, the JavaThread whose stack was being walked."""
    threads = [crashed] if crashed is not None else []
    seen = {t.tid for t in threads}
    for listed in facts.threads:
        if listed.tid is None or listed.tid in seen or listed.current:
            continue
        seen.add(listed.tid)
        threads.append(trusted(Thread, tid=listed.tid, name=listed.name or listed.thread_type))
    if facts.processed_thread is not None:
        nid, raw_frames = facts.processed_thread
        frames, _ = _frames([f for f in raw_frames if f.pc is not None], bases, modules, None, None)
        other = next((t for t in threads if t.tid == nid and not t.crashed), None)
        if other is None and nid not in seen:
            other = trusted(Thread, tid=nid, name="(stack being walked when the crash happened)")
            threads.append(other)
        if other is not None:
            other.frames = frames
    return threads


def _cmdline(facts: HsErrFacts) -> list[str]:
    if facts.command_line:
        return facts.command_line.split()
    return (facts.jvm_args or "").split() + (facts.java_command or "").split()


def _process_names(facts: HsErrFacts) -> tuple[str | None, str | None]:
    """``(exe, comm)`` of the crashed JVM process, each None when the log
    does not show it. The exe is the ``java``/``javaw`` launcher among the
    ``Dynamic libraries`` (the kernel maps the executable there like any
    library); the comm is its file name, cut to the kernel's 15 bytes, so an
    hs_err log names its process as the JVM's core does ("java"). Without
    that mapping (trimmed logs), ``Launcher Type: SUN_STANDARD`` still says
    the process is the ``java`` launcher; a custom launcher embedding the
    JVM (``JNI_CreateJavaVM``) stays unnamed rather than guessed."""
    exe = next((path for _, _, _, _, path in facts.mappings
                if path and _LAUNCHER.fullmatch(_basename(path))), None)
    if exe is not None:
        return exe, _basename(exe)[:15]
    return None, "java" if facts.launcher == "SUN_STANDARD" else None


def _jvm_extra(facts: HsErrFacts, jvm: JvmFacts, home: str | None) -> dict[str, str]:
    values = {
        "jvm.runtime_name": jvm.runtime_name,
        "jvm.vm": facts.java_vm,
        "jvm.vm_name": jvm.vm_name,
        "jvm.vm_version": jvm.vm_version,
        "jvm.platform": jvm.platform,
        "jvm.major": jvm.major,
        "jvm.vendor_evidence": jvm.vendor_evidence,
        "jvm.vm_info": facts.vm_info,
        "jvm.builder": jvm.builder,
        "jvm.build_date": jvm.build_date,
        "jvm.build_compiler": jvm.build_compiler,
        "jvm.gc": jvm.gc,
        "jvm.home": home,
        "jvm.args": facts.jvm_args,
        "jvm.java_command": facts.java_command,
        "jvm.command_line": facts.command_line,
        "jvm.launcher": facts.launcher,
        "jvm.flags": " ".join(facts.flags) or None,
        "jvm.vm_state": facts.vm_state,
        "jvm.compile_task": facts.compile_task,
        "jvm.bug_url": facts.bug_url,
        "jvm.thread_type": facts.current.thread_type if facts.current else None,
        "jvm.thread_state": facts.current.state if facts.current else None,
        "jvm.error_line": facts.error_line,
        "jvm.elapsed_time": facts.elapsed,
    }
    return {k: str(v)[:4000] for k, v in values.items() if v not in (None, "")}


def _crash_id(facts: HsErrFacts, name: str | None, head_digest: str | None) -> str:
    """The header alone identifies the crash (pid, tid and pc are in the
    error line, the JVM build in the version lines), so a copy cut short by
    a failing disk or upload gets the id of the whole log."""
    identity: list[object] = [facts.error.pid if facts.error else None, facts.error_line]
    identity += [facts.problematic_text, facts.oom_message, facts.jre_version, facts.java_vm]
    if facts.error_line is None:  # a fragment: its text is all there is
        identity += [name, head_digest]
    return stable_crash_id("hs_err", *identity)


def _warnings(facts: HsErrFacts, frames_unknown: int, frames_total: int) -> list[str]:
    warnings: list[str] = []
    if facts.error is None and not facts.oom:
        warnings.append("partial report: no error line (the log starts after its header)")
    if not facts.end_seen:
        warnings.append(
            "partial report: the log ends before its last line ('END.' / 'elapsed time:'); "
            "parsed what is there"
        )
    if facts.second_log_at is not None:
        warnings.append(
            f"a second crash log starts at line {facts.second_log_at}; only the first is parsed"
        )
    if frames_unknown:
        warnings.append(
            f"frame pcs unknown for {frames_unknown} of {frames_total} frames (printed as "
            "module+offset, module base not listed under 'Dynamic libraries')"
        )
    if facts.frames_dropped:
        warnings.append("the crashing thread has more frames than the log (or the frame cap) shows")
    if facts.mappings_dropped:
        warnings.append(
            f"{facts.mappings_dropped} 'Dynamic libraries' lines beyond the cap were not kept"
        )
    if facts.long_lines:
        warnings.append(f"{facts.long_lines} over-long lines were cut")
    warnings.extend(
        f"HotSpot failed while writing the log: {step}" for step in facts.reporting_errors[:16]
    )
    return warnings


def _instruction_bytes(facts: HsErrFacts, pc: int | None) -> str | None:
    """Up to 16 bytes at ``pc`` from the ``Instructions:`` dump, as hex."""
    if pc is None:
        return None
    for address, data in facts.instructions.items():
        if address <= pc < address + len(data):
            following = facts.instructions.get(address + len(data), b"")
            return (data[pc - address :] + following)[:16].hex()
    return None


def _error_info(
    facts: HsErrFacts,
    error_kind: str | None,
    pc: int | None,
    sp: int | None,
    arch: str | None,
    home: str | None,
) -> JvmErrorInfo:
    """The fatal error as the log states it, for the analysis rules."""
    limit = facts.container.get("memory_limit_in_bytes") or facts.container.get("memory_limit")
    stack = facts.stack
    return trusted(
        JvmErrorInfo,
        error_kind=error_kind,
        error_line=facts.error_line,
        location=facts.error.location if facts.error else None,
        message=facts.oom_message if facts.oom else (" ".join(facts.error_message) or None),
        pc=pc,
        sp=sp,
        stack_low=stack[0] if stack else None,
        stack_high=stack[1] if stack else None,
        instruction_bytes=_instruction_bytes(facts, pc),
        memory=facts.memory,
        container_memory_limit_bytes=(
            int(limit) if limit and limit.lstrip("-").isdigit() and int(limit) > 0 else None
        ),
        thread_state=facts.current.state if facts.current else None,
        home=home,
    )


def build_report(
    facts: HsErrFacts,
    *,
    name: str | None,
    sha256: str | None,
    size_bytes: int | None,
    head_digest: str | None,
    duration: float | None = None,
) -> CrashReport:
    """The CrashReport of one scanned log (``facts.evidence`` > 0).

    Every model is built with ``trusted()``, without validation (see
    :mod:`coreepi.model.trusted`): the scanner's ints are parsed from at
    most 16 hex digits (an address fits 64 bits), a pc rebuilt from a
    module base is checked against 2**64 below, the container limit is
    kept only when positive."""
    jvm = jvm_facts(facts)
    modules, memory_map = _modules(facts)
    bases = {_basename(m.path).lower(): m for m in modules}
    libjvm = next(
        (
            m.path
            for m in modules
            if _basename(m.path).lower() in ("libjvm.so", "jvm.dll", "libjvm.dylib")
        ),
        None,
    )
    home_match = _JVM_HOME.match(libjvm) if libjvm else None
    home = home_match["home"] if home_match else None
    error_kind = "oom" if facts.oom else (facts.error.kind if facts.error else None)
    signal = _signal(facts)
    crash_pc = _crash_pc(facts) if error_kind in ("signal", None) else None
    arch_sp = _SP_REGISTERS.get(jvm.arch or "")
    sp = (
        facts.stack[2]
        if facts.stack and facts.stack[2] is not None
        else facts.registers.get(arch_sp or "")
    )
    stack = _stack(facts)
    frames, unknown = _frames(stack, bases, modules, crash_pc, sp)
    runtime_frames = [_runtime_frame(raw) for raw in stack]
    java_tail: list[RawFrame] = []
    if facts.java_frames and not any(raw.kind in "JAj" for raw in stack):
        java_tail = facts.java_frames  # the native walk stopped before the Java frames
        runtime_frames += [_runtime_frame(raw) for raw in java_tail]
    tid = _tid(facts)
    crashed = _crashed_thread(facts, tid, frames)
    host = host_facts(facts)
    host.extra.update(_jvm_extra(facts, jvm, home))
    captured_at, local_time, time_note = crash_time(facts)
    if local_time:
        host.extra["time_local"] = local_time
    warnings = _warnings(facts, unknown, len(frames))
    if time_note:
        warnings.append(time_note)
    if crashed is not None and tid is None:
        warnings.append("the crashing thread's id is not in the log: Thread.tid=0")
    pid = facts.error.pid if facts.error else None
    exe, comm = _process_names(facts)
    return trusted(
        CrashReport,
        crash_id=_crash_id(facts, name, head_digest),
        captured_at=captured_at,
        source=Source.HS_ERR,
        arch=jvm.arch,
        process=trusted(
            ProcessInfo, pid=pid, tid=tid, exe=exe, comm=comm, cmdline=_cmdline(facts)
        ),
        signal=signal,
        threads=_threads(facts, crashed, bases, modules),
        modules=modules,
        memory_map=memory_map,
        runtime=trusted(
            Runtime, kind="jvm", version=jvm.version, vendor=jvm.vendor, frames=runtime_frames
        ),
        artifact=trusted(
            ArtifactInfo, jvm=_error_info(facts, error_kind, crash_pc, sp, jvm.arch, home)
        ),
        host=host,
        core=trusted(CoreInfo, size_bytes=size_bytes, sha256=sha256, truncated=not facts.end_seen),
        analysis=trusted(
            AnalysisInfo, analyzer_version=ANALYZER, duration_seconds=duration, warnings=warnings
        ),
    )
