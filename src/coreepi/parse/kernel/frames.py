"""Stack-frame rules for kernel crash reports: which frame is the guilty one.

A kernel report's title names one function (``general protection fault in
ext4_fill_super``). That function is found by walking the report's call
trace from the top and skipping the kernel's generic helpers (sanitizer
runtime, ``dump_stack``, locking primitives, ``memcpy``, list helpers …): a
crash *inside* ``memcpy`` is a bug in whoever called ``memcpy``.

Source of the conventions: syzkaller's Linux reporter
(``google/syzkaller``, ``pkg/report/linux.go`` and ``pkg/report/report.go``,
Apache-2.0): its stack parameters (stack start keywords, frame regexps, skip
patterns, syscall-prefix stripping) and its two special frame extractors (for
stalls and for hung tasks). The rules are re-expressed here as data; the
matching code is coreepi's own.

Shapes
------
* A *raw frame* is a function name as printed (``__x64_sys_ioctl``).
* A *canonical frame* is the raw frame with the syscall-entry prefixes
  stripped (``ioctl``), which is what syzkaller puts in titles.
* :func:`extract_stack_frames` returns ``([GuiltyFrame, ...], ok)``: one
  guilty frame per stack trace the format asks for; ``ok`` is False when a
  trace had no usable frame (the report is then "corrupted").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from coreepi.parse.demangle import demangle_function

__all__ = [
    "PARSE_STACK_TRACE",
    "FRAME_LINE_RES",
    "GuiltyFrame",
    "STACK_START_RES",
    "RISCV_STACK_START",
    "STACK_START_LITERALS",
    "StackFormat",
    "expand",
    "extract_stack_frames",
    "fallback_frame",
    "find_all",
    "hung_task_frame",
    "matching_lines",
    "stall_frame",
]

# Placeholders used in the rule tables. They keep the tables readable: a
# kernel frame is "func+0x12/0x40" or "func.isra.0+0x12/0x40", optionally
# preceded by one or two "[<ffffffff81000000>]" program counters.
_PLACEHOLDERS: Final = {
    "{{ADDR}}": r"0x[0-9a-f]+",
    # "[]": a paste whose addresses were stripped (RHEL's kernel.kptr_restrict)
    "{{PC}}": r"\[\<?(?:0x)?[0-9a-f]*\>?\]",
    # ppc64 (ELF v1) prints dot-symbols: ".ibmvfc_scsi_done+0x334/0x3e0"
    "{{FUNC}}": r"\.?([a-zA-Z0-9_]+)(?:\.|\+)",
    # a symboliser's inlined frame: "crypto_more_spawns crypto/algapi.c:105 [inline]"
    "{{IFUNC}}": r"\.?([a-zA-Z0-9_]+)(?:\.|\+| [a-zA-Z0-9_/.\-]+:[0-9]+ \[inline\])",
    "{{SRC}}": r"([a-zA-Z0-9_/.\-]+\.[a-z]+:[0-9]+)",
}


def expand(pattern: str) -> re.Pattern[str]:
    """Compile a rule regexp after replacing the ``{{PC}}``-style placeholders."""
    for key, value in _PLACEHOLDERS.items():
        pattern = pattern.replace(key, value)
    return re.compile(pattern)


class _ParseStackTrace:
    """Sentinel part of a :class:`StackFormat`: "parse a call trace here"."""

    def __repr__(self) -> str:
        return "PARSE_STACK_TRACE"


PARSE_STACK_TRACE: Final = _ParseStackTrace()

StackPart = re.Pattern[str] | _ParseStackTrace
FrameExtractor = Callable[[Sequence[str]], tuple[str, int]]


@dataclass(frozen=True)
class StackFormat:
    """How to find the guilty frame(s) of one report format.

    ``parts`` are matched line by line from the title line on: a regexp part
    consumes lines until one matches (a capturing regexp also yields frames,
    e.g. the ``RIP:`` line); :data:`PARSE_STACK_TRACE` collects the frames of
    a call trace until the next stack keyword. ``parts2`` is tried when
    ``parts`` finds nothing. ``skip`` adds format-specific skip patterns;
    ``extractor`` replaces "first non-skipped frame" (stalls, hung tasks).
    """

    parts: tuple[StackPart, ...]
    parts2: tuple[StackPart, ...] = ()
    skip: tuple[str, ...] = ()
    extractor: FrameExtractor | None = None


@dataclass(frozen=True)
class GuiltyFrame:
    """The frame a title names: ``canonical`` (prefix-stripped) and ``raw``."""

    canonical: str
    raw: str


# Lines that start a stack trace in a report (x86 "Call Trace:", arm64
# "Call trace:", KASAN's allocation/free stacks, kmemleak's "backtrace:",
# KMSAN's origin stacks). "stack backtrace:" (lockdep) is deliberately not
# one of them.
RISCV_STACK_START: Final = re.compile(
    r"status: [0-9a-f]{16} badaddr: [0-9a-f]{16} cause: [0-9a-f]{16}"
)
STACK_START_RES: Final[tuple[re.Pattern[str], ...]] = (
    re.compile(r"Call (?:T|t)race"),
    re.compile(r"Allocated:"),
    re.compile(r"Allocated by task [0-9]+:"),
    re.compile(r"Freed:"),
    re.compile(r"Freed by task [0-9]+:"),
    re.compile(r"[^k] backtrace(?: \(crc [0-9a-fA-F]*\))?:"),
    re.compile(r"Backtrace:"),
    re.compile(r"Uninit was stored to memory at"),
    RISCV_STACK_START,
)

# One frame per line; the function name is captured. The second form is the
# 32-bit ARM unwinder ("[<c0100000>] (foo) from [<c0100100>] (bar+0x10/0x20)"),
# which names the caller too.
FRAME_LINE_RES: Final[tuple[re.Pattern[str], ...]] = (
    # ":dvb_core:func+0x…": x86-64 kernels before 2.6.2x named the module first
    expand(r"^ *(?:{{PC}} ){0,2}(?::[a-zA-Z0-9_]+:)?{{FUNC}}"),
    expand(r"^ *{{PC}} \(([a-zA-Z0-9_.]+)(?: \[[^\]]+\])?\) from {{PC}} \({{FUNC}}"),
)
# Frames the unwinder itself does not trust (powerpc's "(unreliable)"; x86's
# " ? " ones never match FRAME_LINE_RES): a timestamped log loses them in the
# scanner, an untimestamped one here.
_UNRELIABLE_LINE: Final = re.compile(r"\(unreliable\)\s*$")

# Fault-injection stacks get interleaved with real reports; seeing one while
# walking a trace makes the extracted frame untrustworthy.
_CORRUPTED_LINE: Final = expand(r"^( \[\<?(?:0x)?[0-9a-f]+\>?\])? should_fail(slab)?(\.[a-z0-9.]+)?\+0x")
# STACK_START_RES as one search (per line), confirming matching_lines' finds.
_ANY_STACK_START: Final = re.compile("|".join(f"(?:{r.pattern})" for r in STACK_START_RES))
# A literal each STACK_START_RES pattern holds, in the same order.
STACK_START_LITERALS: Final = ("Call ", "Allocated:", "Allocated by task ", "Freed:", "Freed by task ",
                               " backtrace", "Backtrace:", "Uninit was stored", " badaddr: ")


def find_all(text: str, literal: str) -> list[int]:
    """Every position of ``literal`` in ``text``, in order."""
    found: list[int] = []
    pos = text.find(literal)
    while pos >= 0:
        found.append(pos)
        pos = text.find(literal, pos + 1)
    return found


def matching_lines(text: str, literals: tuple[str, ...], confirm: re.Pattern[str] | None = None) -> set[int]:
    """0-based indices of the lines of ``text`` (split on ``"\\n"``) that
    hold one of ``literals`` and, if given, a match of ``confirm`` (searched
    in that line alone). Each literal is found by ``str.find`` over the
    whole text: Python's regexp engine scans an alternation ~100 times
    slower than one literal, and a search per line costs more in call
    overhead than the scan."""
    positions = [pos for literal in literals for pos in find_all(text, literal)]
    found: set[int] = set()
    index = last = 0
    for pos in sorted(positions):
        index += text.count("\n", last, pos)
        last = pos
        if index in found:
            continue
        if confirm is not None:
            end = text.find("\n", pos)
            line = text[text.rfind("\n", 0, pos) + 1: end if end >= 0 else len(text)]
            if confirm.search(line) is None:
                continue
        found.add(index)
    return found

# Generic helpers never named in a title (substring regexps, searched).
# Grouped by why they are skipped.
SKIP_FUNCTIONS: Final[tuple[str, ...]] = (
    # sanitizer runtimes and report printers
    "__sanitizer", "__asan", "kasan", "hwasan", "__msan", "kmsan",
    "kcsan_setup_watchpoint", "check_memory_region", "check_heap_object",
    "check_object", "read_word_at_a_time", "(read|write)_once_.*nocheck",
    "print_address_description", "panic", "invalid_op", "report_bug",
    "fixup_bug", "print_report", "print_usage_bug", "do_error",
    r"_trap$|do_trap", "show_stack", "dump_stack", "walk_stack",
    "dump_backtrace", "unwind_backtrace", "warn_slowpath", "warn_alloc", "warn_bogus", "__warn",
    # allocators and page cache
    "alloc_page", "k?v?(?:m|z|c)alloc", "krealloc", "kmem_cache",
    "allocate_slab", "__alloc_frozen_pages_noprof", "folio_(?:alloc|unlock)",
    "filemap_alloc_folio", "__filemap_get_folio", "find_or_create_page",
    "do_read_cache_folio", "read_cache_page", "pagecache_get_page",
    "grab_cache_page_write_begin", "slab_",
    # debug objects and lockdep
    "debug_object", "timer_is_static_object", "work_is_static_object",
    "__might_fault", "print_unlock", "imbalance_bug", "lockdep", "bh_enable",
    "bh_disable", "perf_trace", "lock_acquire", "lock_release", "lock_class",
    "mark_lock", "(reacquire|mark)_held_locks",
    # locking primitives
    "raw_spin_rq", "spin_lock", "spin_trylock", "spin_unlock", "read_lock",
    "read_trylock", "write_lock", "write_trylock", "read_unlock",
    "write_unlock", "^down$", "down_read", "down_write", "down_read_trylock",
    "down_write_trylock", "down_trylock", "up_read", "up_write", "^mutex_",
    "^__mutex_", "^rt_mutex_", "owner_on_cpu", "osq_lock", "osq_unlock",
    # atomics, bit ops, reference counts
    "atomic(64)?_(dec|inc|read|set|or|xor|and|add|sub|fetch|xchg|cmpxchg|try)",
    "(set|clear|change|test)_bit", "__wake_up", "^refcount_", "^kref_",
    "ref_tracker", "seqprop_assert",
    # string and memory helpers, user copies
    "memcpy", "memcmp", "memset", "memchr", "memmove", "memdup", "strcmp",
    "strncmp", "strcpy", "strlcpy", "strncpy", "strscpy", "strlen", "strstr",
    "strnstr", "strnlen", "strchr", "strdup", "strndup", "copy_to_user",
    "copy_from_user", "copy_to_iter", "copy_from_iter", "copy_page_to_iter",
    "copy_page_from_iter", "copy_folio_to_iter", "^copyin$", "^copyout$",
    "put_user", "get_user", "might_fault", "might_sleep",
    # containers
    "list_add", "list_del", "list_replace", "list_move", "list_splice",
    "^rb_", "^__rb_", "_indirect_thunk_",
    # printing
    "string", "pointer", "snprintf", "scnprintf", "kasprintf", "kvasprintf",
    "printk", "va_format", "dev_info", "dev_notice", "dev_warn", "dev_err",
    "dev_alert", "dev_crit", "dev_emerg", "program_check_exception",
    "program_check_common",
    # timers, work queues, waiting
    "del_timer", "flush_work", "__cancel_work_timer", "cancel_work_sync",
    "try_to_grab_pending", "flush_workqueue", "drain_workqueue",
    "destroy_workqueue", "queue_work", "finish_wait", "kthread_stop",
    # device model teardown
    "kobject_", "add_uevent_var", "get_device_parent", "device_add",
    "device_del", "device_unregister", "device_destroy", "device_release",
    "devres_release_all", "hwrng_unregister", "i2c_del_adapter",
    "__unregister_client", "device_for_each_child", "rollback_registered",
    "unregister_netdev", "sysfs_remove", "device_remove_file",
    "tty_unregister_device",
    # USB core
    "dummy_urb_enqueue", "usb_kill_urb", "usb_kill_anchored_urbs",
    "usb_control_msg", "usb_hcd_submit_urb", "usb_submit_urb",
    "^complete$", "wait_for_completion", "^kv?free$", "kfree_skb",
    # MMIO accessors
    "readb$", "readw$", "readl$", "readq$", "writeb$", "writew$", "writel$",
    "writeq$", "logic_in", "logic_out",
    # checksums and misc helpers
    r"^crc\d+", "crc_itu_t", "__might_resched", "assertfail", "^iput$",
    "^iput_final$", "^ihold$", "hex_dump_to_buffer", "print_hex_dump",
    "^klist_", "(trace|lockdep)_(hard|soft)irq", "^(un)?lock_page",
    "stack_trace_consume_entry", "arch_stack_walk", "stack_trace_save",
    "insert_work", "__queue_delayed_work", "queue_delayed_work_on",
    "ida_free",
    # arm64 fault entry path
    "do_(kernel|translation)_fault", "do_mem_abort", "el1_abort",
    "el1h_64_sync(?:_handler)?", "print_tainted",
    # page cache / xarray / misc
    "xas_(?:start|load|find)", "find_lock_entries",
    "truncate_inode_pages_range", "__phys_addr", "__fortify_report",
    "cleanup_srcu_struct", "rhashtable_lookup", "extract_(user|iter)_to_sg",
    "drop_nlink", "^get_taint$", "^put_device$", "lock_timer_base",
    "__timer_delete_sync", "sk_stop_timer_sync", "__mod_timer", "fast_dput",
    "dput",
    # buffer-head helper that WARNs about its caller's buffer (kernel 6.16+
    # titles name the file system, e.g. "WARNING in bfs_get_block")
    "^mark_buffer_dirty$",
)

# Syscall entry wrappers differ per architecture and kernel version
# (SyS_ioctl, __x64_sys_ioctl, __arm64_sys_ioctl …); stripping them makes the
# same bug get the same title everywhere. The shortest result wins.
STRIP_FRAME_PREFIXES: Final[tuple[str, ...]] = (
    "SYSC_", "SyS_", "sys_", "__x64_", "__ia32_", "__arm64_", "____sys_",
    "___sys_", "__sys_", "__se_", "__se_sys_", "__do_sys_", "compat_SYSC_",
    "compat_SyS_", "ksys_",
)

# Functions that dispatch work. In a stall or lockup the CPU loops somewhere
# above one of these; the frame just above the anchor (the syscall or the
# work callback) identifies the stall better than the random top frame.
_STALL_ANCHORS: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(p)
    for p in (
        "process_one_work", "do_syscall_", "do_fast_syscall_",
        "sysenter_dispatch", "tracesys_phase2", "el0_svc_handler",
        "invoke_syscall", "ret_fast_syscall", "netif_receive_skb",
        "do_softirq", "call_timer_fn", "_run_timers", "run_timer_softirq",
        "hrtimer_run", "run_ksoftirqd", "smpboot_thread_fn", "^kthread$",
        "start_secondary", "cpu_startup_entry", "ret_from_fork",
        # file_operations callbacks: the caller names the device / fs
        "vfs_write", "vfs_read", "vfs_iter_read", "vfs_iter_write",
        "do_iter_read", "do_iter_write", "call_read_iter", "call_write_iter",
        "new_sync_read", "new_sync_write", "vfs_ioctl", "ksys_ioctl",
        "compat_ioctl", "compat_sys_ioctl", "blkdev_driver_ioctl",
        "blkdev_ioctl", "^call_read_iter", "^call_write_iter",
        "do_iter_readv_writev", "^call_mmap", "mmap_region", "do_mmap",
        "do_dentry_open", "vfs_open",
        # socket operations: the caller names the protocol
        "^sock_sendmsg", "^sock_recvmsg", "^sock_release", "^__sock_release",
        "^setsockopt$", "kernel_setsockopt", "sock_common_setsockopt",
        "^listen$", "kernel_listen", "sk_common_release", "^sock_mmap",
        "^accept$", "kernel_accept", "^sock_do_ioctl", "^sock_ioctl",
        "^compat_sock_ioctl", "^nfnetlink_rcv_msg", "^rtnetlink_rcv_msg",
        "^netlink_dump", "^(sys_)?(socketpair|connect|ioctl)",
        # page fault entry points
        "__do_fault", "do_page_fault", "^page_fault$",
        # return-to-user work
        "__fput", "task_work_run", "exit_to_usermode", "smp_call_function",
        "tasklet_action", "tasklet_hi_action",
    )
)


# the anchors as one search per frame (a generator of searches cost more)
_ANY_STALL_ANCHOR: Final = re.compile("|".join(f"(?:{a.pattern})" for a in _STALL_ANCHORS))


def stall_frame(frames: Sequence[str]) -> tuple[str, int]:
    """Guilty frame of an RCU stall / soft lockup: the frame above the first
    dispatch anchor (``process_one_work``, ``do_syscall_64`` …). Returns
    ``("", -1)`` when no anchor is found."""
    if not frames:
        return "", -1
    prev, prev_idx = frames[0], 0
    for i, frame in enumerate(frames):
        if _ANY_STALL_ANCHOR.search(frame):
            if "smp_call_function" in frame:
                # The IPI sender is the identity; its callee varies.
                prev, prev_idx = "smp_call_function", i
            return prev, prev_idx
        prev, prev_idx = frame, i
    return "", -1


# Hung tasks show the victim, not the culprit: group the two big families
# (stuck behind rtnl_lock, stuck in an RCU grace period) under one name.
_HANG_ANCHORS: Final = (
    ("rtnl_lock", ""),
    ("synchronize_rcu", "synchronize_rcu"),
    ("synchronize_srcu", "synchronize_rcu"),
    ("synchronize_net", "synchronize_rcu"),
    ("synchronize_sched", "synchronize_rcu"),
)
_HANG_SKIP: Final = (
    "sched", "_lock", "_slowlock", "down", "rwsem", "completion", "kthread",
    "wait", "synchronize", "context_switch", "__switch_to",
    "cancel_delayed_work", "rcu_barrier",
)


# Where every kernel thread's stack starts: never the reason it hangs.
_THREAD_ENTRY: Final = re.compile(r"^(?:ret_from_fork(?:_asm)?|kernel_thread_helper|child_rip|kernel_thread)$")


def hung_task_frame(frames: Sequence[str]) -> tuple[str, int]:
    """Guilty frame of a hung task: an anchor family if present, else the
    first frame that is not scheduling / waiting / locking; a kernel thread
    that waits in its own loop (only thread entry code below ``kthread``)
    hangs in ``kthread``."""
    for i, frame in enumerate(frames):
        for anchor, replacement in _HANG_ANCHORS:
            if anchor in frame:
                return (replacement or frame), i
    last = -1
    for i, frame in enumerate(frames):
        if _THREAD_ENTRY.match(frame):
            return (frames[last], last) if last >= 0 else ("", -1)
        if not any(s in frame for s in _HANG_SKIP):
            return frame, i
        last = i
    return "", -1


def _strip_prefixes(frame: str) -> str:
    best = frame
    for prefix in STRIP_FRAME_PREFIXES:
        if frame.startswith(prefix) and len(frame) - len(prefix) < len(best):
            best = frame[len(prefix):]
    return best


@dataclass(slots=True)
class _Walk:
    """Mutable state of one walk over a report's lines."""

    lines: list[str]
    starts: set[int]  # indices of the lines that start a stack trace
    pos: int = 0
    raw_frames: list[str] = field(default_factory=list)
    results: list[GuiltyFrame] = field(default_factory=list)
    ok: bool = True

    def next_line(self) -> str | None:
        if self.pos >= len(self.lines):
            return None
        line = self.lines[self.pos]
        self.pos += 1
        return line


