"""One pass over the lines of an hs_err log, keeping what a report needs.

:class:`HsErrScanner` is fed blocks of whole lines (:meth:`~HsErrScanner.feed_text`;
:meth:`~HsErrScanner.feed` is one line) and collects raw facts in
:class:`HsErrFacts`; it never holds more than the capped facts (see
:class:`HsErrLimits`), so a log of any size costs bounded memory. Lines are
recognised by their own shape wherever they appear, not by the section
they sit in, because real logs are often fragments: cut after the header,
started in the middle of the THREAD section, or pasted without banners.
So sections are not skipped by name: a block's lines that no handler could
act on are skipped, found by one regexp over the block (:func:`_wake`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, Final

from coreepi.parse.jvm.facts import HsErrFacts, HsErrLimits
from coreepi.parse.jvm.lines import (
    RawFrame,
    ThreadLine,
    parse_error_line,
    parse_frame,
    parse_mapping,
    parse_registers,
    parse_siginfo,
    parse_thread_line,
)

__all__ = ["HsErrScanner"]

_BANNER: Final = re.compile(r"^-{5,}\s+((?:[A-Z] ?)+?)\s*-{4,}\s*$")
_MARKERS: Final = (
    "# A fatal error has been detected by the Java Runtime Environment",
    "# There is insufficient memory for the Java Runtime Environment",
    "# An unexpected error has been detected by",
)
_STACK: Final = re.compile(
    r"^Stack: \[(0x[0-9a-fA-F]{1,16}),\s*(0x[0-9a-fA-F]{1,16})\](?:,\s*sp=(0x[0-9a-fA-F]{1,16}))?"
)
_PROCESSED: Final = re.compile(
    r"^JavaThread 0x[0-9a-fA-F]{1,16} \(nid = (\d+)\) was being processed"
)
_INSN_LINE: Final = re.compile(r"^(0x[0-9a-fA-F]{1,16}):\s+((?:[0-9a-fA-F]{2}\s*)+)$")
_INSN_PC: Final = re.compile(r"pc=(0x[0-9a-fA-F]{1,16})")
_CPU_TOTAL: Final = re.compile(r"^CPU:\s*total\s+\d+")
_CPUINFO_LINE: Final = re.compile(r"^([A-Za-z][A-Za-z0-9 _]*?)\s*:\s?(.*)$")
_FLAG_LINE: Final = re.compile(r"^\s*\w+\s+(\w+)\s+:?=\s+(.*?)\s+\{")
_KV_LINE: Final = re.compile(r"^(\w[\w ]*?)\s*:\s*(.*)$")
_REPORTING_ERROR: Final = re.compile(
    r"^\[(?:error|timeout) occurred during error reporting \(([^)]*)\)"
)
_CPUINFO_KEYS: Final = frozenset({
    "vendor_id", "cpu family", "model", "model name", "stepping", "microcode", "cpu", "revision",
    "machine", "platform", "CPU implementer", "CPU architecture", "CPU variant", "CPU part",
    "CPU revision", "Hardware", "vendor", "hypervisor vendor",
})  # fmt: skip
_SYSTEM_KEYS: Final = (
    ("OS uptime:", "os_uptime"), ("libc:", "libc"), ("rlimit", "rlimit"),
    ("load average:", "load_average"), ("Steal ticks", "steal_ticks"),
)  # fmt: skip
# One-line facts: (line prefix, HsErrFacts attribute, characters kept); the first one wins.
_VALUE_KEYS: Final = (
    ("VM state:", "vm_state", 200), ("Host:", "host_line", 500), ("Time:", "summary_time", 200),
    ("uname:", "uname", 500), ("Memory:", "memory", 500), ("timezone:", "timezone", 100),
    ("time:", "time", 200), ("vm_info:", "vm_info", 1000), ("elapsed time:", "elapsed", 200),
)  # fmt: skip

Mode = Callable[[str], bool]

# Lines that start a fact or a block, by prefix: (line prefix, HsErrScanner
# method, its arguments after the line); the first prefix that fits wins.
_HANDLERS: Final = (
    ("Current thread", "_current_thread", ()), ("Stack: [", "_stack", ()),
    ("Native frames:", "_native_frames", ()), ("Java frames:", "_java_frames", ()),
    ("JavaThread 0x", "_processed_thread", ()), ("siginfo:", "_siginfo", ()),
    ("Registers:", "_registers", ()), ("Instructions:", "_instructions", ()),
    ("Current CompileTask:", "_compile_task", ()), ("Java Threads:", "_thread_list", ()),
    ("Other Threads:", "_thread_list", ()), ("Dynamic libraries:", "_dynamic_libraries", ()),
    ("jvm_args:", "_vm_args", ()), ("java_command:", "_vm_args", ()),
    ("Launcher Type:", "_vm_args", ()), ("Command Line:", "_vm_args", ()),
    ("[Global flags]", "_global_flags", ()), ("OS:", "_os", ()),
    ("container (cgroup) information:", "_container", ()), ("CPU:", "_cpu_total", ()),
    ("CPU Model and flags from /proc/cpuinfo:", "_cpuinfo", ()),
    ("/proc/cpuinfo:", "_cpuinfo", ()), ("END.", "_end", ()),
    ("...<more frames>", "_more_frames", ()),
    *((key, "_value_line", (len(key), attr, cap)) for key, attr, cap in _VALUE_KEYS),
    *((key, "_system_line", (name,)) for key, name in _SYSTEM_KEYS),
)  # fmt: skip
_BY_INITIAL: Final[dict[str, list[tuple[str, str, tuple[Any, ...]]]]] = {}
for _handler in _HANDLERS:
    _BY_INITIAL.setdefault(_handler[0][0], []).append(_handler)


def _is_key(line: str) -> bool:
    """Does ``line`` start a fact or a block of its own (ends a free-form block)?"""
    return any(line.startswith(key) for key, _, _ in _BY_INITIAL.get(line[:1], ()))


@functools.cache
def _wake(max_line_chars: int, virtualization: bool) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Regexps for the lines :meth:`HsErrScanner.feed` may act on outside a
    block: ``(match at a line's start, search from the newline before a
    line)``. A superset, never less: every handler's prefix, a header
    (``#``), banner (``-----``) or reporting-error line, a line over
    ``max_line_chars`` (counted and cut), and where ``virtualization``
    (the text holds the phrase) any line with "virtualization detected".
    Any other line can only be counted: it is skipped in C."""
    prefixes = [key for key, _, _ in _HANDLERS]
    prefixes += ["#", "-----", "[error occurred", "[timeout occurred"]
    branches = [re.escape(key) for key in sorted(prefixes)]
    branches.append(f"[^\\n]{{{max_line_chars + 1}}}")
    if virtualization:
        branches.append("[^\\n]*virtualization detected")
    line = "(?:" + "|".join(branches) + ")"
    return re.compile(line), re.compile("\\n" + line)


