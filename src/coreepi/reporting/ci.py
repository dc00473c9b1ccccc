"""What ``coreepi ci run`` found, and its human renderings: the summary table
(Rich) and the markdown of a pull-request comment.

``CiRun`` is built by :mod:`coreepi.cirun` (capture, analysis, fleet
matching); the machine formats (JUnit XML, GitHub annotations, GitLab code
quality) are in :mod:`coreepi.reporting.ci_machine`.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from coreepi.model.report import CrashReport, Frame
from coreepi.reporting.phrases import how_many

__all__ = ["CiCrash", "CiRun", "FleetMatch", "markdown_summary", "print_summary", "top_frames"]

TOP_FRAMES = 3


@dataclass(frozen=True, slots=True)
class FleetMatch:
    """A CI crash's signature looked up in production. ``known`` False: never
    seen there. ``url``: the UI's group page (None when the server does not
    give group ids)."""

    known: bool
    crashes: int = 0
    hosts: int = 0
    since_version: str | None = None
    first_seen: str | None = None
    verdict: str | None = None
    group_id: str | None = None
    url: str | None = None

    def text(self) -> str:
        """``group G: 412 crashes on 37 hosts since 3.1.0, verdict software``,
        or ``new: never seen in production``."""
        if not self.known:
            return "new: never seen in production"
        since = self.since_version or (self.first_seen or "")[:10]
        name = f"group {self.group_id}" if self.group_id else "seen in production"
        parts = [f"{name}: {how_many(self.crashes, 'crash')} on {how_many(self.hosts, 'host')}"
                 + (f" since {since}" if since else "")]
        if self.verdict:
            parts.append(f"verdict {self.verdict}")
        return ", ".join(parts)


@dataclass(slots=True)
class CiCrash:
    """One crashed process of the command's tree: what the capture saw,
    the analysed report (None when the core is missing or unreadable:
    ``error``), the core's path, and the fleet match (with ``--server``)."""

    pid: int
    signal: str
    process: str
    cmdline: list[str]
    core: Path | None
    report: CrashReport | None = None
    error: str | None = None
    match: FleetMatch | None = None
    seconds_to_core: float = 0.0
    seconds_to_analyse: float = 0.0

    @property
    def signature(self) -> str:
        if self.report is not None and self.report.signature is not None:
            return self.report.signature.signature
        return f"{self.process or 'unknown'} killed by {self.signal} (no stack)"

    @property
    def phenotypes(self) -> list[str]:
        return [p.name for p in self.report.phenotypes] if self.report is not None else []

    @property
    def new(self) -> bool:
        """True unless production has seen this signature (unknown without a server)."""
        return self.match is None or not self.match.known


@dataclass(slots=True)
class CiRun:
    """The whole run: ``returncode`` of the command (minus the signal that
    killed it), capture ``mode``, wall ``seconds`` (the command and the analysis of
    its cores), crashes in capture order."""

    command: list[str]
    mode: str
    returncode: int
    seconds: float
    crashes: list[CiCrash] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    server: str | None = None

    def failed(self, fail_on: str) -> bool:
        """Should the job fail? ``any``: a crash happened; ``new``: a crash
        whose signature production has never seen."""
        if fail_on == "new":
            return any(c.new for c in self.crashes)
        return bool(self.crashes)

    def signatures(self) -> list[str]:
        """Distinct signatures, first occurrence order."""
        return list(dict.fromkeys(c.signature for c in self.crashes))


def top_frames(report: CrashReport | None, n: int = TOP_FRAMES, *,
               from_signature: bool = True) -> list[Frame]:
    """The first ``n`` frames of the crashing thread; with ``from_signature``
    from the first frame the signature used (past abort/raise and the like)."""
    thread = report.crashed_thread if report is not None else None
    if thread is None:
        return []
    used = report.signature.frames_used if report is not None and report.signature else []
    first = min(used) if used and from_signature else 0
    return [f for f in thread.frames if f.index >= first][:n]


