"""The table of kernel crash kinds: headers, title formats, stack rules.

Each :class:`OopsKind` is one family of kernel crash message, recognised by a
fixed *header* substring on a console line (``BUG:``, ``WARNING:``,
``general protection fault`` …). A kind has an ordered list of
:class:`TitleFormat` s; the format whose ``title`` regexp matches earliest in
the report wins, its ``report`` regexp (if any) captures the arguments, its
:class:`~coreepi.parse.kernel.frames.StackFormat` finds the guilty
frame, and ``template`` builds the title, e.g.
``"KASAN: {1} {3} in {4}"`` -> ``KASAN: use-after-free Read in ip6_send_skb``
(``{n}`` is the n-th capture, 1-based; the guilty frames come after the
captures).

Source of the conventions: syzkaller's Linux reporter (``google/syzkaller``
``pkg/report/linux.go``, Apache-2.0), whose titles are the ones syzbot
publishes; coreepi re-expresses its table as Python data so that coreepi
titles equal syzbot titles for the same log. Kinds marked ``extension`` are
coreepi's own (crashes a fleet sees that a fuzzer does not: hard lockups,
machine-check panics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from coreepi.parse.kernel.frames import (
    PARSE_STACK_TRACE as TRACE,
)
from coreepi.parse.kernel.frames import (
    StackFormat,
    expand,
    hung_task_frame,
    stall_frame,
)

__all__ = ["OOPS_KINDS", "OopsKind", "TitleFormat", "crash_type", "header_function", "render", "title_search"]


@dataclass(frozen=True)
class TitleFormat:
    """One way a kind's report can look, and the title it gets."""

    title: re.Pattern[str]
    template: str
    report: re.Pattern[str] | None = None
    stack: StackFormat | None = None
    no_stack_trace: bool = False  # the report legitimately has no call trace
    corrupted: bool = False  # matching this format means the log is damaged
    # syzbot's title where it differs from coreepi's: syzbot names a lost
    # message "corrupted", a placeholder coreepi keeps out of titles
    syzbot_template: str | None = None


@dataclass(frozen=True)
class OopsKind:
    """A family of crash messages sharing a header substring."""

    header: str
    formats: tuple[TitleFormat, ...]
    suppressions: tuple[re.Pattern[str], ...] = ()
    extension: bool = False  # not in syzkaller's table: a coreepi addition


def render(template: str, args: list[str]) -> str:
    """Fill ``{n}`` (1-based) placeholders; a missing argument renders the
    way Go's fmt does (``%!v(BADINDEX)``) so titles stay comparable."""

    def fill(match: re.Match[str]) -> str:
        index = int(match.group(1)) - 1
        return args[index] if 0 <= index < len(args) else "%!v(BADINDEX)"

    return re.sub(r"\{(\d+)\}", fill, template)


def _f(title: str, template: str, **kw: object) -> TitleFormat:
    report = kw.pop("report", None)
    return TitleFormat(
        title=expand(title),
        template=template,
        report=expand(report) if isinstance(report, str) else None,
        **kw,  # type: ignore[arg-type]
    )


def _k(header: str, *formats: TitleFormat, suppress: tuple[str, ...] = (),
       extension: bool = False) -> OopsKind:
    return OopsKind(header, formats, tuple(expand(s) for s in suppress), extension)


# Where the faulting instruction is printed: x86 "RIP: 0010:func+0x1/0x2",
# old x86 "IP: [<ffffffff…>] func+…", powerpc "NIP", arm64 "pc : func+…",
# arm "PC is at func+…". Unsymbolised or NULL pcs capture nothing.
# Also i386 "EIP is at func+…", s390 "Krnl PSW : <psw> (func+…)", arm64
# "pc : func" without offset, and x86 under Xen PV ("RIP: e030:func+…").
RIP_FRAME: Final = expand(
    r"(?:IP|NIP|pc |PC is at):? (?:(?:[0-9]+:|[0-9a-f]{4}:)?(?:{{PC}} +){0,2}{{FUNC}}"
    r"|(?:[0-9]+:)?0x[0-9a-f]+|(?:[0-9]+:)?{{PC}} +\[< *\(null\)>\] +\(null\)"
    r"|[0-9]+: +\(null\))"
    r"|EIP is at {{FUNC}}|Krnl PSW : [0-9a-f]+ [0-9a-f]+ \({{FUNC}}|pc : ([a-zA-Z_][a-zA-Z0-9_]*)\s*$"
)
CALL_TRACE: Final = expand(r"(?:Call (?:T|t)race:)|(?:Backtrace:)")


def _stack(*parts: object, parts2: tuple[object, ...] = (), skip: tuple[str, ...] = (),
           extractor: object = None) -> StackFormat:
    return StackFormat(tuple(parts), tuple(parts2), skip, extractor)  # type: ignore[arg-type]


_RIP_TRACE = _stack(RIP_FRAME, CALL_TRACE, TRACE)
_TRACE = _stack(CALL_TRACE, TRACE)


def _warning_stack(*skip: str) -> StackFormat:
    # Newer kernels trap into the WARN handler, so the stack to read starts
    # at the RIP line (x86) or "--- interrupt:" (powerpc); older ones just
    # print "Call Trace:".
    start = expand("(?:" + RIP_FRAME.pattern + r"|--- interrupt: [0-9]+ at {{FUNC}})")
    return _stack(start, TRACE, parts2=(CALL_TRACE, TRACE), skip=skip)


