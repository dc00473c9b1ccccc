"""One JVM crash, two artifacts: pairing an hs_err log with the ELF core of
the same process.

A JVM that dies of a fatal error writes ``hs_err_pid<PID>.log`` and then,
with ``-XX:+CreateCoredumpOnCrash`` (the default), calls ``abort()``: the
kernel writes a core of the same pid a moment later. Both are one crash.
:mod:`coreepi.ingest.run` pairs them with the rules below, whichever of the
two arrives first, in the same ingest run or in different ones.

Pairing rule
    An hs_err report and an ELF core report pair when they have the same
    ``host_id`` and the same ``process.pid`` and their ``captured_at`` are
    at most :data:`PAIR_WINDOW` (10 minutes) apart, and neither is already
    paired. The second artifact to arrive is merged into the stored crash
    of the first (closest in time when several qualify); the crash row is
    updated, not added, so the crash is counted once. The window is all
    that pairs: two times either side of a boundary of the id's 10-minute
    bucket (below) still pair, in either order and in one ingest run or two.

Crash id
    An hs_err report, and an ELF core that looks like a JVM (a module
    ``libjvm.so``, or an executable named ``java``), get the id
    :func:`pair_crash_id` = hash of (host, pid, 10-minute bucket of
    ``captured_at``) instead of their own content id, so the pair has the
    same id whichever artifact came first. Limits, by design kept simple:
    when the two times straddle a bucket boundary the pair keeps the id of
    the first arrival (its own bucket; the first artifact cannot know the
    time of the second, and a stored crash is never re-keyed); when the id is already taken by another crash (a
    container's pid 1 crash-looping within 10 minutes) the report keeps its
    own content id, so no crash is ever lost to a collision. Other cores
    keep their content id (and still pair with an hs_err that arrives
    later).

Merged report
    The ELF core's native analysis is kept (threads, registers, modules,
    memory map, its phenotypes, core blob). Added from the hs_err log: the
    JVM runtime (``runtime.kind = jvm``, version, vendor, Java frames), its
    phenotypes not already present (``jvm-*``, and e.g. ``null-deref`` read
    from the JVM's siginfo), its ``jvm.*`` attributes and what the core lacks
    of process and host facts. Because the JVM aborts after writing the
    log, the core's signal is ``SIGABRT`` and its stack is the JVM's error
    handler; in that case the pair takes the hs_err's signal and signature
    (the fatal signal and the problematic frame, the same as an hs_err-only
    crash of the same bug), and the core's signature stays in the trail.
    ``attributes['artifacts'] = 'elf-core+hs_err'``, the hs_err's SHA-256 in
    ``attributes['hs_err_sha256']``, and a line in ``analysis.warnings``
    name both artifacts.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Final

from coreepi.model.report import CrashReport, SignatureStep, Source, stable_crash_id

__all__ = [
    "PAIR_WINDOW",
    "artifact_kinds",
    "is_jvm_core",
    "merge_core_and_hs_err",
    "pair_crash_id",
    "pairable",
    "pairs_with",
]

PAIR_WINDOW: Final = timedelta(minutes=10)
_BUCKET_SECONDS: Final = int(PAIR_WINDOW.total_seconds())
_PAIRED: Final = "elf-core+hs_err"


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def is_jvm_core(report: CrashReport) -> bool:
    """An ELF core of a JVM: a ``libjvm.so`` module or an executable named java."""
    if report.source is not Source.ELF_CORE:
        return False
    if any(os.path.basename(m.path).startswith("libjvm.so") for m in report.modules):
        return True
    exe = report.process.exe or ""
    return os.path.basename(exe) == "java" or report.process.comm == "java"


def pairable(report: CrashReport) -> bool:
    """An hs_err or ELF core report with host, time and pid."""
    return (
        report.source in (Source.HS_ERR, Source.ELF_CORE)
        and bool(report.host_id)
        and report.captured_at is not None
        and report.process.pid is not None
    )


def artifact_kinds(report: CrashReport) -> set[str]:
    """The artifact kinds a stored crash already holds ({'elf-core', 'hs_err'})."""
    paired = report.attributes.get("artifacts")
    if isinstance(paired, str) and paired:
        return set(paired.split("+"))
    return {str(report.source)}


def pairs_with(new: CrashReport, stored: CrashReport) -> bool:
    """Whether ``new`` (one artifact) joins the stored crash ``stored``."""
    if not (pairable(new) and pairable(stored)) or new.crash_id == stored.crash_id:
        return False
    if new.host_id != stored.host_id or new.process.pid != stored.process.pid:
        return False
    kinds = artifact_kinds(stored)
    if str(new.source) in kinds or len(kinds) > 1:
        return False
    assert new.captured_at is not None and stored.captured_at is not None
    return abs(_utc(new.captured_at) - _utc(stored.captured_at)) <= PAIR_WINDOW


def pair_crash_id(report: CrashReport) -> str | None:
    """The order-independent id of a JVM crash (see the module docstring);
    None when the report is not an hs_err or JVM core with host, pid, time."""
    if not pairable(report) or not (report.source is Source.HS_ERR or is_jvm_core(report)):
        return None
    assert report.captured_at is not None
    bucket = int(_utc(report.captured_at).timestamp()) // _BUCKET_SECONDS
    return stable_crash_id("jvm-process-crash", report.host_id, report.process.pid, bucket)


def merge_core_and_hs_err(core: CrashReport, hs_err: CrashReport, crash_id: str) -> CrashReport:
    """The one crash of a core and an hs_err log of the same process (rules
    in the module docstring). Inputs are not modified."""
    merged = core.model_copy(deep=True)
    hs = hs_err.model_copy(deep=True)
    merged.crash_id = crash_id
    times = [_utc(t) for t in (core.captured_at, hs_err.captured_at) if t is not None]
    merged.captured_at = min(times) if times else None
    merged.runtime = hs.runtime
    have = {p.name for p in merged.phenotypes}
    for p in hs.phenotypes:
        if p.name not in have:
            p.evidence = {**p.evidence, "artifact": "hs_err"}
            merged.phenotypes.append(p)
            have.add(p.name)
    aborted = core.signal is not None and core.signal.name == "SIGABRT"
    if aborted and hs.signal is not None:
        merged.signal = hs.signal
    if (aborted or merged.signature is None) and hs.signature is not None:
        trail = list(hs.signature.trail)
        if core.signature is not None:
            trail.insert(0, SignatureStep(
                rule="jvm-pair: the core's SIGABRT stack is the JVM's error handler; "
                     "signature of the hs_err's problematic frame",
                before=core.signature.signature, after=hs.signature.signature))
        merged.signature = hs.signature.model_copy(update={"trail": trail, "frames_used": []})
    for field in ("cmdline", "cgroup", "container_id", "pod", "uid", "gid"):
        if not getattr(merged.process, field) and getattr(hs.process, field):
            setattr(merged.process, field, getattr(hs.process, field))
    for field, value in hs.host:
        if value and not getattr(merged.host, field):
            setattr(merged.host, field, value)
    attributes = {**hs.attributes, **merged.attributes, "artifacts": _PAIRED}
    if hs_err.core.sha256:
        attributes["hs_err_sha256"] = hs_err.core.sha256
    if hs_err.core.blob_key:
        attributes["hs_err_blob_key"] = hs_err.core.blob_key
    merged.attributes = attributes
    note = (
        f"one crash from two artifacts of pid {core.process.pid}: ELF core"
        f" (sha256 {core.core.sha256 or '?'}) and hs_err log (sha256 {hs_err.core.sha256 or '?'})"
    )
    if aborted:
        note += "; signal and signature from the hs_err log (the core's SIGABRT is the JVM's abort)"
    merged.analysis.warnings = [*merged.analysis.warnings, note,
                                *(f"hs_err: {w}" for w in hs.analysis.warnings)]
    return merged