def _append_frames(walk: _Walk, match: re.Match[str] | None, skip: _SkipList) -> None:
    if match is None:
        return
    for frame in match.groups():
        if frame is None:
            continue
        frame = demangle_function(frame)
        if not skip.skips(frame):
            walk.raw_frames.append(frame)


_MAX_VERDICTS: Final = 1 << 16


@dataclass
class _SkipList:
    """A stack format's skip list (generic helpers never named in a title)
    as one regexp, with its verdicts kept per function name: the
    alternation (~150 patterns) costs tens of µs a search, and kernel
    function names form a bounded vocabulary that every report repeats
    (at most ``_MAX_VERDICTS`` kept)."""

    regex: re.Pattern[str]
    verdicts: dict[str, bool] = field(default_factory=dict)

    def skips(self, frame: str) -> bool:
        verdict = self.verdicts.get(frame)
        if verdict is None:
            if len(self.verdicts) >= _MAX_VERDICTS:
                self.verdicts.clear()
            verdict = self.verdicts[frame] = self.regex.search(frame) is not None
        return verdict


_SKIP_LISTS: dict[tuple[str, ...], _SkipList] = {}


def _skip_list(extra: tuple[str, ...]) -> _SkipList:
    cached = _SKIP_LISTS.get(extra)
    if cached is None:
        cached = _SKIP_LISTS[extra] = _SkipList(re.compile("|".join(SKIP_FUNCTIONS + extra)))
    return cached