_USB_WRAPPERS = ("usb_submit_urb", "usb_start_wait_urb", "usb_bulk_msg",
                 "usb_interrupt_msg", "usb_control_msg")
_LOCK_AT = "(?:.*\\n)+?.*at: (?:{{PC}} +)?{{FUNC}}"

_BUG = _k(
    "BUG:",
    _f("BUG: KASAN:", "KASAN: {1} {3} in {4}",
       report=r"BUG: KASAN: ([a-z\-]+) in {{IFUNC}}(?:.*\n)+?.*(Read|Write) (?:of size|at addr) (?:[0-9a-f]+)",
       stack=_stack(expand(r"BUG: KASAN: (?:[a-z\-]+) in {{IFUNC}}"), CALL_TRACE, TRACE,
                    skip=("kernel_fault", "tag_check", "mem_abort", "^el1_", "^el1h_"))),
    _f("BUG: KASAN:", "KASAN: invalid-free in {2}",
       report=r"BUG: KASAN: (?:double-free or invalid-free|double-free|invalid-free) in {{FUNC}}",
       stack=_stack(expand(r"BUG: KASAN: (?:double-free or invalid-free|double-free|invalid-free) in {{FUNC}}"),
                    CALL_TRACE, TRACE, skip=("slab_", "kfree", "vunmap", "vfree"))),
    _f(r"BUG: KASAN: ([a-z\-]+) on address(?:.*\n)+?.*(Read|Write) of size ([0-9]+)",
       "KASAN: {1} {2}"),
    _f("BUG: KASAN: (.*)", "KASAN: {1}", corrupted=True),
    _f("BUG: KMSAN: kernel-usb-infoleak", "KMSAN: kernel-usb-infoleak in {2}",
       report="BUG: KMSAN: kernel-usb-infoleak in {{FUNC}}",
       stack=_stack(TRACE, re.compile("(Local variable .* created at:|Uninit was created at:)"), TRACE,
                    skip=("alloc_skb",) + _USB_WRAPPERS),
       no_stack_trace=True),
    _f("BUG: KMSAN:", "KMSAN: {1} in {3}",
       report=r"BUG: KMSAN: ([a-z\-]+) in {{FUNC}}",
       stack=_stack(TRACE, re.compile("(Local variable .* created at:|Uninit was created at:)"), TRACE,
                    skip=("alloc_skb", "netlink_ack", "netlink_rcv_skb",
                          # generic crypto is where uninit data is consumed, rarely the bug
                          "_encrypt$", "^(?:crypto|cipher|drbg|rng)_")),
       no_stack_trace=True),
    _f("BUG: KCSAN: data-race", "KCSAN: {1}", report="BUG: KCSAN: (.*)", no_stack_trace=True),
    _f("BUG: KCSAN:", "KCSAN: {1}", report="BUG: KCSAN: (.*)", no_stack_trace=True),
    _f("BUG: KFENCE: (use-after-free|out-of-bounds) (read|write) in {{FUNC}}", "KFENCE: {1} {2} in {4}",
       stack=_stack(expand(r"BUG: KFENCE: (?:[a-z\- ]+) in {{FUNC}}"), TRACE)),
    _f("BUG: KFENCE: invalid free in {{FUNC}}", "KFENCE: invalid free in {2}", no_stack_trace=True,
       stack=_stack(expand(r"BUG: KFENCE: (?:[a-z\- ]+) in {{FUNC}}"), TRACE)),
    _f("BUG: KFENCE: invalid (read|write) in {{FUNC}}", "KFENCE: invalid {1} in {3}",
       stack=_stack(expand(r"BUG: KFENCE: (?:[a-z\- ]+) in {{FUNC}}"), TRACE)),
    _f("BUG: KFENCE: memory corruption in {{FUNC}}", "KFENCE: memory corruption in {2}",
       no_stack_trace=True, stack=_stack(expand(r"BUG: KFENCE: (?:[a-z\- ]+) in {{FUNC}}"), TRACE)),
    _f("BUG: (?:unable to handle kernel paging request|unable to handle page fault for address"
       "|Unable to handle kernel data access)",
       "BUG: unable to handle kernel paging request in {1}", stack=_RIP_TRACE),
    _f("BUG: (?:unable to handle kernel NULL pointer dereference|kernel NULL pointer dereference"
       "|Kernel NULL pointer dereference)",
       "BUG: unable to handle kernel NULL pointer dereference in {1}", stack=_RIP_TRACE),
    # The header is printed by two printk() calls; the second may be lost.
    _f("BUG: (?:unable to handle kernel|Unable to handle kernel)", "BUG: unable to handle kernel",
       corrupted=True),
    _f("BUG: (spinlock|rwlock) (lockup suspected|already unlocked|recursion|cpu recursion|bad magic"
       "|wrong owner|wrong CPU|trylock failure on UP)", "BUG: {1} {2} in {3}",
       stack=_stack(CALL_TRACE, TRACE, skip=("spin_", "_lock", "_unlock"))),
    _f("BUG: soft lockup", "BUG: soft lockup in {1}",
       stack=_stack(RIP_FRAME, CALL_TRACE, TRACE, extractor=stall_frame)),
    _f("BUG: .*still has locks held!", "BUG: still has locks held in {1}",
       report="BUG: .*still has locks held!(?:.*\\n)+?.*{{PC}} +{{FUNC}}"),
    _f("BUG: scheduling while atomic", "BUG: scheduling while atomic in {1}",
       stack=_stack(CALL_TRACE, TRACE, skip=("schedule",))),
    _f("BUG: lock held when returning to user space", "BUG: lock held when returning to user space in {1}",
       report="BUG: lock held when returning to user space(?:.*\\n)+?.*leaving the kernel with locks still held"
              + _LOCK_AT, no_stack_trace=True),
    _f("BUG: bad unlock balance detected!", "BUG: bad unlock balance in {1}",
       stack=_stack(expand("{{PC}} +{{FUNC}}"), CALL_TRACE, TRACE)),
    _f("BUG: held lock freed!", "BUG: held lock freed in {1}",
       report="BUG: held lock freed!(?:.*\\n)+?.*{{PC}} +{{FUNC}}"),
    _f("BUG: Bad rss-counter state", "BUG: Bad rss-counter state", no_stack_trace=True),
    _f("BUG: non-zero nr_ptes on freeing mm", "BUG: non-zero nr_ptes on freeing mm", no_stack_trace=True),
    _f("BUG: non-zero nr_pmds on freeing mm", "BUG: non-zero nr_pmds on freeing mm", no_stack_trace=True),
    # Filesystem type and block device name are left out: loop0/loop1 would
    # split one bug into many.
    _f("BUG: Dentry .* still in use", "BUG: Dentry still in use in {1}",
       report=r"BUG: Dentry .* still in use \([0-9]+\) \[(unmount) of ([^\]]+)\]"),
    _f("BUG: Bad page (state|cache)", "BUG: Bad page {1} in {2}",
       stack=_stack(re.compile("page last allocated"), TRACE,
                    skip=("(free|put|get|update|release)_page", "free_unref", "^_*folio",
                          "truncate_inode_pages", "page_frag_free", "alloc", "vmap", "page_owner"))),
    _f("BUG: Bad page map", "BUG: Bad page map"),
    _f("BUG: workqueue lockup", "BUG: workqueue lockup", no_stack_trace=True),
    _f("BUG: sleeping function called from invalid context at (.*)",
       "BUG: sleeping function called from invalid context in {2}", stack=_TRACE),
    _f(r"BUG: using ([a-z_]+)\(\) in preemptible", "BUG: using {1}() in preemptible code in {2}",
       stack=_stack(CALL_TRACE, TRACE, skip=("dump_stack", "preemption", "preempt", "debug_",
                                             "processor_id", "this_cpu"))),
    _f("BUG: workqueue leaked lock or atomic", "BUG: workqueue leaked lock or atomic in {1}",
       report="BUG: workqueue leaked lock or atomic(?:.*\\n)+?.*last function: ([a-zA-Z0-9_]+)\\n",
       no_stack_trace=True),
    _f("BUG: memory leak", "memory leak in {1}",
       stack=_stack(re.compile(r"backtrace(?: \(crc [0-9a-fA-F]*\))?:"), TRACE,
                    skip=("kmemleak", "mmap", "kmem", "slab", "alloc", "create_object", "idr_get",
                          "list_lru_init", "kasprintf", "kvasprintf", "pcpu_create", "strdup",
                          "strndup", "memdup"))),
    _f("BUG: .*stack guard page was hit at", "BUG: stack guard page was hit in {1}",
       stack=_stack(RIP_FRAME, CALL_TRACE, TRACE, extractor=stall_frame)),
    # arm64 prints lockdep's "Invalid wait context" differently from x86;
    # use the x86 title so both architectures land in one bucket.
    _f("BUG: Invalid wait context", "WARNING: locking bug in {1}",
       stack=_stack(CALL_TRACE, TRACE, skip=("lock_sock", "release_sock"))),
    _f(r"BUG:\s*(?:\n|\Z)", "BUG: message lost", corrupted=True, syzbot_template="BUG: corrupted"),
    suppress=("ODEBUG:", "Boot_DEBUG:", "xlog_status:", "DEBUG:", "BUG: no syscalls can create resource"),
)

