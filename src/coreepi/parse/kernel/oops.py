"""Kernel oops / panic logs into CrashReports.

Input: any text that may hold Linux kernel messages — a serial console log,
``dmesg`` output, journal / syslog text, kdump's ``vmcore-dmesg.txt`` —
given as a path, the text itself, or an iterable of lines. Output: one
:class:`~coreepi.model.report.CrashReport` per crash found (BUG, Oops, general
protection fault, KASAN / KMSAN / KCSAN / KFENCE / UBSAN reports, WARNING,
lockdep splats, panics, hung tasks, soft / hard lockups, RCU stalls,
machine-check panics …), in log order; ``[]`` when there is none.

Each report carries:

* ``artifact``: the report's line in the log and that line, its title in
  syzbot's style (``KASAN: use-after-free Read in ip6_send_skb``) and the
  facts analysis needs (``artifact.kernel``: crash type, guilty frame,
  taint, corruption …). Source of the title conventions: syzkaller's Linux
  reporter (``google/syzkaller`` ``pkg/report``). Phenotypes and signature
  are left empty: :func:`coreepi.analyze.analyze` makes them (the signature
  is the title; ``kernel-<type>`` and taint phenotypes, see
  ``docs/phenotypes.md``).
* the crashed thread (the task of the ``CPU: … PID: … Comm:`` line) with the
  call trace as frames (function, offset, ``[module]``, file:line if
  symbolised); kernel release in ``host.kernel``; the ``Hardware name:``
  line in ``host.board`` / ``host.bios_version`` / ``host.extra``.
* ``analysis.warnings`` with ``corrupted report: <reason>`` when the report
  is damaged (truncated, interleaved with other output, no call trace) —
  such reports are kept, not dropped.

Robustness: the log is read as a stream, line by line, with bounded memory
(see :class:`~coreepi.parse.kernel.scan.ScanLimits`); any bytes decode
(invalid UTF-8 becomes U+FFFD); no input text makes these functions raise.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Final

from coreepi import __version__
from coreepi.model.report import (
    AnalysisInfo,
    ArtifactInfo,
    CrashReport,
    HostFacts,
    KernelReportInfo,
    ProcessInfo,
    Source,
    Thread,
    stable_crash_id,
)
from coreepi.model.taint import OUT_OF_TREE_TAINTS
from coreepi.model.trusted import trusted
from coreepi.parse.kernel.blocks import Block, mark_block, text_blocks
from coreepi.parse.kernel.facts import KernelFacts, read_facts
from coreepi.parse.kernel.formats import crash_type
from coreepi.parse.kernel.prefixes import split_prefix
from coreepi.parse.kernel.scan import ScanLimits, ScannedReport, scan_blocks, scan_lines
from coreepi.parse.kernel.title import TitleResult, title_report
from coreepi.parse.open_input import binary_blocks, binary_lines, input_lines, open_input
from coreepi.parse.sniff import text_head

__all__ = [
    "ScanLimits", "iter_kernel_log", "log_lines", "looks_like_kernel_log", "parse_kernel_log",
]

ANALYZER: Final = f"coreepi {__version__} kernel-oops"
DEFAULT_MAX_REPORTS: Final = 10_000

_UPTIME_RE: Final = re.compile(r"\[ *([0-9]+\.[0-9]+)\]")
_HYPERVISORS: Final = (
    ("QEMU", "kvm"), ("KVM", "kvm"), ("Google Compute Engine", "kvm"), ("Amazon EC2", "nitro"),
    ("VMware", "vmware"), ("VirtualBox", "virtualbox"), ("Xen", "xen"),
    ("Microsoft Corporation Virtual Machine", "hyper-v"), ("Hyper-V", "hyper-v"),
)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _text_lines(text: str) -> Iterator[str]:
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start:end]
        start = end + 1


def _item_lines(items: Iterable[str | bytes]) -> Iterator[str]:
    for item in items:
        text = _decode(item) if isinstance(item, (bytes, bytearray)) else str(item)
        if text.endswith("\n"):
            text = text[:-1]
        if "\n" in text:
            yield from text.split("\n")
        else:
            yield text


def log_lines(source: str | bytes | os.PathLike[str] | Iterable[str], max_bytes: int) -> Iterator[str]:
    """The lines of a log given as a path (opened with ``open_input``), its
    text, its bytes, a binary stream or an iterable of lines, without their
    newlines; a line of bytes is cut at ``max_bytes``. Shared with the
    telemetry parser (``parse.telemetry.logs``), which reads the same logs."""
    if isinstance(source, os.PathLike):
        yield from input_lines(source, max_bytes)
    elif isinstance(source, str):
        yield from _text_lines(source)
    elif isinstance(source, (bytes, bytearray)):
        yield from binary_lines(io.BytesIO(bytes(source)), max_bytes)
    elif hasattr(source, "readline") and hasattr(source, "read") and isinstance(source.read(0), bytes):
        yield from binary_lines(source, max_bytes)  # type: ignore[arg-type]
    else:
        yield from _item_lines(source)  # type: ignore[arg-type]


def _blocks(source: str | bytes | os.PathLike[str] | Iterable[str], max_bytes: int) -> Iterator[Block]:
    """The log as marked blocks of whole lines (see :mod:`coreepi.parse.kernel.blocks`)."""
    if isinstance(source, os.PathLike):
        with open_input(source) as handle:
            yield from map(mark_block, binary_blocks(handle, max_bytes))
    elif isinstance(source, str):
        yield from text_blocks(_text_lines(source))
    elif isinstance(source, (bytes, bytearray)):
        yield from map(mark_block, binary_blocks(io.BytesIO(bytes(source)), max_bytes))
    elif hasattr(source, "readline") and hasattr(source, "read") and isinstance(source.read(0), bytes):
        yield from map(mark_block, binary_blocks(source, max_bytes))  # type: ignore[arg-type]
    else:
        yield from text_blocks(_item_lines(source))  # type: ignore[arg-type]


def _host(facts: KernelFacts) -> HostFacts:
    values: dict[str, object] = {"kernel": facts.kernel}
    extra: dict[str, str] = {}
    if facts.hardware_name:
        board, _, bios = facts.hardware_name.partition(", BIOS ")
        values["board"] = board or None
        values["bios_version"] = bios or None
        extra["hardware_name"] = facts.hardware_name
        values["hypervisor"] = next((h for key, h in _HYPERVISORS if key in facts.hardware_name), None)
    if facts.build:
        extra["kernel_build"] = facts.build
    if facts.modules:
        extra["modules_linked_in"] = " ".join(facts.modules)
    return trusted(HostFacts, **values, extra=extra)


def _title_rule(title: TitleResult, scanned: ScannedReport) -> str:
    """How the title was read: syzkaller's header (or coreepi's extension)
    and the title format that matched."""
    rule = f"syzkaller-title:{scanned.kind.header.strip()}"
    if scanned.kind.extension:
        rule = f"coreepi-title:{scanned.kind.header.strip()}"
    if title.format is not None:
        rule += f" -> '{title.format.template}'"
    return rule


def _times(scanned: ScannedReport) -> tuple[float | None, datetime | None]:
    """(seconds since boot, UTC wall clock) of the oops line, each None
    unless its prefix prints it (read as the telemetry parsers read
    prefixes: console and /dev/kmsg uptimes; ISO-8601 and ``dmesg -T``
    wall clocks, the latter taken as UTC). A console stamp behind other
    debris (``… login: [  12.3]``) still counts as the uptime."""
    raw = scanned.raw_line or scanned.oops_line
    line = split_prefix(scanned.line_number, raw)
    if line.uptime is None and line.ts is None:
        stamp = _UPTIME_RE.search(raw)
        return (float(stamp.group(1)) if stamp else None), None
    return line.uptime, line.ts


def _artifact(title: TitleResult, facts: KernelFacts, scanned: ScannedReport) -> ArtifactInfo:
    """Where the report is in the log and what the log says of it."""
    uptime, _ = _times(scanned)
    return trusted(
        ArtifactInfo,
        line=scanned.line_number or None,
        text=(scanned.raw_line or scanned.oops_line)[:500],
        title=title.title,
        kernel=trusted(
            KernelReportInfo,
            raw_title=title.raw_title,
            syzbot_title=title.syzbot_title,
            title_rule=_title_rule(title, scanned),
            first_line=scanned.lines[0][:500],
            crash_type=crash_type(title.title, scanned.kind.header),
            guilty_frame=title.frames[0] if title.frames else None,
            taint=facts.taint if facts.tainted else "",
            tainted=facts.tainted,
            corrupted_reason=title.corrupted_reason,
            truncated=scanned.truncated,
            cpu=facts.cpu,
            fault_address=facts.fault_address,
            uptime_seconds=uptime,
            modules_linked_in=list(facts.modules),
            out_of_tree_modules=sorted(
                m for m, f in facts.module_flags.items() if set(f) & OUT_OF_TREE_TAINTS
            ),
        ),
    )


def _report(scanned: ScannedReport, name: str | None) -> CrashReport:
    """The report of one scanned window. Built with ``trusted()`` (no
    validation, see :mod:`coreepi.model.trusted`): every value is typed by
    the scanner and :mod:`coreepi.parse.kernel.facts` (ints from bounded
    hex, strings from match groups); a value out of range raises and the
    caller falls back to :func:`_fallback`."""
    title = title_report(scanned)
    facts = read_facts(scanned.facts_lines, scanned.prefix)
    warnings: list[str] = []
    if title.corrupted_reason:
        warnings.append(f"corrupted report: {title.corrupted_reason}")
    if scanned.truncated:
        warnings.append("report window truncated at the scanner's size limit")
    thread = trusted(Thread, tid=facts.pid if facts.pid is not None else 0, name=facts.comm, crashed=True,
                     registers=facts.registers, frames=facts.frames)
    return trusted(
        CrashReport,
        crash_id=stable_crash_id("kernel-oops", name, scanned.line_number, scanned.oops_line, title.title),
        source=Source.KERNEL_OOPS,
        arch=facts.arch,
        process=trusted(ProcessInfo, pid=facts.pid, tid=facts.pid, comm=facts.comm),
        threads=[thread],
        artifact=_artifact(title, facts, scanned),
        host=_host(facts),
        analysis=trusted(AnalysisInfo, analyzer_version=ANALYZER, warnings=warnings),
        captured_at=_times(scanned)[1],
    )


def _fallback(scanned: ScannedReport, name: str | None, error: Exception) -> CrashReport:
    """A minimal report when building the full one failed: a crash was seen
    and must be counted even if its details could not be read
    (``artifact.kernel`` is None)."""
    header = scanned.kind.header
    return CrashReport(
        crash_id=stable_crash_id("kernel-oops", name, scanned.line_number, scanned.oops_line, header),
        source=Source.KERNEL_OOPS,
        artifact=ArtifactInfo(line=scanned.line_number or None, text=scanned.oops_line[:500],
                              title=header),
        analysis=AnalysisInfo(analyzer_version=ANALYZER,
                              warnings=[f"corrupted report: parser error {type(error).__name__}: {error}"[:500]]),
    )


def iter_kernel_log(
    source: str | bytes | os.PathLike[str] | Iterable[str],
    *,
    name: str | None = None,
    limits: ScanLimits = ScanLimits(),
) -> Iterator[CrashReport]:
    """Stream the crash reports of a kernel log, in log order.

    ``source``: a path (``pathlib.Path`` / ``os.PathLike``; zstd, gzip, bzip2
    and xz files are decompressed, see :mod:`coreepi.parse.open_input`), the log text as ``str`` or ``bytes``, a
    binary file object, or an iterable of lines (``str`` or ``bytes``, with
    or without their newline). ``name`` identifies the log in crash ids
    (defaults to the path for a path). Memory is bounded by ``limits``
    whatever the input size. Raises only for an unreadable path (OSError) or
    a compressed one cut short or corrupt
    (:class:`~coreepi.parse.open_input.DecompressionError`).
    """
    if name is None and isinstance(source, os.PathLike):
        name = os.fspath(source)
    for scanned in scan_blocks(_blocks(source, limits.max_line_chars * 4), limits):
        try:
            yield _report(scanned, name)
        except Exception as error:  # noqa: BLE001 - a crash seen must still be counted
            yield _fallback(scanned, name, error)


def parse_kernel_log(
    source: str | bytes | os.PathLike[str] | Iterable[str],
    *,
    name: str | None = None,
    limits: ScanLimits = ScanLimits(),
    max_reports: int = DEFAULT_MAX_REPORTS,
) -> list[CrashReport]:
    """All crash reports of a kernel log (see :func:`iter_kernel_log`), at
    most ``max_reports`` of them (the list itself must stay bounded; use
    :func:`iter_kernel_log` to see every one). ``[]``: no crash found."""
    reports: list[CrashReport] = []
    for report in iter_kernel_log(source, name=name, limits=limits):
        if len(reports) >= max_reports:
            reports[-1].analysis.warnings.append(
                f"more than {max_reports} crash reports in this log; the rest are not listed")
            break
        reports.append(report)
    return reports


_SNIFF_RES: Final = (
    # a console stamp anywhere in a line: a syslog line and the console
    # line interleaved with it mid-line (two writers on one serial port)
    re.compile(rb"(?:<[0-9]>)?\[ *[0-9]+\.[0-9]{6}\](?:\[ *[CT][0-9]+\])? "),
    re.compile(rb"^[A-Z][a-z]{2} [ 0-9]?[0-9] [0-9:]{8} \S+ kernel: ", re.M),
    re.compile(rb"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]?[0-9] [0-9:]{8} [0-9]{4}\] ", re.M),
    # journal / rsyslog ISO-8601 times with a kernel tag; dmesg --time-format
    # iso (its decimal comma tells it from other programs' ISO times); dmesg
    # -x's kernel facility; /dev/kmsg records
    re.compile(rb"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,]+(?:Z|[+-][0-9:]+)? \S+ kernel: ", re.M),
    re.compile(rb"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8},[0-9]{6}[+-][0-9]{2}:[0-9]{2} ", re.M),
    re.compile(rb"^kern *:[a-z]+ *: ", re.M),
    re.compile(rb"^[0-9]{1,3},[0-9]+,[0-9]+,[^;\n]{0,16};", re.M),
    # untimestamped lines only the kernel prints (a console without
    # printk.time): file systems, CPU mitigations, the VFS, perf's NMI watchdog
    re.compile(rb"^(?:EXT4-fs[ :(]|XFS \(|BTRFS (?:info|warning|error)|Spectre V[0-9] ?: |Speculative "
               rb"(?:Store Bypass|Return Stack Overflow): |x86/[a-z]+: |VFS: |INFO: NMI handler \()", re.M),
)
# Kernel text that is no crash report (those are the scanner's: see below).
_STRONG: Final = re.compile(
    rb"Linux version [0-9]|Call Trace:|------------\[ cut here \]------------|rcu_sched"
)
SNIFF_WINDOW: Final = 64 << 10  # bytes of a head the recognisers read


def looks_like_kernel_log(head: bytes) -> bool:
    """Content sniffing: does this start of a file look like kernel messages?

    True when the first :data:`SNIFF_WINDOW` bytes of ``head`` have several
    console-timestamped (``[  12.345678]``), syslog ``kernel:``, ``dmesg -T``
    or kernel-only untimestamped lines (``EXT4-fs (loop4): …``), hold just
    one such line and nothing else, a kernel marker that starts no report (``Linux
    version``, ``Call Trace:``, a cut-here line), or a crash report: the
    parser's own scanner runs over them, so whatever
    :func:`iter_kernel_log` would report from the head is recognised (a
    one-line ``WARNING:``, a kmemleak report without timestamps), and no
    second list of report headers can drift from the parser's. Never raises.
    """
    try:
        # recognised by content: NUL and stray control bytes do not make a log binary
        text = text_head(head[:SNIFF_WINDOW], SNIFF_WINDOW)
        if text is None:
            return False
        hits = sum(len(r.findall(text)) for r in _SNIFF_RES)
        if hits >= 2 or _STRONG.search(text) is not None:
            return True
        # a log of one kernel line (a console that printed nothing else)
        if hits == 1 and sum(1 for line in text.split(b"\n") if line.strip()) == 1:
            return True
        return next(scan_lines(_text_lines(_decode(text))), None) is not None
    except Exception:  # noqa: BLE001 - sniffing must not fail
        return False