def _walk_parts(
    text: str, parts: tuple[StackPart, ...], skip: _SkipList,
    pick: Callable[[list[str]], GuiltyFrame | None],
) -> tuple[list[GuiltyFrame], bool]:
    walk = _Walk(lines=text.split("\n"),
                 starts=matching_lines(text, STACK_START_LITERALS, _ANY_STACK_START))
    traces = 0
    idx = 0
    while True:
        if idx == len(parts) or (parts[idx] is PARSE_STACK_TRACE and traces > 0):
            chosen = pick(walk.raw_frames)
            if chosen is None:
                chosen, walk.ok = GuiltyFrame("", ""), False
            walk.results.append(chosen)
            walk.raw_frames = []
        if idx == len(parts):
            break
        part = parts[idx]
        if isinstance(part, _ParseStackTrace):
            traces += 1
            idx = _collect_trace(walk, parts, idx, skip)
        else:
            while (line := walk.next_line()) is not None:
                if "should_fail" in line and _CORRUPTED_LINE.search(line):
                    walk.ok = False
                    break
                match = part.search(line)
                if match is not None:
                    _append_frames(walk, match, skip)
                    break
        idx += 1
    return walk.results, walk.ok


def _collect_trace(
    walk: _Walk, parts: tuple[StackPart, ...], idx: int, skip: _SkipList
) -> int:
    """Collect frames of one call trace; returns the part index reached
    (the caller then advances by one)."""
    following = parts[idx + 1] if idx + 1 < len(parts) else None
    while (line := walk.next_line()) is not None:
        if "should_fail" in line and _CORRUPTED_LINE.search(line):
            walk.ok = False
            return idx
        if walk.pos - 1 in walk.starts:
            return idx
        if "(unreliable)" in line and _UNRELIABLE_LINE.search(line):
            continue
        if isinstance(following, re.Pattern):
            match = following.search(line)
            if match is not None:
                _append_frames(walk, match, skip)
                return idx + 1
        for frame_re in FRAME_LINE_RES:
            match = frame_re.search(line)
            if match is not None:
                _append_frames(walk, match, skip)
                break
    return idx