class _Collect:
    """A block whose every line parses to one item (frames, listed threads,
    libraries, flags); it ends at the first line that does not. Items
    beyond ``cap`` are only counted, in ``facts.<dropped>``."""

    __slots__ = ("cap", "dropped", "facts", "into", "max_chars", "parse")

    def __init__(
        self,
        facts: HsErrFacts,
        max_chars: int,
        parse: Callable[[str], Any],
        into: list[Any],
        cap: int,
        dropped: str,
    ) -> None:
        self.facts, self.max_chars, self.parse = facts, max_chars, parse
        self.into, self.cap, self.dropped = into, cap, dropped

    def __call__(self, line: str) -> bool:
        """Take one line (cut, right-stripped, not a header or banner line):
        False when it is not an item, which ends the block."""
        item = self.parse(line) if line else None
        if item is None:
            return False
        if len(self.into) < self.cap:
            self.into.append(item)
        else:
            setattr(self.facts, self.dropped, getattr(self.facts, self.dropped) + 1)
        return True

    def run(self, text: str, pos: int) -> int:
        """Take the lines of ``text`` from ``pos`` (a line's start) as
        :meth:`HsErrScanner.feed` would, while they are items, in one loop;
        return the start of the first line left to ``feed`` (an over-long,
        header, banner or blank line, or one that is not an item: ``feed``
        decides), or -1 when every line was taken."""
        facts = self.facts
        while True:
            end = text.find("\n", pos)
            line = text[pos:end] if end >= 0 else text[pos:]
            if not line or len(line) > self.max_chars or line.startswith(("#", "-----")):
                return pos
            if not self(line.rstrip("\r\n\x00 ")):
                return pos
            facts.lines += 1
            if end < 0:
                return -1
            pos = end + 1


