"""The capture policy: which cores are kept, and the crash report around them.

Order of the core decisions (the first that refuses names the
``core.dropped_reason``; the report is written whatever they say):

1. ``policy``: include/exclude by signal and by executable (fnmatch globs);
2. ``rlimit-core``: only with ``respect_rlimit_core`` and a soft limit of 0;
3. ``rate-limit``: a token from the executable's bucket and the host's
   (after 1 and 2, so excluded crashes cost no tokens);
4. ``spool-quota``: the spool already holds ``spool.max_bytes``.

After edge analysis: frames are cut to ``max_frames_per_thread`` (the
signature was computed on all of them), and the core is dropped when its
signature already had ``cores_per_signature_per_day`` cores kept today.
"""

from __future__ import annotations

import fnmatch
import platform
import signal as signals
from dataclasses import dataclass, field
from datetime import UTC, datetime

from coreepi import __version__
from coreepi.capture.config import CaptureConfig
from coreepi.capture.procinfo import ProcContext
from coreepi.capture.ratelimit import Decision, SignatureBudget, take_core_tokens
from coreepi.capture.spool import Spool
from coreepi.model.report import (
    AnalysisInfo,
    CoreInfo,
    CrashReport,
    HostFacts,
    Mapping,
    ProcessInfo,
    SignalInfo,
    Source,
    stable_crash_id,
)

__all__ = ["CrashContext", "apply_after_analysis", "base_report", "core_decision", "merge_analysis"]


@dataclass
class CrashContext:
    """What is known about a crash before its core is read."""

    source: Source
    pid: int | None = None  # in the initial pid namespace
    tid: int | None = None
    ns_tid: int | None = None  # in the process's own pid namespace
    signal: int | None = None
    time: float | None = None  # seconds since the epoch
    hostname: str | None = None
    comm: str | None = None
    uid: int | None = None
    gid: int | None = None
    rlimit_core: int | None = None
    host_id: str | None = None
    boot_id: str | None = None
    proc: ProcContext = field(default_factory=ProcContext)
    warnings: list[str] = field(default_factory=list)

    @property
    def exe(self) -> str | None:
        return self.proc.exe or self.comm

    def crash_id(self) -> str:
        return stable_crash_id("coreepi-capture", self.host_id, self.boot_id, self.pid,
                               self.tid, self.time, self.signal)


def signal_name(number: int | None) -> str | None:
    try:
        return signals.Signals(number).name if number is not None else None
    except ValueError:
        return None


def _signal_matches(number: int | None, items: list[str | int]) -> bool:
    name = signal_name(number)
    for item in items:
        if isinstance(item, int):
            if item == number:
                return True
        elif name and item.upper() in (name, name.removeprefix("SIG")):
            return True
    return False


def _exe_matches(exe: str | None, patterns: list[str]) -> bool:
    return exe is not None and any(fnmatch.fnmatchcase(exe, p) for p in patterns)


def core_decision(config: CaptureConfig, spool: Spool, ctx: CrashContext) -> Decision:
    """Keep this crash's core? (see the module docstring for the order)."""
    c = config.collect
    name = signal_name(ctx.signal) or str(ctx.signal)
    if c.include_signals and not _signal_matches(ctx.signal, c.include_signals):
        return Decision(False, f"policy: signal {name} not in include_signals")
    if _signal_matches(ctx.signal, c.exclude_signals):
        return Decision(False, f"policy: signal {name} in exclude_signals")
    if c.include_executables and not _exe_matches(ctx.exe, c.include_executables):
        return Decision(False, f"policy: executable {ctx.exe} not in include_executables")
    if _exe_matches(ctx.exe, c.exclude_executables):
        return Decision(False, f"policy: executable {ctx.exe} in exclude_executables")
    if c.respect_rlimit_core and ctx.rlimit_core == 0:
        return Decision(False, "rlimit-core: the process's RLIMIT_CORE soft limit is 0")
    decision = take_core_tokens(spool, config.rate_limit, ctx.exe)
    if not decision.allowed:
        return decision
    used = spool.usage_bytes()
    if used >= config.spool.max_bytes:
        return Decision(False, f"spool-quota: spool holds {used} of {config.spool.max_bytes} bytes")
    return Decision(True)