def _pick(stack: StackFormat, raw: list[str]) -> GuiltyFrame | None:
    """The guilty frame among frames already cleared of skipped helpers."""
    if not raw:
        return None
    stripped = [_strip_prefixes(f) for f in raw]
    if stack.extractor is None:
        return GuiltyFrame(stripped[0], raw[0]) if stripped[0] else None
    frame, index = stack.extractor(stripped)
    return GuiltyFrame(frame, raw[index]) if frame else None


def fallback_frame(stack: StackFormat, functions: Sequence[str]) -> GuiltyFrame | None:
    """The guilty frame by the format's skip list and extractor, from frames
    read another way (the faulting-pc frame, then the call trace, as
    :mod:`coreepi.parse.kernel.trace` reads any architecture) — for reports
    whose layout the format's own stack rules do not follow. None when every
    frame is a generic helper."""
    skip = _skip_list(stack.skip)
    # titles name functions without GCC's clone suffixes (".cold.0"), and a
    # fault-injection frame marks the trace as someone else's (_CORRUPTED_LINE)
    names = [f.split(".")[0] for f in functions]
    return _pick(stack, [f for f in names if f and not skip.skips(f) and not f.startswith("should_fail")])


def extract_stack_frames(stack: StackFormat, text: str) -> tuple[list[GuiltyFrame], bool]:
    """Guilty frame(s) of a report, text starting at the title match.

    Returns the frames (one per trace the format asks for; ``GuiltyFrame("",
    "")`` for a trace without a usable frame, which syzkaller titles
    ``corrupted``) and whether every trace yielded a frame.
    """
    skip = _skip_list(stack.skip)

    def pick(raw: list[str]) -> GuiltyFrame | None:
        return _pick(stack, raw)

    frames, ok = _walk_parts(text, stack.parts, skip, pick)
    if ok or not stack.parts2:
        return frames, ok
    return _walk_parts(text, stack.parts2, skip, pick)
