"""Line grammars of a HotSpot fatal error log (hs_err_pid*.log).

Pure functions, one per kind of line HotSpot prints, from JDK 6 to JDK 25;
each takes one line (no newline) and returns parsed fields or None. No
state, no I/O: :mod:`coreepi.parse.jvm.scan` decides which grammar
applies where. The shapes follow HotSpot's printers (``vmError.cpp``,
``frame.cpp`` ``print_on_error``, ``os_<os>.cpp`` ``print_siginfo`` /
``print_context`` / ``print_os_info``) and were checked against the real
logs of ``shared/testdata/jvm-hs_err-krashpad``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ErrorLine",
    "RawFrame",
    "SigInfo",
    "ThreadLine",
    "VM_ERROR_TYPES",
    "parse_error_line",
    "parse_frame",
    "parse_mapping",
    "parse_registers",
    "parse_siginfo",
    "parse_thread_line",
]

_HEX: Final = r"0x[0-9a-fA-F]{1,16}"
_TID: Final = rf"(?P<tid>{_HEX}|\d+)"

# --- the error line of the header ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorLine:
    """The header's error line. ``kind``: ``signal`` (a POSIX signal or a
    Windows exception: ``name`` ``SIGSEGV`` / ``EXCEPTION_ACCESS_VIOLATION``,
    ``code`` its number), ``internal`` (``Internal Error (file:line)``) or
    ``oom`` (``Out of Memory Error (file:line)``; ``location`` holds the
    part in parentheses, a pseudo-signal by its name: ``OOM_MMAP_ERROR``
    for ``0xe0000002``, see :data:`VM_ERROR_TYPES`)."""

    kind: str
    name: str | None = None
    code: int | None = None
    pc: int | None = None
    pid: int | None = None
    tid: str | None = None
    location: str | None = None


_SIGNAL_LINE: Final = re.compile(
    rf"^#\s+(?P<name>[A-Za-z_][A-Za-z0-9_ ]{{0,60}}?)\s+\((?P<code>{_HEX})\)"
    rf"\s+at pc=(?P<pc>{_HEX}),"
    rf"\s*pid=(?P<pid>\d+),\s*tid={_TID}"
)
# HotSpot's pseudo-signals: the error ids of errors that are not signals
# (src/hotspot/share/utilities/debug.hpp, enum VMErrorType, JDK 8-25).
# vmError.cpp prints the id in hex where it has no file:line to print:
# "Out of Memory Error (0xe0000002)".
VM_ERROR_TYPES: Final = {
    "0xe0000000": "INTERNAL_ERROR",
    "0xe0000001": "OOM_MALLOC_ERROR",
    "0xe0000002": "OOM_MMAP_ERROR",
    "0xe0000003": "OOM_MPROTECT_ERROR",
    "0xe0000004": "OOM_JAVA_HEAP_FATAL",
    "0xe0000005": "OOM_HOTSPOT_ARENA",
}
_INTERNAL_LINE: Final = re.compile(
    rf"^#\s+(?P<what>Internal Error|Out of Memory Error)\s+\((?P<loc>[^)]*)\)"
    rf"(?:,\s*pid=(?P<pid>\d+)(?:,\s*tid={_TID})?)?"
)


def parse_error_line(line: str) -> ErrorLine | None:
    """``#  SIGSEGV (0xb) at pc=0x…, pid=1, tid=2`` and its Windows, internal
    error and out-of-memory forms; None for any other line."""
    match = _SIGNAL_LINE.match(line)
    if match:
        return ErrorLine(
            kind="signal",
            name=match["name"].strip(),
            code=int(match["code"], 16),
            pc=int(match["pc"], 16),
            pid=int(match["pid"]),
            tid=match["tid"],
        )
    match = _INTERNAL_LINE.match(line)
    if match:
        location = match["loc"].strip()
        return ErrorLine(
            kind="internal" if match["what"] == "Internal Error" else "oom",
            location=VM_ERROR_TYPES.get(location.lower(), location),
            pid=int(match["pid"]) if match["pid"] else None,
            tid=match["tid"],
        )
    return None


# --- frames ------------------------------------------------------------------------


@dataclass(slots=True)
class RawFrame:
    """One frame line as HotSpot printed it (``frame::print_on_error``).

    ``kind``: ``C`` native code, ``V`` VM code (libjvm), ``J`` compiled Java,
    ``A`` AOT-compiled Java, ``j`` interpreted Java, ``v`` VM-generated stub.
    Native kinds carry ``module`` (the basename HotSpot prints),
    ``module_offset``, ``symbol`` (demangled, as printed, without
    ``+0x…``) and ``symbol_offset``; Java kinds carry ``method`` (class,
    name and descriptor); ``pc`` is set only where the line prints an
    absolute address (``J … @ 0x…``, ``C  0x…``, JDK 17+ stub lines).
    """

    kind: str
    text: str
    module: str | None = None
    module_offset: int | None = None
    symbol: str | None = None
    symbol_offset: int | None = None
    pc: int | None = None
    method: str | None = None
    compiler: str | None = None
    compile_id: int | None = None
    osr: bool = False
    bci: int | None = None
    code_offset: int | None = None
    java_module: str | None = None
    stub: str | None = None
    source_file: str | None = None
    source_line: int | None = None


_NATIVE_FRAME: Final = re.compile(
    r"^(?P<kind>[CV])\s+\[(?P<module>.+?)\+0x(?P<off>[0-9a-fA-F]{1,16})\]"
    r"(?:\s+(?P<symbol>.*\S))?\s*$"  # the symbol up to its last non-space: no lazy scan
)
# A symbol's tail: "func+0xOFF (file.cpp:123)", both parts optional.
_SYMBOL_SOURCE: Final = re.compile(r"\((?P<file>[^():\s]+):(?P<line>\d+)\)")
_SYMBOL_OFFSET: Final = re.compile(r"[0-9a-fA-F]{1,16}")
_BARE_FRAME: Final = re.compile(r"^C\s+0x(?P<pc>[0-9a-fA-F]{1,16})(?:\s+(?P<symbol>.*\S))?\s*$")
_COMPILED_FRAME: Final = re.compile(
    r"^(?P<kind>[JA])\s+(?:(?P<cid>\d+)(?P<osr>%)?\s+)?"
    r"(?:(?P<comp>[Cc][12]|[Jj][Vv][Mm][Cc][Ii])\s+)?"
    r"(?P<method>[^\s(]+\([^\s)]*\)\S*)(?:\s+(?P<jmod>[^\s()@]+@[^\s()]*))?"
    r"(?:\s+\((?P<size>\d+) bytes\))?(?:\s+@\s+0x(?P<pc>[0-9a-fA-F]{1,16}))?"
    r"(?:\s+\[0x[0-9a-fA-F]{1,16}\+0x(?P<coff>[0-9a-fA-F]{1,16})\])?"
)
_INTERPRETED_FRAME: Final = re.compile(
    r"^j\s+(?P<method>[^\s(]+\([^\s)]*\)[^\s+]*)(?:\+(?P<bci>\d+))?(?:\s+(?P<jmod>\S+@\S*))?"
)
_STUB_FRAME: Final = re.compile(r"^v\s+~?(?P<stub>.+?)(?:\s+0x(?P<pc>[0-9a-fA-F]{1,16}))?\s*$")


def _symbol_tail(symbol: str) -> tuple[int, str | None, re.Match[str] | None]:
    """``(end of the function's name, offset hex, source match)`` of a
    one-line symbol ``func+0xOFF (file:line)``: the same split as the regexp
    ``^(?P<func>.*?)(?:\\+0x(?P<off>HEX{1,16}))?(?:\\s+\\(FILE:LINE\\))?\\s*$``
    (the shortest name), found from the end with ``str`` methods: the lazy
    regexp tried its tail at every character, ≈ 0.1 µs each."""
    end = len(symbol.rstrip())
    start = end
    source = None
    if symbol.endswith(")", 0, end):
        paren = symbol.rfind("(", 0, end)
        run = paren
        while run > 0 and symbol[run - 1].isspace():
            run -= 1
        if run < paren and (found := _SYMBOL_SOURCE.fullmatch(symbol, paren, end)):
            source, start = found, run
    plus = symbol.rfind("+0x", 0, start)
    if plus >= 0 and _SYMBOL_OFFSET.fullmatch(symbol, plus + 3, start):
        return plus, symbol[plus + 3 : start], source
    return start, None, source


def _split_symbol(frame: RawFrame, symbol: str | None) -> None:
    if not symbol:
        return
    end, offset, source = _symbol_tail(symbol)
    if not end:
        frame.symbol = symbol
        return
    frame.symbol = symbol[:end].strip()
    frame.symbol_offset = int(offset, 16) if offset else None
    if source:
        frame.source_file, frame.source_line = source["file"], int(source["line"])


def parse_frame(line: str) -> RawFrame | None:
    """One line of ``Native frames:`` / ``Java frames:`` / ``Problematic
    frame:`` (without the ``# ``); None when the line is not a frame."""
    text = line.strip()
    if len(text) < 3:
        return None
    kind = text[0]
    if kind in "CV":
        match = _NATIVE_FRAME.match(text)
        if match:
            frame = RawFrame(
                kind=kind,
                text=text,
                module=match["module"].strip(),
                module_offset=int(match["off"], 16),
            )
            _split_symbol(frame, match["symbol"])
            return frame
        match = _BARE_FRAME.match(text) if kind == "C" else None
        if match:
            frame = RawFrame(kind="C", text=text, pc=int(match["pc"], 16))
            _split_symbol(frame, match["symbol"])
            return frame
        return None
    if kind in "JA":
        match = _COMPILED_FRAME.match(text)
        if not match:
            return None
        comp = match["comp"]
        return RawFrame(
            kind=kind,
            text=text,
            method=match["method"],
            java_module=match["jmod"],
            compile_id=int(match["cid"]) if match["cid"] else None,
            osr=bool(match["osr"]),
            compiler=comp.upper() if comp else None,
            pc=int(match["pc"], 16) if match["pc"] else None,
            code_offset=int(match["coff"], 16) if match["coff"] else None,
        )
    if kind == "j":
        match = _INTERPRETED_FRAME.match(text)
        if not match:
            return None
        return RawFrame(
            kind="j",
            text=text,
            method=match["method"],
            java_module=match["jmod"],
            bci=int(match["bci"]) if match["bci"] else None,
        )
    if kind == "v":
        match = _STUB_FRAME.match(text)
        if not match:
            return None
        return RawFrame(
            kind="v",
            text=text,
            stub=match["stub"].strip(),
            pc=int(match["pc"], 16) if match["pc"] else None,
        )
    return None


# --- the current thread ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThreadLine:
    """``Current thread (0x…):  JavaThread "main" [_thread_in_vm, id=23,
    stack(0x…,0x…)]`` and the lines of the ``Java Threads:`` / ``Other
    Threads:`` lists. ``thread_type``: HotSpot's class (``JavaThread``,
    ``VMThread``, ``GCTaskThread`` …); ``tid``: the OS thread id."""

    thread_type: str | None
    name: str | None
    state: str | None
    tid: int | None
    stack_low: int | None
    stack_high: int | None
    current: bool = False


_THREAD_BODY: Final = re.compile(
    r"(?:\(exited\)\s+)?(?P<type>[A-Za-z_]\w*)"
    r"(?:\s+\"(?P<name>.*)\"(?=\s+(?:daemon\s+)?\[|\s*$))?(?P<rest>.*)$"
)
_CURRENT_THREAD: Final = re.compile(rf"^Current thread \({_HEX}\):\s+(?P<body>.*)$")
_LISTED_THREAD: Final = re.compile(rf"^(?P<cur>=>)?\s*{_HEX}\s+(?P<body>.*)$")
_STATE: Final = re.compile(r"\[(_thread_\w+)")
# "\bid=(\d+)" with the literal first, so the search skips to each "id=" in C
_THREAD_ID: Final = re.compile(r"id=(?<=\bid=)(\d+)")
_STACK_BOUNDS: Final = re.compile(rf"stack(?:\(|:\s*)(?P<low>{_HEX}),\s*(?P<high>{_HEX})")


def _thread_body(body: str, current: bool) -> ThreadLine | None:
    match = _THREAD_BODY.match(body.strip())
    if match is None:
        return None
    rest = match["rest"]
    state = _STATE.search(rest)
    tid = _THREAD_ID.search(rest)
    stack = _STACK_BOUNDS.search(rest)
    return ThreadLine(
        thread_type=match["type"],
        name=match["name"],
        state=state[1] if state else None,
        tid=int(tid[1]) if tid else None,
        stack_low=int(stack["low"], 16) if stack else None,
        stack_high=int(stack["high"], 16) if stack else None,
        current=current,
    )


def parse_thread_line(line: str) -> ThreadLine | None:
    """A ``Current thread (0x…):`` line or one entry of a thread list."""
    match = _CURRENT_THREAD.match(line)
    if match:
        return _thread_body(match["body"], current=True)
    match = _LISTED_THREAD.match(line)
    if match:
        return _thread_body(match["body"], current=bool(match["cur"]))
    return None


# --- siginfo -----------------------------------------------------------------------


@dataclass(slots=True)
class SigInfo:
    """The ``siginfo:`` line: POSIX fields, or the Windows exception record
    (``access``: 0 read, 1 write, 8 execute, as in ExceptionInformation[0])."""

    signo: int | None = None
    name: str | None = None
    si_code: int | None = None
    si_code_name: str | None = None
    fault_address: int | None = None
    errno: int | None = None
    sender_pid: int | None = None
    sender_uid: int | None = None
    exception_code: int | None = None
    access: int | None = None


_SI_SIGNO: Final = re.compile(r"si_signo[:=]\s*(?P<num>\d+)?\s*(?:\(?(?P<name>SIG\w+)\)?)?")
_SI_CODE: Final = re.compile(r"si_code[:=]\s*(?P<code>-?\d+)(?:\s*\((?P<name>\w+)\))?")
_SI_ADDR: Final = re.compile(rf"si_addr[:=]\s*(?P<addr>{_HEX})")
_SI_ERRNO: Final = re.compile(r"si_errno[:=]\s*(\d+)")
_SI_PID: Final = re.compile(r"(?:sent from pid|si_pid)[:=]?\s*(\d+)")
_SI_UID: Final = re.compile(r"(?:\(uid|si_uid)[:=]?\s*(\d+)")
_WIN_CODE: Final = re.compile(rf"(?:ExceptionCode=|EXCEPTION_\w+\s+\()(?P<code>{_HEX})")
_WIN_ACCESS: Final = re.compile(rf"(?P<how>reading|writing) address (?P<addr>{_HEX})")
_WIN_INFO: Final = re.compile(rf"ExceptionInformation=(?P<access>{_HEX})\s+(?P<addr>{_HEX})")
_WIN_DEP: Final = re.compile(rf"execution prevention violation at address (?P<addr>{_HEX})")


def parse_siginfo(line: str) -> SigInfo:
    """Fields of a ``siginfo:`` line (every field optional)."""
    info = SigInfo()
    if match := _SI_SIGNO.search(line):
        info.signo = int(match["num"]) if match["num"] else None
        info.name = match["name"]
    if match := _SI_CODE.search(line):
        info.si_code, info.si_code_name = int(match["code"]), match["name"]
    if match := _SI_ADDR.search(line):
        info.fault_address = int(match["addr"], 16)
    if match := _SI_ERRNO.search(line):
        info.errno = int(match[1])
    if match := _SI_PID.search(line):
        info.sender_pid = int(match[1])
    if match := _SI_UID.search(line):
        info.sender_uid = int(match[1])
    if match := _WIN_CODE.search(line):
        info.exception_code = int(match["code"], 16)
    if match := _WIN_ACCESS.search(line):
        info.access = 0 if match["how"] == "reading" else 1
        info.fault_address = int(match["addr"], 16)
    elif match := _WIN_INFO.search(line):
        info.access, info.fault_address = int(match["access"], 16), int(match["addr"], 16)
    elif match := _WIN_DEP.search(line):
        info.access, info.fault_address = 8, int(match["addr"], 16)
    return info


# --- registers ---------------------------------------------------------------------

_REGISTER: Final = re.compile(rf"\b(?P<name>[A-Za-z][A-Za-z0-9]{{0,7}})\s*=\s*(?P<value>{_HEX})\b")
_U64: Final = (1 << 64) - 1


def parse_registers(line: str, arch: str | None) -> dict[str, int]:
    """Registers of one ``Registers:`` line (``RAX=0x…, RBX=0x…``, ppc64's
    ``pc =0x…  lr =0x…``, aarch64's ``R0=0x…``), by their gdb names:
    lower case, and aarch64's ``rN`` as ``xN``."""
    found: dict[str, int] = {}
    for match in _REGISTER.finditer(line):
        value = int(match["value"], 16)
        if value > _U64:
            continue
        name = match["name"].lower()
        if arch == "aarch64" and name[:1] == "r" and name[1:].isdigit():
            name = "x" + name[1:]
        found[name] = value
    return found


# --- Dynamic libraries -------------------------------------------------------------

_MAPS_LINE: Final = re.compile(
    r"^(?P<start>[0-9a-fA-F]{1,16})-(?P<end>[0-9a-fA-F]{1,16})\s+(?P<perms>[rwxsp-]{4})"
    r"\s+(?P<off>[0-9a-fA-F]{1,16})"
    r"\s+\S+\s+\d+\s*(?P<path>.*)$"
)
_RANGE_LINE: Final = re.compile(rf"^(?P<start>{_HEX})\s+-\s+(?P<end>{_HEX})\s+(?P<path>\S.*)$")
_BASE_LINE: Final = re.compile(rf"^(?P<start>{_HEX})\s+(?P<path>[^\s-].*)$")


def parse_mapping(line: str) -> tuple[int, int | None, str | None, int, str | None] | None:
    """One ``Dynamic libraries:`` line as ``(start, end, perms, offset,
    path)``: Linux prints /proc/self/maps lines, Windows ``0xSTART - 0xEND
    path``, Solaris / macOS / AIX ``0xBASE path`` (end unknown: None)."""
    match = _MAPS_LINE.match(line)
    if match:
        path = match["path"].strip() or None
        return (
            int(match["start"], 16),
            int(match["end"], 16),
            match["perms"],
            int(match["off"], 16),
            path,
        )
    match = _RANGE_LINE.match(line)
    if match:
        return int(match["start"], 16), int(match["end"], 16), None, 0, match["path"].strip()
    match = _BASE_LINE.match(line)
    if match:
        return int(match["start"], 16), None, None, 0, match["path"].strip()
    return None