_WARNING = _k(
    "WARNING:",
    _f(r"WARNING: .*lib/debugobjects\.c.* (?:debug_print|debug_check|at)", "WARNING: ODEBUG bug in {1}",
       stack=_warning_stack("debug_", "rcu", "hrtimer_", "timer_", "work_", "percpu_", "vunmap",
                            "vfree", "__free_", "debug_check", "kobject_")),
    _f(r"WARNING: .*mm/usercopy\.c.* (?:usercopy_warn|at)", "WARNING: bad usercopy in {1}",
       stack=_warning_stack("usercopy", "__check")),
    _f(r"WARNING: .*lib/kobject\.c.* (?:kobject_|at)", "WARNING: kobject bug in {1}",
       stack=_warning_stack("kobject_")),
    _f(r"WARNING: .*fs/proc/generic\.c.* (?:proc_register|at)", "WARNING: proc registration bug in {1}",
       stack=_warning_stack("proc_")),
    _f(r"WARNING: .*lib/refcount\.c.* (?:refcount_|at)", "WARNING: refcount bug in {1}",
       stack=_warning_stack("refcount", "kobject_")),
    _f(r"WARNING: .*kernel/locking/lockdep\.c.*lock_", "WARNING: locking bug in {1}",
       stack=_warning_stack("lock_sock", "release_sock")),
    _f("WARNING: .*still has locks held!", "WARNING: still has locks held in {1}",
       report="WARNING: .*still has locks held!(?:.*\\n)+?.*at: {{FUNC}}"),
    _f("WARNING: Nested lock was not taken", "WARNING: nested lock was not taken in {1}",
       stack=_warning_stack()),
    _f("WARNING: lock held when returning to user space",
       "WARNING: lock held when returning to user space in {1}",
       report="WARNING: lock held when returning to user space(?:.*\\n)+?.*leaving the kernel with locks "
              "still held" + _LOCK_AT, no_stack_trace=True),
    _f(r"WARNING: .*mm/.*\.c.* k?.?malloc", "WARNING: kmalloc bug in {1}",
       stack=_warning_stack("kmalloc", "krealloc", "slab", "kmem")),
    _f("WARNING: .*mm/vmalloc.c.*__vmalloc_node", "WARNING: zero-size vmalloc in {1}", stack=_warning_stack()),
    _f("WARNING: .* usb_submit_urb", "WARNING in {1}/usb_submit_urb", stack=_warning_stack(*_USB_WRAPPERS)),
    # Kernel 6.19+ header: "WARNING: kernel/foo.c:12 at 0x0, CPU#1: comm/123".
    _f(r"WARNING: {{SRC}} at 0x\d+, CPU#\d+", "WARNING in {2}", stack=_warning_stack()),
    _f("WARNING: .* at {{SRC}} {{FUNC}}", "WARNING in {3}", stack=_warning_stack()),
    _f("WARNING: {{SRC}} at {{FUNC}}", "WARNING in {3}", stack=_warning_stack()),
    _f(r"WARNING: \[.*\] {{SRC}} at {{FUNC}}.*", "WARNING in {3}", stack=_warning_stack()),
    _f("WARNING: possible circular locking dependency detected", "possible deadlock in {1}",
       report="WARNING: possible circular locking dependency detected(?:.*\\n)+?.*is trying to acquire lock",
       stack=_stack(expand("at: (?:{{PC}} +)?{{FUNC}}"), expand("at: (?:{{PC}} +)?{{FUNC}}"), TRACE,
                    # work-item locks: the deadlock is in the work subsystem's users
                    skip=("process_one_work", "flush_workqueue", "drain_workqueue", "destroy_workqueue"))),
    _f("WARNING: possible irq lock inversion dependency detected", "possible deadlock in {1}",
       report="WARNING: possible irq lock inversion dependency detected(?:.*\\n)+?.*just changed the state "
              "of lock" + _LOCK_AT),
    _f("WARNING: .*-safe -> .*-unsafe lock order detected", "possible deadlock in {1}",
       stack=_stack(re.compile("which became (?:.*) at:"), TRACE)),
    _f("WARNING: possible recursive locking detected", "possible deadlock in {1}",
       report="WARNING: possible recursive locking detected(?:.*\\n)+?.*is trying to acquire lock" + _LOCK_AT),
    _f("WARNING: inconsistent lock state", "inconsistent lock state in {2}",
       report="WARNING: inconsistent lock state(?:.*\\n)+?.*takes" + _LOCK_AT, stack=_TRACE),
    _f("WARNING: suspicious RCU usage", "WARNING: suspicious RCU usage in {2}",
       report="WARNING: suspicious RCU usage(?:.*\\n)+?.*?{{SRC}}",
       stack=_stack(CALL_TRACE, TRACE, skip=("rcu", "kmem", "slab"))),
    _f("WARNING: kernel stack regs at [0-9a-f]+ in [^ ]* has bad '([^']+)' value",
       "WARNING: kernel stack regs has bad '{1}' value", no_stack_trace=True),
    _f("WARNING: kernel stack frame pointer at [0-9a-f]+ in [^ ]* has bad value",
       "WARNING: kernel stack frame pointer has bad value", no_stack_trace=True),
    _f("WARNING: bad unlock balance detected!", "WARNING: bad unlock balance in {1}",
       stack=_stack(expand("{{PC}} +{{FUNC}}"), CALL_TRACE, TRACE)),
    _f("WARNING: held lock freed!", "WARNING: held lock freed in {1}",
       report="WARNING: held lock freed!(?:.*\\n)+?.*at:(?: {{PC}})? +{{FUNC}}"),
    _f("WARNING: kernel stack regs .* has bad 'bp' value", "WARNING: kernel stack regs has bad value",
       no_stack_trace=True),
    _f("WARNING: kernel stack frame pointer .* has bad value", "WARNING: kernel stack regs has bad value",
       no_stack_trace=True),
    # Kernels before 2.6.3x: "WARNING: at kernel/irq.c:182 do_IRQ+0x126/0x140()",
    # sometimes without the function; arm64 traces without offsets.
    _f("WARNING: at {{SRC}} {{FUNC}}", "WARNING in {3}", stack=_warning_stack()),
    _f("WARNING: at {{SRC}}[ \t]*\n", "WARNING in {2}", stack=_warning_stack()),
    _f("WARNING: .* at {{SRC}} ([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*\n", "WARNING in {3}", stack=_warning_stack()),
    _f(r"WARNING:\s*(?:\n|\Z)", "WARNING: message lost", corrupted=True, syzbot_template="WARNING: corrupted"),
    # Userspace and firmware print "WARNING:" too; these are not kernel bugs.
    suppress=("WARNING: /etc/ssh/moduli does not exist, using fixed modulus",
              "WARNING: workqueue cpumask: online intersect > possible intersect",
              "WARNING: [Tt]he mand mount option",
              r"WARNING: Unsupported flag value\(s\) of 0x%x in DT_FLAGS_1",
              "WARNING: Unprivileged eBPF is enabled with eIBRS",
              r"WARNING: fbcon: Driver '(.*)' missed to adjust virtual screen size "
              r"(\((?:\d+)x(?:\d+) vs\. (?:\d+)x(?:\d+)\))",
              "WARNING: See https.* for mitigation options.",
              "WARNING: kernel not compiled with CPU_SRSO",
              r"EXT4-[Ff][Ss](?: \(.*\))?:",
              "(?i)warning: .* uses (deprecated v2 capabilities|wireless extensions)",
              r"XFS \(\w+\): WARNING"),
)

