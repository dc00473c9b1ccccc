"""``coreepi collect``: the kernel's core_pattern pipe handler.

Installed as (see ``docs/capture.md`` and core(5))::

    |/path/to/coreepi collect [--config FILE] %P %i %I %s %t %h %e %u %g %c

========  ==========================================================
``%P``    pid of the crashed process in the initial pid namespace
``%i``    tid of the crashing thread in the process's pid namespace
``%I``    tid of the crashing thread in the initial pid namespace
``%s``    number of the signal that caused the dump
``%t``    time of the dump, seconds since the Epoch
``%h``    hostname (the UTS namespace's nodename)
``%e``    comm of the process (at most 15 bytes; may contain spaces)
``%u``    real uid of the process (in the initial user namespace)
``%g``    real gid of the process
``%c``    soft RLIMIT_CORE of the process (bytes; 18446744073709551615
          for unlimited)
========  ==========================================================

The handler never fails the kernel: whatever goes wrong, it reads its
standard input to the end, logs to ``<spool>/collect.log`` and exits 0.
Order of work: read /proc/<pid> (it exists while the kernel blocks on the
pipe), decide whether to keep the core, stream stdin through zstd into a
``tmp/`` entry, write the report, fsync, rename the entry into ``queue/``.
Edge analysis runs after that, detached from the kernel (``.analysis-pending``
marks the entry until it is done) or inline, within its time budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from coreepi.capture.config import CaptureConfig, load_config
from coreepi.capture.hostfacts import host_facts, host_ids
from coreepi.capture.policy import (
    CrashContext,
    apply_after_analysis,
    base_report,
    core_decision,
    merge_analysis,
)
from coreepi.capture.procinfo import read_proc
from coreepi.capture.spool import CORE, PENDING, REPORT, Entry, Spool, atomic_write, fsync_dir
from coreepi.capture.stream import StreamResult, compress_stream, drain
from coreepi.errors import InputError
from coreepi.model.report import CoreInfo, CrashReport, HostFacts, Source

__all__ = ["SPECIFIERS", "Feed", "capture", "context_from_kernel", "run_collect"]

SPECIFIERS = ("%P", "%i", "%I", "%s", "%t", "%h", "%e", "%u", "%g", "%c")

#: feed(dest or None, max_core_bytes, max_compressed_bytes) -> what was read
Feed = Callable[[Path | None, int, int], StreamResult]


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def context_from_kernel(args: list[str], config: CaptureConfig) -> CrashContext:
    """A CrashContext from the expanded specifiers (in :data:`SPECIFIERS` order)
    and /proc/<%P>. Missing or garbled arguments become None."""
    values: list[str | None] = [*args, *([None] * len(SPECIFIERS))][: len(SPECIFIERS)]
    pid, ns_tid, tid, sig, when, host, comm, uid, gid, rlimit = values
    ctx = CrashContext(
        source=Source.ELF_CORE, pid=_int(pid), tid=_int(tid), ns_tid=_int(ns_tid),
        signal=_int(sig), time=float(_int(when) or time.time()), hostname=host or None,
        comm=comm or None, uid=_int(uid), gid=_int(gid), rlimit_core=_int(rlimit),
    )
    if len(args) != len(SPECIFIERS):
        ctx.warnings.append(f"collect: expected {len(SPECIFIERS)} arguments "
                            f"({' '.join(SPECIFIERS)}), got {len(args)}")
    ctx.host_id, ctx.boot_id = host_ids(config)
    if ctx.pid is not None:
        ctx.proc = read_proc(ctx.pid, config.collect.environ_allowlist)
    return ctx


def _write_report(directory: Path, report: CrashReport) -> None:
    atomic_write(directory / REPORT, report.model_dump_json().encode())


def capture(config: CaptureConfig, spool: Spool, ctx: CrashContext, feed: Feed) -> Entry | None:
    """Decide, read the core through ``feed``, write and queue the entry.

    Returns the queued entry (None if this crash id was already queued).
    Edge analysis is run inline, or detached in a child process (``fork``),
    as configured; with detach the returned entry may still be pending.
    """
    try:
        decision = core_decision(config, spool, ctx)
    except OSError as exc:  # unreadable state: keep the core, say why
        decision = None
        ctx.warnings.append(f"capture policy state unreadable ({exc}); core kept")
    keep = decision is None or decision.allowed
    tmp = spool.new_entry_dir(ctx.crash_id())
    left = config.spool.max_bytes - spool.usage_bytes()
    result = feed(tmp / CORE if keep else None, config.collect.max_core_bytes, max(left, 0))
    try:
        facts = host_facts(config, spool).facts
    except Exception as exc:  # noqa: BLE001 (facts are a bonus; the crash must still count)
        facts = HostFacts()
        ctx.warnings.append(f"host facts: {type(exc).__name__}: {exc}")
    stored = keep and result.dropped_reason is None
    core = CoreInfo(
        stored=stored, size_bytes=result.size_bytes,
        compressed_size_bytes=result.compressed_bytes if stored else None,
        sha256=result.sha256 if stored else None, truncated=result.truncated,
        dropped_reason=None if stored else (decision.reason if decision else None)
        or result.dropped_reason,
    )
    report = base_report(ctx, facts, core)
    edge = config.collect.edge_analysis_seconds > 0 and stored
    if edge and not config.collect.edge_analysis_detach:
        report = _edge_analysis(report, tmp, config, spool)
        edge = False
    _write_report(tmp, report)
    if edge:
        (tmp / PENDING).write_bytes(b"")
    entry = spool.commit(tmp, report.crash_id)
    spool.log(f"captured {report.crash_id} exe={ctx.exe} signal={ctx.signal} "
              f"size={result.size_bytes} core={'stored' if stored else core.dropped_reason}")
    if entry is not None and edge:
        _detached(lambda: _finish_pending(entry, report, config, spool), spool)
    return entry


def _edge_analysis(
    report: CrashReport, directory: Path, config: CaptureConfig, spool: Spool
) -> CrashReport:
    # loaded here, after the core is in the spool: it is a third of collect's imports
    from coreepi.capture.edge import analyse_core

    c = config.collect
    started = time.monotonic()
    # the decompressed copy counts against the quota before it is written
    need = report.core.size_bytes or 0
    with spool.reserve("analysis", need, config.spool.max_bytes) as scratch:
        if scratch is None:
            report.analysis.warnings.append(
                f"edge analysis skipped: its {need} bytes of scratch do not fit the spool quota "
                f"({config.spool.max_bytes} bytes); core shipped for central analysis")
            return report
        result = analyse_core(directory / CORE, seconds=c.edge_analysis_seconds,
                              memory_mb=c.edge_analysis_memory_mb, debug_dirs=c.debug_dirs,
                              scratch=scratch, max_core_bytes=need or None)
    took = time.monotonic() - started
    if result.report is None:
        report.analysis.duration_seconds = took
        report.analysis.warnings.append(
            f"edge analysis {result.outcome}: {result.detail}; core shipped for central analysis")
        return report
    report = merge_analysis(report, result.report, took)
    budget = apply_after_analysis(report, config, spool)
    if not budget.allowed:
        report.core.stored = False
        report.core.compressed_size_bytes = None
        report.core.dropped_reason = budget.reason
    return report


def _finish_pending(entry: Entry, report: CrashReport, config: CaptureConfig, spool: Spool) -> None:
    with _analysis_slot(spool, config.collect.edge_analysis_slots) as slot:
        if slot:
            report = _edge_analysis(report, entry.path, config, spool)
        else:
            report.analysis.warnings.append(
                "edge analysis skipped: every analysis slot busy; core shipped for central analysis")
        _write_report(entry.path, report)
        if not report.core.stored:
            (entry.path / CORE).unlink(missing_ok=True)
        (entry.path / PENDING).unlink(missing_ok=True)
        fsync_dir(entry.path)


@contextlib.contextmanager
def _analysis_slot(spool: Spool, slots: int) -> Iterator[bool]:
    for i in range(max(1, slots)):
        fh = open(spool.state / f"analysis-slot-{i}.lock", "a+b")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        try:
            yield True
        finally:
            fh.close()
        return
    yield False


def _detached(work: Callable[[], None], spool: Spool) -> None:
    """Run ``work`` in a forked child in its own session; the caller returns
    at once (so the kernel can finish the crashed process)."""
    try:
        pid = os.fork()
    except OSError as exc:
        spool.log(f"fork failed ({exc}): edge analysis runs inline")
        work()
        return
    if pid:
        return
    code = 0
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        work()
    except BaseException:  # noqa: BLE001 (a forked child logs and exits, always)
        spool.log("edge analysis failed:\n" + traceback.format_exc())
        code = 1
    finally:
        os._exit(code)


def run_collect(args: list[str], config_path: str | Path | None = None, stdin_fd: int = 0) -> int:
    """The pipe handler's whole life. Always returns 0 (see module docstring)."""
    spool: Spool | None = None
    try:
        problems = []
        try:
            config = load_config(config_path)
        except InputError as exc:
            config = CaptureConfig()
            problems.append(f"config: {exc}; using defaults")
        spool = Spool(config.spool_dir)
        for problem in problems:
            spool.log(problem)
        ctx = context_from_kernel(args, config)
        ctx.warnings.extend(problems)
        c = config.collect

        def feed(dest: Path | None, max_bytes: int, left: int) -> StreamResult:
            return compress_stream(stdin_fd, dest, level=c.zstd_level, threads=c.zstd_threads,
                                   max_bytes=max_bytes, max_compressed_bytes=left,
                                   sha256=c.hash_core)

        capture(config, spool, ctx, feed)
    except BaseException:  # noqa: BLE001 (never fail the kernel's pipe)
        message = "collect failed:\n" + traceback.format_exc()
        if spool is not None:
            spool.log(message)
        else:
            with contextlib.suppress(OSError):
                sys.stderr.write(message)
    finally:
        with contextlib.suppress(BaseException):
            drain(stdin_fd)  # at EOF already, unless something above failed early
    return 0
