"""The JVM rule list of the signature generator: hs_err crashes, Socorro-style.

A signature is the crash's normalized stack key: the problematic frame and
the next significant frames of the crashing thread, joined with `` | ``.
Normalization removes what changes from run to run without changing the
bug, so the same bug lands in one bucket:

* JIT details (compile id, C1/C2, code size, ``@ 0x…`` addresses, the
  nmethod offset), the method descriptor and the bytecode index of Java
  frames; generated class numbers (``GeneratedMethodAccessor12373``,
  ``$$Lambda$123/0x…``, ``$Proxy57``) become ``<N>``;
* C++ argument lists, return types, ``[clone .constprop.N]`` suffixes;
  template arguments collapse to ``<T>`` (as Socorro's siggen does);
* glibc's CPU-specific variants (``__memcpy_ssse3_back``,
  ``__memmove_avx_unaligned_erms``) become the function they implement,
  so one bug does not split by CPU model — which would fake a hardware
  signal in the epidemiology;
* frames without a symbol become ``module+0xoffset`` (stable for one
  build; the spelling of ``docs/signatures.md``); random temporary library
  names (JNA's ``jna123….tmp``) lose their random part; a pc outside any
  module becomes ``@0x…`` only when it is near NULL, else ``<unknown
  code>`` (a JIT or heap address changes with every run).

Error-reporting frames (``VMError::report_and_die`` …) and thread plumbing
(``JavaCalls::call_helper``, ``start_thread`` …) are skipped; copy and
allocation helpers (``memcpy``, ``malloc``, arraycopy stubs) are *prefix*
frames: kept, but the next frame is added too. Native out-of-memory and
internal errors start with ``OOM | mmap`` / ``Internal Error (file:line)``.

The rules read what the hs_err parser recorded: ``runtime.frames`` (HotSpot's
frame kinds and what each line printed; the first ``len(crashed thread's
frames)`` are the crashing thread's stack, the rest the Java frames printed
separately when the native walk stopped short), ``artifact.jvm`` (error
kind, line, location, message) and the ``jvm-native-oom`` phenotype (its
allocator names the head). The C++ normalization here is HotSpot's own
(``Foo<T>::bar``, ``(anonymous namespace)``), kept apart from the native
rule list's :mod:`coreepi.analyze.signature.normalize` so JVM signatures
stay what they were.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from coreepi.analyze.signature.rules import SignatureRule, SignatureState
from coreepi.model.report import JvmErrorInfo, RuntimeFrame

__all__ = [
    "JVM_RULES",
    "SIGNATURE_DEPTH",
    "JvmErrorHead",
    "JvmFrames",
    "normalize_cpp",
    "normalize_frame",
]

SIGNATURE_DEPTH: Final = 3  # significant frames; prefix frames come on top
_MAX_PARTS: Final = 8
_MAX_TRAIL: Final = 64
_NEAR_NULL: Final = 0x10000

_GENERATED: Final = (
    (re.compile(r"(Generated(?:Serialization)?(?:Method|Constructor)Accessor)\d+"), r"\1<N>"),
    (re.compile(r"\$\$Lambda\$\d+(?:/(?:0x)?[0-9a-fA-F]+)?"), "$$Lambda$<N>"),
    (re.compile(r"\$\$Lambda/(?:0x)?[0-9a-fA-F]+"), "$$Lambda"),
    (re.compile(r"\$Proxy\d+"), "$Proxy<N>"),
    (
        re.compile(r"\$\$(EnhancerBy\w+?|FastClassBy\w+?|SpringCGLIB)\$\$(?:[0-9a-fA-F]+|\d+)"),
        r"$$\1$$<N>",
    ),
    (re.compile(r"/0x[0-9a-fA-F]+"), ""),  # hidden classes
)
_TEMP_MODULE: Final = (
    (re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"), "<UUID>"),
    (re.compile(r"\d{8,}"), "<N>"),
)
_GLIBC_VARIANT: Final = re.compile(
    r"^__(memcpy|memmove|mempcpy|memset|memcmp|memchr|memrchr|rawmemchr|bcmp|bzero|strlen|strnlen|"
    r"strcmp|strncmp|strcpy|strncpy|stpcpy|stpncpy|strchr|strchrnul|strrchr|strcat|strncat|strstr|"
    r"strcasecmp|strncasecmp|wcslen|wcsnlen|wmemset|wmemcmp|wcscmp|wcschr)_[a-z0-9_]+$"
)
# GCC's clone suffixes, ABI tags and lambda numbers change with compiler
# settings, not with the code (as in coreepi.analyze.signature.normalize).
_CLONE: Final = re.compile(r"\s*\[clone [^\]]*\]|\[abi:[^\]]*\]")
_CLONE_SUFFIX: Final = re.compile(r"(\.(constprop|isra|part|cold|lto_priv|localalias)(\.\d+)?)+$")
_LAMBDA: Final = re.compile(r"\{lambda\((?:[^(){}]|\([^(){}]*\))*\)#\d+\}")

# Frames that say nothing about the bug: HotSpot's error reporting and signal
# handling, and the thread plumbing under every Java call.
_IRRELEVANT: Final = frozenset({
    "VMError::report_and_die", "VMError::report", "VMError::report_java_out_of_memory",
    "report_vm_error", "report_vm_out_of_memory", "report_should_not_reach_here",
    "report_should_not_call", "report_unimplemented", "report_fatal", "report_vm_status_error",
    "report_untested", "os::abort", "os::die", "JVM_handle_linux_signal",
    "JVM_handle_solaris_signal", "JVM_handle_bsd_signal", "JVM_handle_aix_signal",
    "JVM_handle_windows_exception", "signalHandler", "javaSignalHandler", "crash_handler",
    "__sighndlr", "call_user_handler", "sigacthandler", "__restore_rt", "_sigtramp",
    "StubRoutines::call_stub", "JavaCalls::call_helper", "JavaCalls::call_virtual",
    "JavaCalls::call", "JavaCalls::call_special", "JavaCalls::call_static",
    "os::os_exception_wrapper", "jni_invoke_static", "jni_invoke_nonstatic", "thread_entry",
    "JavaThread::thread_main_inner", "JavaThread::run", "java_start", "thread_native_entry",
    "Thread::call_run", "start_thread", "clone", "__clone", "__clone3", "_lwp_start",
    "thread_start", "_pthread_start", "_pthread_body", "BaseThreadInitThunk", "RtlUserThreadStart",
    "JavaMain", "ThreadJavaMain", "java.lang.Thread.run",
})  # fmt: skip
_IRRELEVANT_PREFIXES: Final = ("jni_Call", "VMError::", "JavaCalls::")
# Frames that are where the crash surfaced but rarely why: keep, and go on.
_PREFIX: Final = frozenset({
    "abort", "raise", "gsignal", "__GI_raise", "__GI_abort", "__pthread_kill_implementation",
    "__pthread_kill_internal", "pthread_kill", "__assert_fail", "__assert_fail_base",
    "__libc_message", "__fortify_fail", "__chk_fail", "__stack_chk_fail", "malloc_printerr",
    "_int_malloc", "_int_free", "malloc_consolidate", "malloc", "free", "cfree", "realloc",
    "calloc", "operator new", "operator delete", "os::malloc", "os::free", "os::realloc",
    "AllocateHeap", "ReallocateHeap", "FreeHeap", "memcpy", "memmove", "mempcpy", "memset",
    "memcmp", "memchr", "bcmp", "strlen", "strnlen", "strcmp", "strncmp", "strcpy", "strncpy",
    "stpcpy", "strchr", "strrchr", "strcat", "strstr", "wcslen",
})  # fmt: skip
# For a native out-of-memory error, the allocation path is the error itself.
_OOM_IRRELEVANT: Final = frozenset({
    "os::pd_commit_memory", "os::commit_memory", "os::pd_commit_memory_or_exit",
    "os::commit_memory_or_exit", "os::Linux::commit_memory_impl", "os::Bsd::commit_memory_impl",
    "os::Aix::commit_memory_impl", "os::pd_reserve_memory", "os::reserve_memory",
    "ChunkPool::allocate", "Chunk::operator new", "Arena::grow", "Arena::Amalloc", "os::malloc",
    "AllocateHeap", "ReallocateHeap", "os::realloc", "os::pd_create_stack_guard_pages",
})  # fmt: skip


def _collapse_templates(name: str) -> str:
    out, depth = [], 0
    for char in name:
        if char == "<":
            if depth == 0:
                out.append("<T>")
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out) if depth == 0 else name


def normalize_cpp(symbol: str) -> str:
    """``void Foo<int>::bar(int) const [clone .part.1]`` -> ``Foo<T>::bar``."""
    text = _LAMBDA.sub("{lambda}", _CLONE.sub("", symbol)).strip()
    text = text.replace("(anonymous namespace)", "{anonymous}")
    is_operator = "operator" in text
    depth = 0
    cut = len(text)
    for pos, char in enumerate(text):
        if char == "<" and not is_operator:
            depth += 1
        elif char == ">" and depth and not is_operator:
            depth -= 1
        elif char == "(" and depth == 0 and pos > 0:
            if text.endswith("operator", 0, pos):  # operator()(args)
                continue
            cut = pos
            break
    name = text[:cut].strip()
    # Drop a return type ("void ", Solaris' glued "JNIHandleBlock*"): the last
    # top-level token is the qualified name, unless it belongs to "operator …".
    tokens: list[str] = []
    current: list[str] = []
    depth = 0
    for char in name:
        if char in "<(" and not is_operator:
            depth += 1
        elif char in ">)" and depth and not is_operator:
            depth -= 1
        if depth == 0 and (char == " " or (char in "*&" and not is_operator)):
            if current:
                tokens.append("".join(current))
            current = []
            continue
        current.append(char)
    if current:
        tokens.append("".join(current))
    if not tokens:
        return name
    if len(tokens) >= 2 and tokens[-2].endswith("operator"):
        result = f"{tokens[-2]} {tokens[-1]}"
    elif is_operator and (op := re.search(r"\S*operator.*$", name)):
        result = op[0]
    else:
        result = tokens[-1]
    result = _CLONE_SUFFIX.sub("", result if is_operator else _collapse_templates(result))
    return result.replace("{anonymous}", "(anonymous namespace)")


def _normalize_java(method: str) -> tuple[str, list[str]]:
    """A Java method without descriptor, generated class numbers as ``<N>``."""
    rules = ["java-method"]
    name = method.split("(", 1)[0]
    for pattern, replacement in _GENERATED:
        new = pattern.sub(replacement, name)
        if new != name:
            rules.append("generated-class")
            name = new
    return name, rules


def _normalize_module(module: str) -> str:
    """A module name without the random part of a temporary file's name."""
    for pattern, replacement in _TEMP_MODULE:
        module = pattern.sub(replacement, module)
    return module