# Lock primitives an old kernel (before 2.6.2x) names as the acquiring site.
_LOCK_PRIMITIVE = (r"(?:_?_?mutex_lock\w*|down(?:_read|_write)?\w*|_?_?raw_spin_lock\w*|spin_lock\w*"
                   r"|_?read_lock\w*|_?write_lock\w*)")

_INFO = _k(
    "INFO:",
    # Old kernels record the lock primitive itself as where the lock is
    # taken; the acquiring function is then the first non-lock frame of the
    # "-> #0" dependency (the lock being taken, with the current stack).
    _f("INFO: possible circular locking dependency detected", "possible deadlock in {1}",
       report="INFO: possible circular locking dependency detected \\](?:.*\\n)+?.*is trying to acquire "
              "lock:\\n.*at: {{PC}} +" + _LOCK_PRIMITIVE + "\\+",
       stack=_stack(re.compile("-> #0 "), TRACE)),
    _f("INFO: possible circular locking dependency detected", "possible deadlock in {1}",
       report="INFO: possible circular locking dependency detected \\](?:.*\\n)+?.*is trying to acquire "
              "lock(?:.*\\n)+?.*at: {{PC}} +{{FUNC}}"),
    _f("INFO: possible irq lock inversion dependency detected", "possible deadlock in {1}",
       report="INFO: possible irq lock inversion dependency detected \\](?:.*\\n)+?.*just changed the state "
              "of lock(?:.*\\n)+?.*at: {{PC}} +{{FUNC}}"),
    _f("INFO: SOFTIRQ-safe -> SOFTIRQ-unsafe lock order detected", "possible deadlock in {1}",
       report="INFO: SOFTIRQ-safe -> SOFTIRQ-unsafe lock order detected \\](?:.*\\n)+?.*is trying to "
              "acquire(?:.*\\n)+?.*at: {{PC}} +{{FUNC}}"),
    _f("INFO: possible recursive locking detected", "possible deadlock in {1}",
       report="INFO: possible recursive locking detected \\](?:.*\\n)+?.*is trying to acquire "
              "lock(?:.*\\n)+?.*at: {{PC}} +{{FUNC}}"),
    _f("INFO: inconsistent lock state", "inconsistent lock state in {1}",
       report="INFO: inconsistent lock state \\](?:.*\\n)+?.*takes(?:.*\\n)+?.*at: {{PC}} +{{FUNC}}"),
    # rcu_tasks* report stalled tasks, not CPUs; same title family.
    _f("INFO: rcu_(?:preempt|sched|bh|tasks(?:_rude|_trace)?) (?:self-)?detected(?: expedited)? stall", "INFO: rcu detected stall in {1}",
       stack=_stack(re.compile("apic_timer_interrupt"), RIP_FRAME, TRACE,
                    parts2=(re.compile("(?:apic_timer_interrupt|Exception stack|el1h_64_irq"
                                       "|--- (?:Exception|interrupt): [0-9a-f]+ at)"), TRACE),
                    skip=("apic_timer_interrupt", "rcu"), extractor=stall_frame)),
    _f("INFO: trying to register non-static key", "INFO: trying to register non-static key in {1}",
       stack=_stack(CALL_TRACE, TRACE, skip=("stack", "lock", "IRQ"))),
    _f("INFO: suspicious RCU usage", "INFO: suspicious RCU usage in {2}",
       report="INFO: suspicious RCU usage(?:.*\\n)+?.*?{{SRC}}",
       stack=_stack(CALL_TRACE, TRACE, skip=("rcu", "kmem", "slab"))),
    # The comm may hold a newline (garbage comm) and newer kernels say
    # "blocked in I/O wait for more than".
    _f("INFO: task .*(?:\n.*)?? blocked (?:in I/O wait )?for more than [0-9]+ seconds", "INFO: task hung in {1}",
       stack=_stack(CALL_TRACE, TRACE, extractor=hung_task_frame)),
    _f("INFO: task .* can't die for more than .* seconds", "INFO: task can't die in {1}",
       stack=_stack(CALL_TRACE, TRACE, skip=("schedule",))),
    # Old-style KASAN reports whose header line was lost.
    _f("INFO: (Freed|Allocated) in (.*)", "INFO: {1} in {2}", corrupted=True),
    _f(r"INFO:\s*(?:\n|\Z)", "INFO: message lost", corrupted=True, syzbot_template="INFO: corrupted"),
    suppress=("INFO: lockdep is turned off", "INFO: Stall ended before state dump start",
              "INFO: NMI handler", "INFO: recovery required on readonly filesystem",
              "(handler|interrupt).*took too long", "INFO: sys_.* is not present in /proc/kallsyms",
              "INFO: no syscalls can create resource", "rmt_storage:INFO:", "_INFO:"),
)

