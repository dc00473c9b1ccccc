"""The facts an hs_err log yields, as the scanner reads them.

:class:`HsErrFacts` is the raw, capped record that
:class:`~coreepi.parse.jvm.scan.HsErrScanner` fills line by line and
:mod:`coreepi.parse.jvm.build` turns into a CrashReport; :class:`HsErrLimits`
are the caps that keep it small whatever the size of the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coreepi.parse.jvm.lines import ErrorLine, RawFrame, SigInfo, ThreadLine

__all__ = ["HsErrFacts", "HsErrLimits"]


@dataclass(frozen=True)
class HsErrLimits:
    """Caps that bound memory whatever the log: characters kept per line,
    frames per stack, mappings, listed threads, lines of a multi-line block,
    VM flags and warnings."""

    max_line_chars: int = 4096
    max_frames: int = 512
    max_mappings: int = 8192
    max_threads: int = 2048
    max_block_lines: int = 64
    max_flags: int = 1024
    max_warnings: int = 64


@dataclass
class HsErrFacts:
    """Raw facts read off one log; :mod:`coreepi.parse.jvm.build` turns
    them into a CrashReport. Strings are as printed (stripped)."""

    evidence: int = 0  # lines that only HotSpot prints; 0 means "not an hs_err log"
    lines: int = 0
    error: ErrorLine | None = None
    error_line: str | None = None
    error_message: list[str] = field(default_factory=list)  # lines under Internal Error
    oom: bool = False
    oom_message: str | None = None
    jre_version: str | None = None
    java_vm: str | None = None
    problematic: RawFrame | None = None
    problematic_text: str | None = None
    bug_url: str | None = None
    outside_vm: bool = False
    current: ThreadLine | None = None
    thread_is_native: bool = False
    stack: tuple[int, int, int | None] | None = None  # low, high, sp
    native_frames: list[RawFrame] = field(default_factory=list)
    java_frames: list[RawFrame] = field(default_factory=list)
    frames_dropped: int = 0  # beyond the cap, or HotSpot's own "...<more frames>..."
    processed_thread: tuple[int, list[RawFrame]] | None = (
        None  # GC/VM crash: JavaThread being walked
    )
    siginfo: SigInfo | None = None
    registers: dict[str, int] = field(default_factory=dict)
    instructions_pc: int | None = None
    instructions: dict[int, bytes] = field(default_factory=dict)
    compile_task: str | None = None
    threads: list[ThreadLine] = field(default_factory=list)
    mappings: list[tuple[int, int | None, str | None, int, str | None]] = field(
        default_factory=list
    )
    mappings_dropped: int = 0
    threads_dropped: int = 0
    flags_dropped: int = 0
    jvm_args: str | None = None
    java_command: str | None = None
    command_line: str | None = None
    launcher: str | None = None
    flags: list[str] = field(default_factory=list)
    vm_state: str | None = None
    host_line: str | None = None
    summary_time: str | None = None
    os_lines: list[str] = field(default_factory=list)
    uname: str | None = None
    system: dict[str, str] = field(default_factory=dict)  # libc, rlimit, load average, uptime …
    container: dict[str, str] = field(default_factory=dict)
    virtualization: str | None = None
    cpu_total: str | None = None
    cpuinfo: dict[str, str] = field(default_factory=dict)
    memory: str | None = None
    vm_info: str | None = None
    time: str | None = None
    timezone: str | None = None
    elapsed: str | None = None
    end_seen: bool = False
    second_log_at: int | None = None
    reporting_errors: list[str] = field(default_factory=list)
    long_lines: int = 0
