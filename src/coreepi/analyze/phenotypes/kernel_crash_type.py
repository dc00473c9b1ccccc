"""kernel-<type>: what kind of kernel crash a kernel report is (``KASAN``,
``WARNING``, ``BUG``, ``panic``, ``hung task``, ``lockup``, ``RCU stall``,
``MCE`` … slugified: ``kernel-kasan``, ``kernel-hung-task``), with the
title, guilty frame, taint and corruption as evidence; ``kernel-unparsed``
for a report the parser saw but could not read. ``kernel-mce`` is
hardware-indicative."""

from __future__ import annotations

import re

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Phenotype


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@register
class KernelCrashType(PhenotypeRule):
    name = "kernel-crash-type"  # the rule; the phenotype it fires is kernel-<type>
    kinds = frozenset({"kernel"})
    description = (
        "The kernel report's crash type as a phenotype kernel-<type> (KASAN, WARNING, BUG, "
        "panic, lockup …), with title, guilty frame, taint and corruption as evidence."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        report, artifact = ctx.report, ctx.report.artifact
        if artifact is None:
            return None
        info = artifact.kernel
        if info is None:
            return Phenotype(
                name="kernel-unparsed", evidence={"oops_line": artifact.text or "", "corrupted": True}
            )
        fault = info.fault_address
        evidence = {
            "title": artifact.title,
            "raw_title": info.raw_title,
            "type": info.crash_type,
            "guilty_frame": info.guilty_frame,
            "taint": info.taint,
            "tainted": info.tainted,
            "corrupted": info.corrupted_reason is not None,
            "corrupted_reason": info.corrupted_reason,
            "truncated": info.truncated,
            "cpu": info.cpu,
            "pid": report.process.pid,
            "comm": report.process.comm,
            "fault_address": f"0x{fault:x}" if fault is not None else None,
            "uptime_seconds": info.uptime_seconds,
            "line_number": artifact.line,
            "oops_line": artifact.text,
            "modules_linked_in": info.modules_linked_in,
            "out_of_tree_modules": info.out_of_tree_modules,
        }
        return Phenotype(
            name=f"kernel-{_slug(info.crash_type)}",
            hardware_indicative=info.crash_type == "MCE",
            evidence=evidence,
        )
