"""The few ptrace(2) requests the supervisor needs, through ctypes (no C extension).

Request numbers and option bits are those of ``include/uapi/linux/ptrace.h``
(identical on x86-64 and arm64); ``NT_PRSTATUS``/``NT_PRFPREG`` are the
regset numbers of ``include/uapi/linux/elf.h``. Every call raises
:class:`OSError` with the errno on failure. Every ptrace call must come from
the thread that attached (the tracer is single-threaded by design).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = [
    "EVENT_CLONE",
    "EVENT_EXEC",
    "EVENT_FORK",
    "EVENT_STOP",
    "EVENT_VFORK",
    "NT_PRFPREG",
    "NT_PRSTATUS",
    "TRACE_OPTIONS",
    "WALL",
    "cont",
    "detach",
    "get_event_msg",
    "get_regset",
    "get_siginfo",
    "interrupt",
    "listen",
    "seize",
]

PTRACE_CONT = 7
PTRACE_DETACH = 17
PTRACE_GETEVENTMSG = 0x4201
PTRACE_GETSIGINFO = 0x4202
PTRACE_GETREGSET = 0x4204
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_LISTEN = 0x4208

# Follow the whole tree: every fork/vfork/clone child is attached (seized, as
# its parent) before it runs its first instruction; exec is reported so the
# tracer never mistakes exec's SIGTRAP for a real one.
PTRACE_O_TRACEFORK = 0x02
PTRACE_O_TRACEVFORK = 0x04
PTRACE_O_TRACECLONE = 0x08
PTRACE_O_TRACEEXEC = 0x10
TRACE_OPTIONS = PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC

EVENT_FORK, EVENT_VFORK, EVENT_CLONE, EVENT_EXEC = 1, 2, 3, 4
EVENT_STOP = 128

NT_PRSTATUS = 1
NT_PRFPREG = 2
WALL = 0x40000000  # __WALL: wait for threads and non-SIGCHLD children too
SIGINFO_BYTES = 128

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_ptrace = _libc.ptrace
_ptrace.restype = ctypes.c_long
_ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _call(request: int, tid: int, addr: int | None, data: int | None) -> int:
    ctypes.set_errno(0)
    result = int(_ptrace(request, tid, addr, data))
    if result == -1 and (err := ctypes.get_errno()):
        raise OSError(err, f"ptrace({request:#x}, {tid}): {os.strerror(err)}")
    return result


def seize(pid: int, options: int = TRACE_OPTIONS) -> None:
    """Attach to ``pid`` without stopping it (PTRACE_SEIZE), with ``options``."""
    _call(PTRACE_SEIZE, pid, None, options)


def cont(tid: int, sig: int = 0) -> None:
    """Resume a stopped tracee, delivering ``sig`` (0: none)."""
    _call(PTRACE_CONT, tid, None, sig)


def listen(tid: int) -> None:
    """Leave a seized tracee in its group-stop but keep getting its events."""
    _call(PTRACE_LISTEN, tid, None, None)


def interrupt(tid: int) -> None:
    """Ask a seized, running tracee to stop (it reports PTRACE_EVENT_STOP)."""
    _call(PTRACE_INTERRUPT, tid, None, None)


def detach(tid: int, sig: int = 0) -> None:
    """Detach from a stopped tracee, delivering ``sig`` (0: none)."""
    _call(PTRACE_DETACH, tid, None, sig)


def get_event_msg(tid: int) -> int:
    """The event message of the last ptrace event (the new pid for fork/clone)."""
    value = ctypes.c_ulong()
    _call(PTRACE_GETEVENTMSG, tid, None, ctypes.addressof(value))
    return int(value.value)


def get_siginfo(tid: int) -> bytes:
    """The 128-byte ``siginfo_t`` of the signal that stopped ``tid``."""
    buf = ctypes.create_string_buffer(SIGINFO_BYTES)
    _call(PTRACE_GETSIGINFO, tid, None, ctypes.addressof(buf))
    return buf.raw


def get_regset(tid: int, note_type: int, size: int = 4096) -> bytes:
    """Register set ``note_type`` (NT_PRSTATUS: ``elf_gregset_t``; NT_PRFPREG:
    the FP registers) of a stopped tracee, exactly as many bytes as the kernel
    filled (``size`` is the buffer's upper bound)."""
    buf = ctypes.create_string_buffer(size)
    iov = _Iovec(ctypes.addressof(buf), size)
    _call(PTRACE_GETREGSET, tid, note_type, ctypes.addressof(iov))
    return buf.raw[: iov.len]