class HsErrScanner:
    """Feed lines (without newline) to :meth:`feed`; read :attr:`facts`.
    :attr:`done` turns True when a second log starts (only the first is
    parsed). Never raises on any text."""

    def __init__(self, limits: HsErrLimits | None = None) -> None:
        self.limits = limits or HsErrLimits()
        self.facts = HsErrFacts()
        self.done = False
        self._mode: Mode | None = None
        self._block_lines = 0
        self._expect_problematic = False
        self._in_header = False
        self._after_error = False
        self._banner_seen = False
        self._java_frames_other = False

    # --- dispatch ------------------------------------------------------------------

    def feed_text(self, text: str) -> None:
        """Take the lines of ``text`` (``text.split("\\n")``: no newline
        at its end, ``""`` is one empty line) as :meth:`feed` would, one by
        one. Outside a block, a line that can do nothing but be counted (it
        starts no fact, header, banner or block and is not over-long; see
        :func:`_wake`) is not looked at in Python: one regexp search finds
        the next line that may matter, and the lines in between are only
        counted. Most of a log is such lines (heap, events, meminfo, the
        other processors of cpuinfo, environment, signal handlers). The
        lines of a list (frames, threads, libraries, flags) are taken by
        :meth:`_Collect.run` without a call per line."""
        facts = self.facts
        at_start, after_newline = _wake(
            self.limits.max_line_chars, "virtualization detected" in text
        )
        feed = self.feed
        pos = 0
        while not self.done:
            mode = self._mode
            if type(mode) is _Collect:
                pos = mode.run(text, pos)
                if pos < 0:
                    return
            elif mode is None and not (pos == 0 and at_start.match(text)):
                found = after_newline.search(text, pos - 1 if pos else 0)
                start = found.start() + 1 if found else len(text)
                skipped = text.count("\n", pos, start) + (found is None)
                if skipped:
                    facts.lines += skipped
                    self._in_header = False  # as any line that is not a header line does
                if found is None:
                    return
                pos = start
            end = text.find("\n", pos)
            if end < 0:
                feed(text[pos:])
                return
            feed(text[pos:end])
            pos = end + 1

    def feed(self, line: str) -> None:
        """Take one line of the log."""
        if self.done:
            return
        facts = self.facts
        facts.lines += 1
        if len(line) > self.limits.max_line_chars:
            line = line[: self.limits.max_line_chars]
            facts.long_lines += 1
        line = line.rstrip("\r\n\x00 ")
        if self._mode is not None:
            # A header or banner line ends any block, whatever the block's own rule.
            if not line.startswith(("#", "-----")) and self._mode(line):
                return
            self._mode = None
        if not line:
            self._in_header = False
            return
        first = line[0]
        if first == "#":
            self._header(line)
            return
        self._in_header = False
        if first == "-" and _BANNER.match(line):
            self._banner_seen = True
            facts.evidence += 1
            return
        if first == "[" and (err := _REPORTING_ERROR.match(line)):
            self._warn_reporting(err[1])
            return
        for key, handler, arguments in _BY_INITIAL.get(first, ()):
            if line.startswith(key):
                getattr(self, handler)(line, *arguments)
                return
        if line.endswith("virtualization detected") and facts.virtualization is None:
            facts.virtualization = line.strip()

    def _value_line(self, line: str, start: int, attr: str, cap: int) -> None:
        """A one-line fact: ``line[start:]`` into ``facts.<attr>``, the first one wins."""
        if getattr(self.facts, attr) is None:
            setattr(self.facts, attr, line[start:].strip()[:cap])
            if attr == "vm_info":
                self.facts.evidence += 1
        # JDK 6-8 logs end with "elapsed time:", JDK 9+ with "END."
        self.facts.end_seen = self.facts.end_seen or attr == "elapsed"

    def _system_line(self, line: str, name: str) -> None:
        self.facts.system.setdefault(name, line.split(":", 1)[-1].strip()[:500])

    def _enter(self, mode: Mode) -> None:
        self._mode = mode
        self._block_lines = 0

    def _warn_reporting(self, step: str) -> None:
        if (
            len(self.facts.reporting_errors) < self.limits.max_warnings
            and step not in self.facts.reporting_errors
        ):
            self.facts.reporting_errors.append(step[:200])

    # --- the header ----------------------------------------------------------------

    def _header(self, line: str) -> None:
        facts = self.facts
        if line.startswith(_MARKERS):
            if self._banner_seen and (facts.error is not None or facts.oom):
                # HotSpot appends to an existing file only by accident (pid reuse);
                # the second log is another crash, which this report must not mix in.
                facts.second_log_at = facts.lines
                self.done = True
                return
            facts.evidence += 1
            self._in_header = True
            if "insufficient memory" in line:
                facts.oom = True
            return
        body = line[1:].strip()
        if self._expect_problematic:
            self._expect_problematic = False
            facts.problematic_text = body[:1000]
            facts.problematic = parse_frame(body)
            return
        if facts.error is None and (error := parse_error_line(line)):
            facts.error, facts.error_line = error, body[:500]
            facts.evidence += 1
            facts.oom = facts.oom or error.kind == "oom"
            self._after_error = error.kind == "internal"
            return
        if self._after_error:
            if (
                body
                and len(facts.error_message) < 8
                and not body.startswith(("JRE version", "Java VM"))
            ):
                facts.error_message.append(body[:500])
                return
            self._after_error = False
        if body.startswith("JRE version:"):
            facts.jre_version = facts.jre_version or body[len("JRE version:") :].strip()[:300]
            facts.evidence += 1
        elif body.startswith("Java VM:"):
            facts.java_vm = facts.java_vm or body[len("Java VM:") :].strip()[:300]
            facts.evidence += 1
        elif body.startswith("Problematic frame:"):
            self._expect_problematic = True
        elif body.startswith(("http://", "https://")):
            facts.bug_url = facts.bug_url or body.split()[0][:300]
        elif body.startswith("The crash happened outside the Java Virtual Machine"):
            facts.outside_vm = True
        elif (
            facts.oom
            and facts.oom_message is None
            and self._in_header
            and body
            and not line.startswith("#  ")
        ):
            # First line under "There is insufficient memory…": what could not be had.
            if not body.startswith(("Possible", "This output file")):
                facts.oom_message = body[:500]
        elif body.startswith("java.lang.OutOfMemoryError") and facts.oom_message is None:
            facts.oom, facts.oom_message = True, body[:500]

    # --- THREAD section ------------------------------------------------------------

    def _current_thread(self, line: str) -> None:
        facts = self.facts
        if facts.current is None and not facts.thread_is_native:
            facts.thread_is_native = line.startswith("Current thread is native thread")
            facts.current = None if facts.thread_is_native else parse_thread_line(line)
            if facts.thread_is_native or facts.current is not None:
                facts.evidence += 1

    def _stack(self, line: str) -> None:
        match = _STACK.match(line)
        if match and self.facts.stack is None:
            self.facts.stack = (
                int(match[1], 16),
                int(match[2], 16),
                int(match[3], 16) if match[3] else None,
            )

    def _native_frames(self, line: str) -> None:
        self.facts.evidence += 1
        if not self.facts.native_frames:
            self._enter(self._frames_mode(self.facts.native_frames))

    def _java_frames(self, line: str) -> None:
        self.facts.evidence += 1
        if self._java_frames_other and self.facts.processed_thread is not None:
            self._enter(self._frames_mode(self.facts.processed_thread[1]))
        elif not self.facts.java_frames:
            self._enter(self._frames_mode(self.facts.java_frames))
        self._java_frames_other = False

    def _processed_thread(self, line: str) -> None:
        match = _PROCESSED.match(line)
        if match and self.facts.processed_thread is None:
            self.facts.processed_thread = (int(match[1]), [])
            self._java_frames_other = True

    def _collect(
        self, parse: Callable[[str], Any], into: list[Any], cap: int, dropped: str
    ) -> _Collect:
        return _Collect(self.facts, self.limits.max_line_chars, parse, into, cap, dropped)

    def _frames_mode(self, into: list[RawFrame]) -> _Collect:
        return self._collect(parse_frame, into, self.limits.max_frames, "frames_dropped")

    def _more_frames(self, line: str) -> None:
        self.facts.frames_dropped += 1

    def _siginfo(self, line: str) -> None:
        if self.facts.siginfo is None:
            self.facts.siginfo = parse_siginfo(line)

    def _registers(self, line: str) -> None:
        if self.facts.registers:
            return
        arch_hint = "aarch64" if self.facts.java_vm and "aarch64" in self.facts.java_vm else None

        def consume(line: str) -> bool:
            if not line:
                return not self.facts.registers  # a blank line right after the title
            found = parse_registers(line, arch_hint)
            if not found:
                return False
            for name, value in found.items():
                if len(self.facts.registers) < 256:
                    self.facts.registers.setdefault(name, value)
            return True

        self._enter(consume)

    def _instructions(self, line: str) -> None:
        match = _INSN_PC.search(line)
        if match is None or self.facts.instructions_pc is not None:
            return
        self.facts.instructions_pc = int(match[1], 16)

        def consume(line: str) -> bool:
            dump = _INSN_LINE.match(line)
            if dump is None or len(self.facts.instructions) >= 64:
                return False
            self.facts.instructions[int(dump[1], 16)] = bytes.fromhex(dump[2].replace(" ", ""))
            return True

        self._enter(consume)

    def _compile_task(self, line: str) -> None:
        def consume(line: str) -> bool:
            if line and self.facts.compile_task is None:
                self.facts.compile_task = " ".join(line.split())[:500]
            return False

        self._enter(consume)

    # --- PROCESS section -----------------------------------------------------------

    def _thread_list(self, line: str) -> None:
        def parse(line: str) -> ThreadLine | None:
            return (
                parse_thread_line(line)
                if line[:2] in ("=>", "  ") or line.startswith("0x")
                else None
            )

        self._enter(
            self._collect(parse, self.facts.threads, self.limits.max_threads, "threads_dropped")
        )

    def _dynamic_libraries(self, line: str) -> None:
        if not self.facts.mappings:
            self._enter(
                self._collect(
                    parse_mapping, self.facts.mappings, self.limits.max_mappings, "mappings_dropped"
                )
            )

    def _vm_args(self, line: str) -> None:
        key, _, value = line.partition(":")
        value = value.strip()[: self.limits.max_line_chars]
        facts = self.facts
        if key == "jvm_args":
            facts.jvm_args = facts.jvm_args or value
            facts.evidence += 1
        elif key == "java_command":
            facts.java_command = facts.java_command or value
        elif key == "Launcher Type":
            facts.launcher = facts.launcher or value
        else:
            facts.command_line = facts.command_line or value

    def _global_flags(self, line: str) -> None:
        def parse(line: str) -> str | None:
            match = _FLAG_LINE.match(line)
            return f"{match[1]}={match[2]}" if match else None

        self._enter(self._collect(parse, self.facts.flags, self.limits.max_flags, "flags_dropped"))

    # --- SUMMARY and SYSTEM sections -----------------------------------------------

    def _os(self, line: str) -> None:
        facts = self.facts
        if facts.os_lines:
            return  # the first OS: block wins (logs pasted together repeat it)
        rest = line[len("OS:") :]
        if "uname:" in rest:  # JDK 8 on macOS: "OS:Bsduname:Darwin 19.6.0 …"
            rest, _, uname = rest.partition("uname:")
            facts.uname = facts.uname or uname.strip()[:500]
        facts.os_lines.append(rest.strip()[:500])

        def consume(line: str) -> bool:
            if not line or self._block_lines >= self.limits.max_block_lines:
                return False
            if _is_key(line):
                return False
            self._block_lines += 1
            facts.os_lines.append(line.strip()[:500])
            return True

        self._enter(consume)

    def _container(self, line: str) -> None:
        def consume(line: str) -> bool:
            match = _KV_LINE.match(line)
            if (
                match is None
                or self._block_lines >= self.limits.max_block_lines
                or _is_key(line)
            ):
                return False
            self._block_lines += 1
            self.facts.container.setdefault(match[1].strip(), match[2].strip()[:200])
            return True

        self._enter(consume)

    def _cpu_total(self, line: str) -> None:
        if self.facts.cpu_total is None and _CPU_TOTAL.match(line):
            self.facts.cpu_total = line[len("CPU:") :].strip()[:2000]
            self.facts.evidence += 1

    def _cpuinfo(self, line: str) -> None:
        cpuinfo = self.facts.cpuinfo

        def consume(line: str) -> bool:
            # Only the first processor's block is kept: the rest repeat it.
            if cpuinfo.get("#done") or self._block_lines >= self.limits.max_block_lines:
                return False
            match = _CPUINFO_LINE.match(line)
            if match is None:
                if cpuinfo:
                    cpuinfo["#done"] = "1"
                return False
            self._block_lines += 1
            key = match[1].strip()
            if key in _CPUINFO_KEYS:
                cpuinfo.setdefault(key, match[2].strip()[:300])
            return True

        if not cpuinfo:
            self._enter(consume)

    def _end(self, line: str) -> None:
        self.facts.end_seen = self.facts.end_seen or line.strip() == "END."