_PANIC = _k(
    "Kernel panic",
    # With a smashed stack the kernel may not even print a symbol.
    _f("Kernel panic - not syncing: stack-protector:", "kernel panic: stack is corrupted in {1}",
       report="Kernel panic - not syncing: stack-protector: Kernel stack is corrupted in: {{FUNC}}",
       no_stack_trace=True),
    _f("Kernel panic - not syncing: stack-protector:", "kernel panic: stack is corrupted in {1}",
       report="Kernel panic - not syncing: stack-protector: Kernel stack is corrupted in: [a-f0-9]+",
       stack=_stack(CALL_TRACE, TRACE, skip=("stack_chk",))),
    _f("Kernel panic - not syncing: corrupted stack end", "kernel panic: corrupted stack end in {1}",
       report="Kernel panic - not syncing: corrupted stack end detected inside scheduler",
       stack=_stack(CALL_TRACE, TRACE, skip=("schedule", "retint_kernel"), extractor=stall_frame)),
    _f("Kernel panic - not syncing: kernel stack overflow", "kernel stack overflow in {1}",
       stack=_stack(CALL_TRACE, TRACE, skip=("bad_stack",), extractor=stall_frame)),
    _f("Kernel panic - not syncing: Attempted to kill init!", "kernel panic: Attempted to kill init!"),
    _f("Kernel panic - not syncing: Couldn't open N_TTY ldisc for [^ ]+ --- error -[0-9]+",
       "kernel panic: Couldn't open N_TTY ldisc"),
    # These panics follow another report (BUG, WARNING with panic_on_warn,
    # hung task); catching one as the title means the real header was lost.
    _f("Kernel panic - not syncing: Fatal exception", "kernel panic: Fatal exception", corrupted=True),
    _f("Kernel panic - not syncing: panic_on_warn set", "kernel panic: panic_on_warn set", corrupted=True),
    _f("Kernel panic - not syncing: hung_task: blocked tasks", "kernel panic: hung_task: blocked tasks",
       corrupted=True),
    _f("Kernel panic - not syncing: (.*)", "kernel panic: {1}"),
)