def frame_text(f: Frame) -> str:
    where = f" ({Path(f.file).name}:{f.line})" if f.file and f.line else ""
    name = f.function or (f"{Path(f.module).name}+{f.module_offset:#x}" if f.module and
                          f.module_offset is not None else f"{f.pc:#x}" if f.pc else "?")
    return name + where


def _status(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def headline(run: CiRun) -> str:
    """One line: the command's status, the crashes, new ones when matched."""
    n = len(run.crashes)
    text = (f"`{shlex.join(run.command)}`: {_status(run.returncode)}; {n} crash"
            f"{'es' if n != 1 else ''}, {len(run.signatures())} signature"
            f"{'s' if len(run.signatures()) != 1 else ''} (capture: {run.mode})")
    if run.server and n:
        new = sum(1 for c in run.crashes if c.new)
        text += f"; {new} new to production"
    return text


def print_summary(run: CiRun, console: Console) -> None:
    """The summary table: signature, phenotypes, test process, top frames (and fleet)."""
    # soft_wrap: lines a log reader greps stay whole
    console.print(headline(run).replace("`", ""), markup=False, highlight=False, soft_wrap=True)
    for warning in run.warnings:
        console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    if not run.crashes:
        return
    table = Table(show_lines=True)
    for name in ("signature", "phenotypes", "process", "top frames"):
        table.add_column(name, overflow="fold")
    if run.server:
        table.add_column("production", overflow="fold")
    for c in run.crashes:
        row = [c.signature, ", ".join(c.phenotypes) or "-",
               f"{c.process} (pid {c.pid}) {c.signal}",
               "\n".join(frame_text(f) for f in top_frames(c.report)) or (c.error or "-")]
        if run.server:
            row.append(c.match.text() if c.match else "not looked up")
        table.add_row(*row)
    console.print(table)


def _cell(text: str) -> str:
    """Text for a table cell inside a code span (pipes escaped, one line)."""
    return text.replace("|", "\\|").replace("\n", " ")


def _text(text: str) -> str:
    """Text for a table cell or HTML element outside code: also ``<`` ``>``
    ``&`` escaped, or GitHub takes ``<void, …>`` of a C++ frame for a tag."""
    return _cell(html.escape(text, quote=False))


def markdown_summary(run: CiRun) -> str:
    """GitHub-flavoured markdown for a pull-request comment."""
    lines = ["### coreepi: crashes in this run", "", headline(run), ""]
    if not run.crashes:
        return "\n".join([*lines, "No process crashed.", ""])
    head = "| signature | phenotypes | process | top frames |"
    rule = "|---|---|---|---|"
    if run.server:
        head, rule = head + " production |", rule + "---|"
    lines += [head, rule]
    for c in run.crashes:
        frames = "<br>".join(_text(frame_text(f)) for f in top_frames(c.report)) or \
            _text(c.error or "-")
        row = (f"| `{_cell(c.signature)}` | {', '.join(c.phenotypes) or '-'} | "
               f"{_text(c.process)} (pid {c.pid}) {c.signal} | {frames} |")
        if run.server:
            m = c.match
            text = _text(m.text()) if m else "not looked up"
            row += f" [{text}]({m.url}) |" if m and m.url else f" {text} |"
        lines.append(row)
    for c in run.crashes:
        if c.report is None:
            continue
        lines += ["", f"<details><summary>{_text(c.process)} (pid {c.pid}): "
                  f"{_text(c.signature)}</summary>", "", "```",
                  f"$ {shlex.join(c.cmdline)}" if c.cmdline else f"{c.process}"]
        stack = top_frames(c.report, 12, from_signature=False)
        lines += [f"#{f.index} {frame_text(f)}" for f in stack]
        lines += ["```", "</details>"]
    return "\n".join(lines) + "\n"