Resolver = Callable[[int], "tuple[str, int] | None"]


def normalize_frame(
    frame: RuntimeFrame, resolve: Resolver | None = None
) -> tuple[str | None, list[str]]:
    """The signature part of one frame (None: nothing to sign) and the names
    of the normalizations applied. ``resolve(pc)``: the module name and
    offset holding ``pc``, or None."""
    if frame.kind is not None and frame.kind in "JAj" and frame.method:
        return _normalize_java(frame.method)
    if frame.kind == "v" and frame.stub:
        return frame.stub.lstrip("~").strip(), ["stub"]
    if frame.symbol:
        name = normalize_cpp(frame.symbol)
        rules = ["native-function"]
        if match := _GLIBC_VARIANT.match(name):
            name, rules = match[1], rules + ["glibc-ifunc-variant"]
        return name, rules
    if frame.module is not None and frame.module_offset is not None:
        return f"{_normalize_module(frame.module)}+0x{frame.module_offset:x}", ["module-offset"]
    if frame.pc is not None:
        if frame.pc < _NEAR_NULL:
            return f"@0x{frame.pc:x}", ["near-null-pc"]
        resolved = resolve(frame.pc) if resolve else None
        if resolved:
            return f"{_normalize_module(resolved[0])}+0x{resolved[1]:x}", ["module-offset"]
        return "<unknown code>", ["pc-outside-modules"]
    return None, []