def _fault(header: str, title: str, template: str, stack: StackFormat = _RIP_TRACE,
           suppress: tuple[str, ...] = ()) -> OopsKind:
    return _k(header, _f(title, template, stack=stack), suppress=suppress)


_RIP_ONLY = _stack(RIP_FRAME)

OOPS_KINDS: Final[tuple[OopsKind, ...]] = (
    _BUG,
    _WARNING,
    _INFO,
    _k("Unable to handle kernel",
       _f("Unable to handle kernel (paging request|NULL pointer dereference|access to user memory)",
          "BUG: unable to handle kernel {1} in {2}", stack=_RIP_TRACE),
       # s390: a translation or protection exception in kernel mode
       _f("Unable to handle kernel pointer dereference in virtual (?:kernel|user) address space",
          "BUG: unable to handle kernel paging request in {1}", stack=_RIP_TRACE)),
    # "general protection fault ... error:4 in libc.so" is a user-space fault.
    _fault("general protection fault", "general protection fault.*:", "general protection fault in {1}",
           suppress=(r"general protection fault .* error:\d+ in ",)),
    _fault("stack segment: ", "stack segment: ", "stack segment fault in {1}"),
    _PANIC,
    _fault("PANIC: double fault", "PANIC: double fault", "PANIC: double fault in {1}", stack=_RIP_ONLY),
    _k("rust_kernel: panicked",
       _f("rust_kernel: panicked", "{1} in {2}", report="rust_kernel: panicked at [^\n]*?\n(.+?)\n",
          stack=_stack(CALL_TRACE, TRACE, skip=(re.escape("__rustc::rust_begin_unwind"),)))),
    _k("kernel BUG",
       _f("kernel BUG at mm/usercopy.c", "BUG: bad usercopy in {1}",
          stack=_stack(CALL_TRACE, TRACE, skip=("usercopy", "__check"))),
       _f("kernel BUG at lib/list_debug.c", "BUG: corrupted list in {1}", stack=_TRACE),
       # skb helpers BUG_ON their arguments; the caller is at fault.
       _f("kernel BUG at (.*)", "kernel BUG in {2}", stack=_stack(RIP_FRAME, CALL_TRACE, TRACE, skip=("^skb_",)))),
    _k("Kernel BUG", _f("Kernel BUG (.*)", "kernel BUG {1}")),
    # SLUB debugging: "BUG kmalloc-64 (Not tainted): Padding overwritten. 0x…-0x…" —
    # titled by cache and problem (the address range differs per crash).
    _k("BUG ",
       _f("BUG kmalloc-.*: Object already free", "BUG: Object already free"),
       _f(r"BUG ([^\s:(]+) \((?:Not tainted|Tainted:[^)]*)\): ([^.\n]*?)(?:\.|\s+0x[0-9a-f]|\n|$)",
          "BUG {1}: {2}", no_stack_trace=True),
       # KASAN before 4.x printed this header over its own report: not a SLUB bug
       suppress=(r"^(?!.*BUG [^\s:(]+ \((?:Not tainted|Tainted:[^)]*)\): )", r"\): kasan: ")),
    # x86 "Oops: int3: 0000 [#1]": a stray breakpoint trap (kernel 6.15+).
    _fault("Oops: int3:", "Oops: int3:", "int3 in {1}"),
    _fault("divide error:", "divide error: ", "divide error in {1}", stack=_RIP_ONLY),
    # s390 "Oops: 0038 ilc:3 [#1]": its fault handler's die(); the code is a
    # translation or protection exception. Printed after "Unable to handle
    # kernel pointer dereference …", which a paste may have lost.
    _fault("Oops: ", r"Oops: [0-9a-f]{4} ilc:[0-9]", "BUG: unable to handle kernel paging request in {1}",
           suppress=("Oops: (?![0-9a-f]{4} ilc:)",)),
    # Misspelling introduced by the x86 IDTENTRY conversion (v5.8).
    _fault("divide_error:", "divide_error: ", "divide error in {1}", stack=_RIP_ONLY),
    _fault("invalid opcode:", "invalid opcode: ", "invalid opcode in {1}", stack=_RIP_ONLY),
    _k("UBSAN:",
       _f("UBSAN:", "UBSAN: undefined-behaviour in {1}", report="UBSAN: Undefined behaviour in",
          stack=_stack(CALL_TRACE, TRACE, skip=("ubsan", "overflow"))),
       _f("UBSAN: array-index-out-of-bounds in", "UBSAN: array-index-out-of-bounds in {1}",
          stack=_stack(CALL_TRACE, TRACE, skip=("ubsan", "overflow"))),
       _f("UBSAN:", "UBSAN: {1} in {2}", report="UBSAN: (.*?) in",
          stack=_stack(CALL_TRACE, TRACE, skip=("ubsan", "overflow")))),
    # Printed by the x86 decompressor: a console log that shows it after
    # other output has seen the machine reboot.
    _k("Booting the kernel.", _f("^Booting the kernel", "unexpected kernel reboot", no_stack_trace=True),
       suppress=("Parsing ELF|Decompressing Linux|Unknown parameter '",)),
    _k("unregister_netdevice: waiting for",
       _f("unregister_netdevice: waiting for (?:.*) to become free",
          "unregister_netdevice: waiting for DEV to become free", no_stack_trace=True)),
    _k("VFS: Close: file count is 0",
       _f("VFS: Close: file count is 0", "VFS: Close: file count is zero (use-after-free)", no_stack_trace=True)),
    _k("VFS: Busy inodes after unmount",
       _f("VFS: Busy inodes after unmount", "VFS: Busy inodes after unmount (use-after-free)",
          no_stack_trace=True)),
    # arm64 "Internal error: synchronous external abort" is arm's paging fault.
    _fault("Internal error:", "Internal error:", "Internal error in {1}"),
    _fault("Unhandled fault:", "Unhandled fault:", "Unhandled fault in {1}"),
    _fault("Alignment trap:", "Alignment trap:", "Alignment trap in {1}"),
    _k("trusty: panic",
       _f("trusty: panic.* ASSERT FAILED", "trusty: ASSERT FAILED: {1}",
          report=r"trusty: panic \(.*?\):(?: DEBUG)? ASSERT FAILED at \(.*?\): (.+)", no_stack_trace=True),
       _f("trusty: panic.* ASSERT FAILED.*: *(.*)", "trusty: ASSERT FAILED: {1}", corrupted=True),
       _f("trusty: panic", "trusty: panic: {1}", report=r"trusty: panic \(.*?\): (.+)", no_stack_trace=True)),
    _k("fatal error:", _f("fatal error:", "go runtime error", no_stack_trace=True),
       suppress=("ALSA", "fatal error: cannot create timer")),
    # Messages of the syzkaller harness itself; kept so its logs parse the same.
    _k("SYZFAIL:", _f("SYZFAIL:(.*)", "SYZFAIL:{1}", no_stack_trace=True)),
    _k("SYZFATAL:", _f("SYZFATAL:(.*)()", "SYZFATAL:{1}", no_stack_trace=True)),
    _k("panic:",
       _f("panic: Sentry detected .* stuck task", "panic: Sentry detected stuck tasks", no_stack_trace=True),
       _f("panic:(.*)", "panic:{1}", no_stack_trace=True),
       suppress=("_panic:", "xlog_status:", r"ddb\.onpanic:", "evtlog_status:")),
    # coreepi extension: the NMI watchdog's hard lockup, which production
    # fleets see and a fuzzer's log table does not name.
    _k("Watchdog detected hard LOCKUP",
       _f("Watchdog detected hard LOCKUP", "BUG: hard lockup in {1}",
          stack=_stack(RIP_FRAME, CALL_TRACE, TRACE, extractor=stall_frame)),
       extension=True),
)