def base_report(ctx: CrashContext, facts: HostFacts, core: CoreInfo) -> CrashReport:
    """The report of a crash from what was known without its analysis."""
    proc = ctx.proc
    attributes: dict[str, str | int | float | bool] = {
        f"env.{k}": v for k, v in sorted(proc.environ.items())
    }
    if ctx.ns_tid is not None and ctx.ns_tid != ctx.tid:
        attributes["ns_tid"] = ctx.ns_tid
    if ctx.rlimit_core is not None:
        attributes["rlimit_core"] = ctx.rlimit_core
    when = datetime.fromtimestamp(ctx.time, UTC) if ctx.time is not None else datetime.now(UTC)
    return CrashReport(
        crash_id=ctx.crash_id(),
        captured_at=when,
        host_id=ctx.host_id,
        boot_id=ctx.boot_id,
        source=ctx.source,
        arch=platform.machine() or None,
        process=ProcessInfo(
            pid=ctx.pid, ppid=proc.ppid, tid=ctx.tid, exe=proc.exe, comm=ctx.comm or proc.comm,
            cmdline=proc.cmdline, uid=ctx.uid if ctx.uid is not None else proc.uid,
            gid=ctx.gid if ctx.gid is not None else proc.gid, cgroup=proc.cgroup,
            container_id=proc.container_id, pod=proc.pod_uid,
        ),
        signal=SignalInfo(number=ctx.signal, name=signal_name(ctx.signal))
        if ctx.signal is not None else None,
        memory_map=[Mapping(start=m.start, end=m.end, perms=m.perms, offset=m.offset,
                            path=m.path, in_core=False) for m in proc.maps],
        host=facts,
        attributes=attributes,
        core=core,
        analysis=AnalysisInfo(analyzer_version=__version__,
                              warnings=[*ctx.warnings, *(f"/proc: {e}" for e in proc.errors)]),
    )


def merge_analysis(base: CrashReport, analysed: CrashReport, seconds: float) -> CrashReport:
    """The analysed report with the capture's identity, context and core info."""
    report = analysed.model_copy(deep=True)
    report.crash_id = base.crash_id
    report.captured_at = base.captured_at
    report.host_id = base.host_id
    report.boot_id = base.boot_id
    report.source = base.source
    report.host = base.host
    report.core = base.core
    report.attributes = {**analysed.attributes, **base.attributes}
    bp, p = base.process, report.process
    if p.pid is not None and p.pid != bp.pid:
        report.attributes["ns_pid"] = p.pid
    p.pid = bp.pid if bp.pid is not None else p.pid
    p.tid = bp.tid if bp.tid is not None else p.tid
    p.ppid = bp.ppid if bp.ppid is not None else p.ppid
    p.exe = bp.exe or p.exe
    if bp.cmdline:  # /proc's is whole; the core's NT_PRPSINFO keeps 80 bytes
        p.cmdline, p.cmdline_truncated = bp.cmdline, False
    for name in ("comm", "uid", "gid", "cgroup", "container_id", "pod"):
        if getattr(bp, name) is not None:  # the kernel's / journal's word wins
            setattr(p, name, getattr(bp, name))
    if report.signal is None:
        report.signal = base.signal
    if not report.memory_map:
        report.memory_map = base.memory_map
    report.analysis.duration_seconds = seconds
    report.analysis.warnings = [*base.analysis.warnings, *report.analysis.warnings]
    return report


def apply_after_analysis(
    report: CrashReport, config: CaptureConfig, spool: Spool
) -> Decision:
    """Cut frames; take a core from the signature's daily budget. Returns the
    budget's decision (allowed when there is no core or no signature)."""
    keep = config.collect.max_frames_per_thread
    cut = 0
    for thread in report.threads:
        if len(thread.frames) > keep:
            thread.frames = thread.frames[:keep]
            cut += 1
    if cut:
        report.analysis.warnings.append(
            f"frames cut to {keep} per thread in {cut} thread(s) (max_frames_per_thread)")
    if report.signature is None or not report.core.stored:
        return Decision(True)
    return SignatureBudget(spool, config.collect.cores_per_signature_per_day).take(
        report.signature.signature)