def _irrelevant(name: str, error_kind: str | None) -> bool:
    if name in _IRRELEVANT or name.startswith(_IRRELEVANT_PREFIXES):
        return True
    return error_kind == "oom" and name in _OOM_IRRELEVANT


def _is_prefix(name: str, frame: RuntimeFrame) -> bool:
    return frame.kind == "v" or name in _PREFIX


def _basename(path: str) -> str:
    return re.split(r"[/\\]", path)[-1]


def _error(state: SignatureState) -> JvmErrorInfo | None:
    artifact = state.report.artifact
    return artifact.jvm if artifact is not None else None


class JvmErrorHead(SignatureRule):
    """A native out-of-memory (``OOM | mmap``, the allocator read by the
    ``jvm-native-oom`` phenotype) or an internal error (``Internal Error
    (file.cpp:12)``) heads the signature."""

    name = "error-kind"

    def predicate(self, state: SignatureState) -> bool:
        info = _error(state)
        return info is not None and (
            info.error_kind == "oom" or (info.error_kind == "internal" and info.error_line is not None)
        )

    def action(self, state: SignatureState) -> None:
        info = _error(state)
        assert info is not None
        if info.error_kind == "oom":
            oom = next((p for p in state.report.phenotypes if p.name == "jvm-native-oom"), None)
            allocator = oom.evidence.get("allocator") if oom else None
            state.head = f"OOM | {allocator}" if allocator else "OOM"
            source = info.message or info.error_line
        else:
            state.head = f"Internal Error ({_basename(info.location or '?')})"
            source = info.error_line
        state.record(self.name, (source or "")[:500], state.head)


