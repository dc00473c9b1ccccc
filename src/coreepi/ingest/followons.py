"""Follow-on reports of a kernel log: one incident, one crash.

A kernel that has oopsed keeps printing: further oopses of the now broken
state (taint ``D``), the hung-task detector's reminder every two minutes,
the same WARNING each time the code runs again. syzkaller counts only the
first report of a console log as the crash (google/syzkaller ``pkg/report``:
``Reporter.Parse`` returns the first report of the output; what follows it
comes from an already broken kernel).
Stored as crashes of their own, they would count one incident many times and
make one host look like a cluster (a false hardware-suspect verdict).

:func:`split_follow_ons` keeps the independent reports of one artifact and
names, for each, the follow-ons it absorbed; ingest stores the first and
says how many it did not count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coreepi.model.report import CrashReport, KernelReportInfo, Source

__all__ = ["Incident", "follow_on_note", "follow_ons_outcome", "split_follow_ons"]

_SHOWN_LINES = 10
"""Log lines of follow-ons named in a crash's warning (the rest are counted)."""


@dataclass
class Incident:
    """One independent report of an artifact and the follow-ons it absorbed
    (in log order)."""

    report: CrashReport
    follow_ons: list[CrashReport] = field(default_factory=list)


def _kernel(report: CrashReport) -> KernelReportInfo | None:
    """What a kernel log said of this report (uptime, taint, crash type);
    None for a report that is not a kernel log's."""
    return report.artifact.kernel if report.artifact is not None else None


_ENDINGS = frozenset({"panic", "reboot"})
"""Crash types that end a kernel: after an earlier report of the boot, the
panic it caused (panic_on_oops, panic_on_warn, "Fatal exception",
hung_task_panic) or the reboot that followed."""

_STALL_DETECTORS = frozenset({"hung task", "RCU stall", "lockup"})
"""Crash types of the detectors of an ongoing stall: the hung-task check
lists every task blocked behind the stall and repeats every
``hung_task_timeout_secs``; RCU stall and lockup warnings repeat while the
stall lasts."""


def _signature(report: CrashReport) -> str | None:
    if report.signature is not None and report.signature.signature:
        return report.signature.signature
    return report.artifact.title if report.artifact is not None else None


def _boots(reports: Sequence[CrashReport]) -> list[int]:
    """The boot number (0, 1, …) of each report: a new boot starts where the
    seconds since boot go back (the kernel restarted its clock) or the boot id
    changes. A report without a printk stamp stays in the boot before it (a
    log without stamps is read as one boot)."""
    boots: list[int] = []
    boot, last_uptime, last_id = 0, None, None
    for report in reports:
        kernel = _kernel(report)
        uptime = kernel.uptime_seconds if kernel is not None else None
        if (uptime is not None and last_uptime is not None and uptime < last_uptime) or (
                report.boot_id is not None and last_id is not None
                and report.boot_id != last_id):
            boot += 1
            last_uptime = None
        if uptime is not None:
            last_uptime = uptime
        if report.boot_id is not None:
            last_id = report.boot_id
        boots.append(boot)
    return boots


def split_follow_ons(reports: Sequence[CrashReport]) -> list[Incident]:
    """The incidents of the reports of one artifact, in log order.

    A kernel report is a follow-on, within the same boot (:func:`_boots`),
    (a) of the boot's first report when its taint carries ``D`` (the kernel
    died once already in this boot) and an earlier report of this boot exists,
    or when it is a panic or reboot (:data:`_ENDINGS`, the end that report
    caused); (b) of the earlier report whose signature (its title when it has
    none) it repeats; (c) of the boot's first stall report when it is one of
    a stall detector's reports (:data:`_STALL_DETECTORS`). Everything else is
    independent, as is every report that is not a kernel report (a core, an
    hs_err log: one report each)."""
    incidents: list[Incident] = []
    first_of_boot: dict[int, Incident] = {}
    first_stall: dict[int, Incident] = {}
    by_signature: dict[tuple[int, str], Incident] = {}
    for report, boot in zip(reports, _boots(reports), strict=True):
        if report.source is not Source.KERNEL_OOPS:
            incidents.append(Incident(report))
            continue
        signature = _signature(report)
        earlier = by_signature.get((boot, signature)) if signature is not None else None
        kernel = _kernel(report)
        kind, taint = (kernel.crash_type, kernel.taint) if kernel is not None else ("", "")
        if earlier is None and ("D" in taint or kind in _ENDINGS):
            earlier = first_of_boot.get(boot)
        if earlier is None and kind in _STALL_DETECTORS:
            earlier = first_stall.get(boot)
        if earlier is not None:
            earlier.follow_ons.append(report)
            continue
        incident = Incident(report)
        incidents.append(incident)
        first_of_boot.setdefault(boot, incident)
        if kind in _STALL_DETECTORS:
            first_stall.setdefault(boot, incident)
        if signature is not None:
            by_signature[(boot, signature)] = incident
    return incidents


def follow_on_note(incident: Incident) -> str:
    """The warning a stored crash carries about its follow-ons, e.g.
    "14 follow-on reports of this crash in the same log and boot, not counted
    as crashes (lines 20, 39, …)"."""
    lines = [r.artifact.line for r in incident.follow_ons
             if r.artifact is not None and r.artifact.line is not None]
    shown = ", ".join(str(n) for n in lines[:_SHOWN_LINES])
    more = ", …" if len(lines) > _SHOWN_LINES else ""
    where = f" (lines {shown}{more})" if lines else ""
    n = len(incident.follow_ons)
    return (f"{n} follow-on report{'s' if n != 1 else ''} of this crash in the same log and "
            f"boot, not counted as crashes{where}")


def follow_ons_outcome(reports: int, incidents: Sequence[Incident]) -> str:
    """The ingest line of an artifact with follow-ons, e.g. "15 reports,
    1 crash: 14 follow-ons of the first (same boot)"."""
    crashes = len(incidents)
    follow_ons = sum(len(inc.follow_ons) for inc in incidents)
    of_whom = ("the first" if follow_ons == len(incidents[0].follow_ons)
               else "an earlier crash")
    return (f"{reports} reports, {crashes} crash{'es' if crashes != 1 else ''}: {follow_ons} "
            f"follow-on{'s' if follow_ons != 1 else ''} of {of_whom} (same boot)")