# Lines that do not start a report of their own: they belong to the report
# in progress (a BUG prints "invalid opcode", a WARNING with panic_on_warn
# prints "Kernel panic", a double fault can occur while reporting a fault).
REPORT_START_IGNORES: Final = tuple(
    re.compile(p)
    for p in ("invalid opcode: 0000", "Kernel panic - not syncing", "unregister_netdevice: waiting for",
              "PANIC: double fault", "Internal error:", "Oops: [0-9a-f]{4} ilc:",
              # SLUB's details of its own BUG report
              r"INFO: (?:Slab 0x|Object 0x|Allocated in |Freed in |0x[0-9a-f]+-0x[0-9a-f]+\. First byte)")
)

# Informational messages that carry a stack trace; one in the middle of a
# report means the report is interleaved with something else.
INFO_MESSAGES_WITH_STACK: Final = (
    "vmalloc: allocation failure:", "FAULT_INJECTION: forcing a failure", "FAULT_FLAG_ALLOW_RETRY missing",
)

# Titles that carry a console timestamp were spliced from two lines.
CORRUPTED_TITLES: Final = (re.compile(r"\[ *[0-9]+\.[0-9]+\]"),)

# Report type by title prefix, first match wins: coreepi's coarse taxonomy
# (the phenotype is named kernel-<type>).
_TYPES: Final = (
    ("KASAN:", "KASAN"), ("KMSAN:", "KMSAN"), ("KCSAN:", "KCSAN"), ("KFENCE:", "KFENCE"),
    ("UBSAN:", "UBSAN"), ("memory leak", "memory leak"),
    ("INFO: task hung", "hung task"), ("INFO: task can't die", "hung task"),
    ("INFO: rcu detected stall", "RCU stall"), ("BUG: soft lockup", "lockup"),
    ("BUG: hard lockup", "lockup"), ("BUG: workqueue lockup", "lockup"),
    ("BUG: spinlock lockup", "lockup"),
    ("possible deadlock", "lockdep"), ("inconsistent lock state", "lockdep"),
    ("WARNING: locking bug", "lockdep"), ("INFO: trying to register non-static key", "lockdep"),
    ("WARNING", "WARNING"), ("general protection fault", "fault"), ("divide error", "fault"),
    ("invalid opcode", "fault"), ("int3", "fault"), ("stack segment fault", "fault"), ("PANIC: double fault", "fault"),
    ("Unhandled fault", "fault"), ("Alignment trap", "fault"), ("Internal error", "fault"),
    ("kernel panic:", "panic"), ("kernel stack overflow", "panic"), ("trusty:", "panic"),
    ("unexpected kernel reboot", "reboot"),
    ("SYZFAIL", "harness"), ("SYZFATAL", "harness"), ("go runtime error", "harness"), ("panic:", "harness"),
    ("BUG", "BUG"), ("kernel BUG", "BUG"), ("INFO:", "INFO"),
)
_MCE_RE: Final = re.compile(r"[Mm]achine [Cc]heck|\bMCE\b")