class JvmFrames(SignatureRule):
    """The crashing thread's frames, then the separately printed Java frames:
    each normalized (:func:`normalize_frame`); irrelevant ones skipped, prefix
    ones kept with the next; up to :data:`SIGNATURE_DEPTH` significant frames
    (and ``_MAX_PARTS`` in all), joined with `` | `` after the head. No
    signature (empty) when neither a frame nor a head is left."""

    name = "jvm-frames"

    def action(self, state: SignatureState) -> None:
        report = state.report
        crashed = report.crashed_thread
        depth = len(crashed.frames) if crashed is not None else 0
        info = _error(state)
        error_kind = info.error_kind if info is not None else None
        candidates: list[tuple[int | None, RuntimeFrame]] = [
            (i if i < depth else None, f) for i, f in enumerate(report.runtime.frames)
        ]

        def resolve(pc: int) -> tuple[str, int] | None:
            return next(
                ((_basename(m.path), pc - m.base) for m in report.modules if m.base <= pc < m.end),
                None,
            )

        parts: list[str] = []
        significant = 0
        for index, frame in candidates:
            name, rules = normalize_frame(frame, resolve)
            if name is None:
                continue
            text = (frame.text or "")[:500]
            if _irrelevant(name, error_kind):
                if len(state.trail) < _MAX_TRAIL:
                    state.record("skip-irrelevant-frame", text, "")
                continue
            prefix = _is_prefix(name, frame)
            if prefix:
                rules = [*rules, "prefix-frame"]
            if len(state.trail) < _MAX_TRAIL:
                state.record("+".join(rules), text, name)
            parts.append(name)
            if index is not None:
                state.used.append(index)
            if not prefix:
                significant += 1
            if significant >= SIGNATURE_DEPTH or len(parts) >= _MAX_PARTS:
                break
        if parts or state.head:
            state.signature = " | ".join(([state.head] if state.head else []) + parts)


# Order matters: the head's trail step comes first, as it heads the signature.
JVM_RULES: Final[tuple[type[SignatureRule], ...]] = (JvmErrorHead, JvmFrames)
