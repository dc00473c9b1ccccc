"""Case definitions for JVM crashes, evaluated on what an hs_err log shows.

JVM phenotypes:

* ``jvm-native-oom`` — the JVM could not get native memory (``There is
  insufficient memory…``: mmap/malloc failure, thread creation, swap);
* ``jvm-internal-error`` — a HotSpot assertion, ``guarantee``, ``fatal``
  or ``ShouldNotReachHere`` (``Internal Error (file:line)``);
* ``jvm-crash-in-native-library`` — the problematic frame is native code
  (``C``) outside the JVM: which library, and the first non-system library
  of the stack (the likely culprit when the crash is in libc);
* ``jvm-crash-in-jit-code`` — the pc was in code the JVM generated:
  a compiled Java method (``J``/``A``) or a stub (``v``).

Native phenotypes, with the names, meaning and evidence keys of the
``coreepi.analyze`` rules, where the signal, siginfo and registers allow:
``null-deref``, ``sigbus-mce``, ``illegal-instruction``,
``pc-not-executable``, ``stack-overflow``, ``stack-misaligned``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from coreepi.model.report import Mapping, Phenotype, SignalInfo
from coreepi.parse.jvm.facts import HsErrFacts
from coreepi.parse.jvm.lines import RawFrame
from coreepi.parse.signals import has_fault_address

__all__ = ["CrashContext", "phenotypes"]

NULL_PAGE_LIMIT: Final = 0x10000  # vm.mmap_min_addr: nothing is ever mapped below
_JVM_LIBRARIES: Final = ("libjvm.so", "jvm.dll", "libjvm.dylib", "libjvm.a")
_SYSTEM_LIBRARY: Final = re.compile(
    r"^(?:libc[.-]|libc\.so|libpthread|libdl[.-]|libm[.-]|librt[.-]|ld-linux|ld64|ld\.so|"
    r"libstdc\+\+|"
    r"libgcc_s|libc\+\+|libsystem_|libdyld|ntdll\.dll|kernelbase\.dll|kernel32\.dll|msvcr|msvcp|"
    r"ucrtbase\.dll|vcruntime)",
    re.IGNORECASE,
)
# Native libraries shipped with the JDK itself (the JVM's own, libjvm, aside).
_JDK_LIBRARY: Final = re.compile(
    r"^(?:lib)?(?:java|zip|net|nio|jli|verify|awt\w*|fontmanager|freetype|lcms|mlib_image|jpeg|"
    r"javajpeg|splashscreen|jsound|management\w*|instrument|jdwp|dt_socket|attach|sunec|j2pkcs11|"
    r"j2gss|jaas\w*|"
    r"prefs|sctp|extnet|jimage|rmi|jawt|t2k|saproc|fdlibm|jsig|hprof|npt|unpack)\.(?:so|dll|dylib)$"
)
_ASSERTION: Final = re.compile(
    r"^(?:Error:\s*)?(guarantee|assert|fatal error|fatal|ShouldNotReachHere|"
    r"ShouldNotCall|Unimplemented|Untested)"
)
_OOM_DETAIL: Final = re.compile(
    r"Native memory allocation \((?P<alloc>\w+)\) failed to \w+ (?P<size>\d+) bytes"
    r"(?:\.\s*Error detail:\s*|\s+for\s+)?(?P<what>.*)$"
)
_OOM_REQUESTED: Final = re.compile(
    r"requested (?P<size>\d+) bytes for (?P<what>.*?)\.? Out of swap space"
)
_ILLEGAL: Final = frozenset(
    {"SIGILL", "EXCEPTION_ILLEGAL_INSTRUCTION", "EXCEPTION_PRIV_INSTRUCTION"}
)
_ACCESS: Final = frozenset(
    {"SIGSEGV", "SIGBUS", "EXCEPTION_ACCESS_VIOLATION", "EXCEPTION_IN_PAGE_ERROR"}
)


@dataclass
class CrashContext:
    """What the rules read, already resolved by the builder. ``top``: the
    problematic frame (the crashing thread's frame 0) when the crash came
    from a signal or exception; ``stack``: the crashing thread's frames;
    ``library_paths``: basename (lower case) -> full path."""

    facts: HsErrFacts
    error_kind: str | None
    signal: SignalInfo | None
    top: RawFrame | None
    stack: Sequence[RawFrame]
    pc: int | None
    sp: int | None
    arch: str | None
    registers: dict[str, int]
    memory_map: Sequence[Mapping]
    library_paths: dict[str, str] = field(default_factory=dict)
    jvm_home: str | None = None


def _hex(value: int | None) -> str | None:
    return None if value is None else f"0x{value:x}"


def _native_oom(ctx: CrashContext) -> Phenotype:
    facts = ctx.facts
    message = facts.oom_message or ""
    evidence: dict[str, Any] = {
        "message": message or None,
        "allocator": None,
        "size_bytes": None,
        "purpose": None,
    }
    if match := _OOM_DETAIL.search(message):
        evidence.update(
            allocator=match["alloc"],
            size_bytes=int(match["size"]),
            purpose=match["what"].strip().rstrip(".") or None,
        )
    elif match := _OOM_REQUESTED.search(message):
        evidence.update(size_bytes=int(match["size"]), purpose=match["what"].strip())
    if facts.error is not None:
        evidence["location"] = facts.error.location
    evidence["memory"] = facts.memory
    limit = facts.container.get("memory_limit_in_bytes") or facts.container.get("memory_limit")
    if limit and limit.lstrip("-").isdigit() and int(limit) > 0:
        evidence["container_memory_limit_bytes"] = int(limit)
    return Phenotype(name="jvm-native-oom", evidence=evidence)


def _internal_error(ctx: CrashContext) -> Phenotype:
    facts = ctx.facts
    location = facts.error.location if facts.error else None
    file = line = None
    if location and (match := re.match(r"^(?P<file>.+):(?P<line>\d+)$", location)):
        file, line = match["file"], int(match["line"])
    message = " ".join(facts.error_message) or None
    assertion = _ASSERTION.match(message or "")
    kind = assertion[1] if assertion else None
    return Phenotype(
        name="jvm-internal-error",
        evidence={
            "location": location,
            "file": file,
            "line": line,
            "message": message,
            "assertion": {"fatal error": "fatal"}.get(kind or "", kind),
        },
    )


def _library_of(frame: RawFrame) -> str | None:
    return frame.module if frame.kind == "C" and frame.module else None


def _native_library(ctx: CrashContext, top: RawFrame) -> Phenotype | None:
    library = _library_of(top)
    if library is None or library.lower().startswith(_JVM_LIBRARIES):
        return None
    path = ctx.library_paths.get(library.lower())
    jdk_library: bool | None = None
    if path and ctx.jvm_home:
        jdk_library = path.startswith(
            ctx.jvm_home.rstrip("/\\") + ("\\" if "\\" in ctx.jvm_home else "/")
        )
    elif _JDK_LIBRARY.match(library):
        jdk_library = True
    culprit = next(
        (
            lib
            for f in ctx.stack
            if (lib := _library_of(f))
            and not _SYSTEM_LIBRARY.match(lib)
            and not lib.lower().startswith(_JVM_LIBRARIES)
        ),
        library,
    )
    return Phenotype(
        name="jvm-crash-in-native-library",
        evidence={
            "library": library,
            "library_path": path,
            "function": top.symbol,
            "module_offset": _hex(top.module_offset),
            "jdk_library": jdk_library,
            "system_library": bool(_SYSTEM_LIBRARY.match(library)),
            "culprit_library": culprit,
            "problematic_frame": top.text[:500],
            "thread_state": ctx.facts.current.state if ctx.facts.current else None,
        },
    )


def _jit_code(top: RawFrame) -> Phenotype | None:
    if top.kind in "JA":
        return Phenotype(
            name="jvm-crash-in-jit-code",
            evidence={
                "code_kind": "compiled-method" if top.kind == "J" else "aot-compiled-method",
                "method": top.method,
                "compiler": top.compiler,
                "compile_id": top.compile_id,
                "osr": top.osr,
                "problematic_frame": top.text[:500],
            },
        )
    if top.kind == "v":
        return Phenotype(
            name="jvm-crash-in-jit-code",
            evidence={
                "code_kind": "stub",
                "stub": top.stub,
                "problematic_frame": top.text[:500],
            },
        )
    return None


def _fault_is_real(signal: SignalInfo) -> bool:
    """si_addr means something only for a kernel-raised fault; SI_KERNEL
    (a general protection fault) and kill()ed signals carry 0 there."""
    if signal.si_code is None or signal.number > 64:
        return True  # Windows, or a log without siginfo: the address stands as printed
    return has_fault_address(signal.number, signal.si_code)


def _instruction_bytes(facts: HsErrFacts, pc: int) -> bytes | None:
    for address, data in facts.instructions.items():
        if address <= pc < address + len(data):
            start = pc - address
            tail = data[start:]
            following = facts.instructions.get(address + len(data), b"")
            return (tail + following)[:16]
    return None


def _native(ctx: CrashContext) -> list[Phenotype]:
    found: list[Phenotype] = []
    signal, pc = ctx.signal, ctx.pc
    if signal is None:
        return found
    fault = signal.fault_address
    if (
        signal.name in _ACCESS
        and fault is not None
        and fault < NULL_PAGE_LIMIT
        and _fault_is_real(signal)
    ):
        found.append(
            Phenotype(
                name="null-deref",
                evidence={
                    "fault_address": _hex(fault),
                    "si_code": signal.si_code_name,
                    "offset_from_null": fault,
                },
            )
        )
    if signal.si_code_name in ("BUS_MCEERR_AR", "BUS_MCEERR_AO"):
        found.append(
            Phenotype(
                name="sigbus-mce",
                hardware_indicative=True,
                evidence={
                    "si_code": signal.si_code_name,
                    "action_required": signal.si_code_name == "BUS_MCEERR_AR",
                    "fault_address": _hex(fault),
                },
            )
        )
    if signal.name in _ILLEGAL:
        code = _instruction_bytes(ctx.facts, pc) if pc is not None else None
        found.append(
            Phenotype(
                name="illegal-instruction",
                evidence={
                    "si_code": signal.si_code_name,
                    "pc": _hex(pc),
                    "instruction_bytes": code.hex(" ") if code else None,
                    # C2 and the template interpreter plant ud2 on purpose (halt, unreachable code).
                    "deliberate_trap": code[:2] == b"\x0f\x0b"
                    if code and ctx.arch in ("x86_64", "x86")
                    else None,
                },
            )
        )
    if pc is not None and signal.name in _ACCESS | _ILLEGAL:
        reason = None
        if pc < NULL_PAGE_LIMIT:
            reason = "pc in the NULL page"
        elif fault == pc and signal.name in _ACCESS and _fault_is_real(signal):
            reason = "the faulting access was the instruction fetch (fault address == pc)"
        else:
            mapping = next((m for m in ctx.memory_map if m.start <= pc < m.end), None)
            if mapping is not None and "x" not in mapping.perms:
                reason = f"pc in a {mapping.perms} mapping"
        if reason:
            found.append(
                Phenotype(
                    name="pc-not-executable",
                    evidence={"pc": _hex(pc), "fault_address": _hex(fault), "reason": reason},
                )
            )
    stack = ctx.facts.stack
    if signal.name == "EXCEPTION_STACK_OVERFLOW" or (
        signal.name in _ACCESS
        and stack is not None
        and fault is not None
        and _fault_is_real(signal)
        # HotSpot's guard zones sit at the low end of the stack it reports; a
        # fault there (or just below) and under sp is a thread running out of stack.
        and stack[0] - 0x10000 <= fault < min(stack[1], stack[0] + 0x400000)
        and (ctx.sp is None or fault <= ctx.sp)
    ):
        found.append(
            Phenotype(
                name="stack-overflow",
                evidence={
                    "fault_address": _hex(fault),
                    "sp": _hex(ctx.sp),
                    "stack": [_hex(stack[0]), _hex(stack[1])] if stack else None,
                },
            )
        )
    top = ctx.top
    rsp = ctx.registers.get("rsp")
    if (
        ctx.arch == "x86_64"
        and top is not None
        and top.kind in "CV"
        and top.symbol_offset == 0
        and rsp is not None
        and rsp % 16 != 8
    ):
        found.append(
            Phenotype(
                name="stack-misaligned",
                evidence={
                    "rsp": _hex(rsp),
                    "rsp_mod_16": rsp % 16,
                    "function": top.symbol,
                    "expected": "rsp % 16 == 8 at function entry (System V ABI)",
                },
            )
        )
    return found


def phenotypes(ctx: CrashContext) -> list[Phenotype]:
    """Every case definition that fires on this crash, JVM ones first."""
    found: list[Phenotype] = []
    if ctx.facts.oom:
        found.append(_native_oom(ctx))
    elif ctx.error_kind == "internal":
        found.append(_internal_error(ctx))
    if ctx.top is not None and ctx.error_kind in ("signal", None):
        for phenotype in (_native_library(ctx, ctx.top), _jit_code(ctx.top)):
            if phenotype is not None:
                found.append(phenotype)
    found.extend(_native(ctx))
    return found
