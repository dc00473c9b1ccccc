"""Which programs the ptrace supervisor must not keep traced: those that
ptrace themselves or their children, since a process has one tracer only.

- AddressSanitizer / LeakSanitizer programs: LSan's leak check at exit stops
  the world by PTRACE_ATTACH from a helper thread (compiler-rt
  ``sanitizer_stoptheworld_linux_libcdep.cpp``); with the process already
  traced the attach fails and LSan aborts ("LeakSanitizer has encountered a
  fatal error ... does not work under ptrace"), turning a green test red and
  hiding a real leak report. ASan reports its own crashes, so nothing is lost
  by leaving it alone.
- Debuggers and tracers (gdb, strace, ...): their inferior's PTRACE_TRACEME or
  their PTRACE_ATTACH fails the same way.

The check runs at each exec of the traced tree and reads the new program's
dynamic section (DT_NEEDED: gcc links ``libasan.so``), else looks for the
LSan runtime's own fatal-error message in the file (a runtime linked in
statically: clang's default, gcc ``-static-libasan``), plus ``LD_PRELOAD`` of
its environment; results are cached per file identity.
"""

from __future__ import annotations

import mmap
import os
import re
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

__all__ = ["ptrace_user"]

_SANITIZER_LIBS = re.compile(rb"lib(asan|lsan)\.so|libclang_rt\.(asan|lsan)")
# printed by LSan's StopTheWorld failure: only the LSan runtime carries it (not gcc, not gdb)
_RUNTIME_MARK = b"LeakSanitizer has encountered a fatal error"
# Debuggers and tracers, by program name without a version suffix (gdb-12, lldb-server-15).
_TRACERS = frozenset({"gdb", "gdbserver", "gdb-multiarch", "strace", "ltrace", "rr", "lldb",
                      "lldb-server", "vgdb"})
_cache: dict[tuple[int, int, int], str | None] = {}


def _sanitized_binary(path: str) -> bool:
    """True when the ELF file at ``path`` needs or contains the ASan/LSan
    runtime. A file that is not ELF (or unreadable) is not."""
    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags("DT_NEEDED"):
                        if _SANITIZER_LIBS.search(tag.needed.encode()):
                            return True
            # a runtime linked in (clang's default, gcc -static-libasan): its own message
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return data.find(_RUNTIME_MARK) >= 0
    except (OSError, ELFError, ValueError):
        return False


def _preloaded(pid: int) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(entry.startswith(b"LD_PRELOAD=") and _SANITIZER_LIBS.search(entry)
               for entry in environ.split(b"\0"))


def ptrace_user(pid: int) -> str | None:
    """Why the program ``pid`` has just exec'd must run untraced (one phrase:
    "it uses AddressSanitizer (LeakSanitizer needs ptrace)" / "gdb uses
    ptrace itself"), or None. Never raises: a process gone meanwhile is None."""
    proc_exe = f"/proc/{pid}/exe"  # opened through /proc: right even in another mount namespace
    try:
        exe = os.readlink(proc_exe)
        st = os.stat(proc_exe)
    except OSError:
        return None
    name = re.sub(r"-[0-9][0-9.]*$", "", os.path.basename(exe))
    if name in _TRACERS:
        return f"{name} uses ptrace itself"
    if _preloaded(pid):
        return "it preloads a sanitizer runtime (LeakSanitizer needs ptrace)"
    key = (st.st_dev, st.st_ino, st.st_mtime_ns)
    if key not in _cache:
        _cache[key] = ("it uses AddressSanitizer (LeakSanitizer needs ptrace)"
                       if _sanitized_binary(proc_exe) else None)
    return _cache[key]