# A symbolised function with offset/size on a report's first line: KASAN's
# "BUG: KASAN: use-after-free in copy_from_iter+0xf30/0x15e0", WARNING's
# "WARNING: CPU: 2 PID: 2636 at ipc/shm.c:162 shm_open.isra.5.part.6+0x74/0x80".
_HEADER_FUNCTION: Final = re.compile(r"(?<![\w.])([A-Za-z_][\w.]{0,200})\+0x[0-9a-f]+/0x[0-9a-f]+")


def header_function(line: str) -> str | None:
    """The function a report's first line names (``shm_open.isra.5.part.6``
    for the WARNING above), or None. The last resort for the guilty frame
    of a report whose call trace was lost, where syzbot writes the
    placeholder ``in corrupted``: the function the kernel itself blamed
    beats a title that names no function."""
    match = _HEADER_FUNCTION.search(line)
    return match.group(1) if match is not None else None


def crash_type(title: str, header: str = "") -> str:
    """coreepi's report type for a title (``KASAN``, ``WARNING``, ``BUG``,
    ``panic``, ``hung task``, ``lockup``, ``RCU stall``, ``MCE`` …);
    ``header`` is the oops kind's header, for titles that do not say it."""
    if title.startswith("kernel panic:") and _MCE_RE.search(title):
        return "MCE"
    if header.startswith("rust_kernel"):
        return "panic"
    for prefix, kind in _TYPES:
        if title.startswith(prefix):
            return kind
    return "other"


@lru_cache(maxsize=None)  # one entry per title format: a fixed, small set
def _starts_with(pattern: re.Pattern[str], literal: str) -> bool:
    """Whether every match of ``pattern`` starts with ``literal``: the
    pattern text begins with it, unquantified, and no flag changes how
    it matches."""
    source = pattern.pattern
    return (source.startswith(literal) and re.escape(literal) == literal.replace(" ", "\\ ")
            and source[len(literal): len(literal) + 1] not in ("?", "*", "+", "{")
            and not pattern.flags & (re.IGNORECASE | re.VERBOSE))


def title_search(fmt: TitleFormat, header: str, text: str, headers: list[int]) -> re.Match[str] | None:
    """``fmt.title.search(text)``; ``headers`` are the positions of the
    kind's ``header`` in ``text``. A pattern whose every match starts with
    the header (all formats but one) is tried only there: a regexp scan of
    the whole report per title format cost most of the titling."""
    if not _starts_with(fmt.title, header):
        return fmt.title.search(text)
    for pos in headers:
        match = fmt.title.match(text, pos)
        if match is not None:
            return match
    return None
