"""``coreepi ci run``'s findings for CI systems: JUnit XML, GitHub Actions
workflow commands, GitLab code-quality JSON.

- JUnit XML (the Jenkins/Ant schema every CI reads): one ``testsuite``, one
  failing ``testcase`` per signature and process (classname ``crash.<process>``,
  name the signature), its failure listing every crash of it ("2 crashes:
  pids 15071, 15072"): CI servers merge cases of equal classname and name, so
  two such cases would show as one; a passing case ``no crash`` when nothing
  crashed, so the report is never empty. The suite's time is the run's
  (command and analysis), never less than its cases'.
- GitHub Actions: one ``::error file=…,line=…,title=…::message`` per crash
  (workflow-commands syntax, with its %-escapes), at the innermost frame
  whose source file is inside the workspace; without such a frame the
  annotation has no file.
- GitLab code quality (the Code Climate subset GitLab reads: description,
  check_name, fingerprint, severity, location.path, location.lines.begin):
  one ``critical`` issue per signature and process, with its crash count
  (GitLab keys issues by fingerprint: one per crash of a signature would show
  as one); fingerprints are stable per signature and process so GitLab can
  tell new issues from old. ``location.path`` (required) is the innermost
  frame's source file inside the workspace, else the crashed executable's
  path when it lies in the workspace, else ``coreepi-crash/<process>``: a
  name inside the repository that GitLab lists but places on no file (an
  absolute path outside the repository it can do neither with).
"""

from __future__ import annotations

import hashlib
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

from coreepi.model.report import Frame
from coreepi.reporting.ci import CiCrash, CiRun, frame_text, top_frames

__all__ = ["github_annotations", "gitlab_codequality", "junit_xml", "source_frame"]


def _message(c: CiCrash) -> str:
    text = f"{c.process} (pid {c.pid}) died of {c.signal}: {c.signature}"
    if c.phenotypes:
        text += f" [{', '.join(c.phenotypes)}]"
    if c.match is not None:
        text += f"; production: {c.match.text()}"
    return text


def source_frame(c: CiCrash, workspace: Path) -> tuple[str, int] | None:
    """(path relative to ``workspace``, line) of the innermost crashing-thread
    frame whose source file lies inside ``workspace``; None if there is none."""
    root = workspace.resolve()
    for f in top_frames(c.report, 64):
        if not (f.file and f.line):
            continue
        path = Path(f.file) if os.path.isabs(f.file) else root / f.file
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:
            continue
        if path.exists():
            return rel.as_posix(), f.line
    return None


def _details(c: CiCrash) -> str:
    frames: list[Frame] = top_frames(c.report, 16, from_signature=False)
    lines = [f"#{f.index} {frame_text(f)}" for f in frames]
    if c.error:
        lines.append(c.error)
    if c.core is not None:
        lines.append(f"core: {c.core}")
    return "\n".join(lines)


def _grouped(run: CiRun) -> list[list[CiCrash]]:
    """The crashes by (process, signature), first occurrence order."""
    groups: dict[tuple[str, str], list[CiCrash]] = {}
    for c in run.crashes:
        groups.setdefault((c.process, c.signature), []).append(c)
    return list(groups.values())


def _count(crashes: list[CiCrash]) -> str:
    """" (2 crashes: pids 15071, 15072)" for more than one crash, else ""."""
    if len(crashes) == 1:
        return ""
    return f" ({len(crashes)} crashes: pids {', '.join(str(c.pid) for c in crashes)})"


def junit_xml(run: CiRun, suite: str = "coreepi ci run") -> str:
    """The JUnit XML document (UTF-8 text with its declaration)."""
    groups = _grouped(run)
    cases = [sum(c.seconds_to_core + c.seconds_to_analyse for c in g) for g in groups]
    failures = len(groups)
    root = ET.Element("testsuites", tests=str(max(failures, 1)), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(max(failures, 1)),
                       failures=str(failures), errors="0",
                       time=f"{max(run.seconds, sum(cases)):.3f}")
    props = ET.SubElement(ts, "properties")
    for name, value in (("command", " ".join(run.command)), ("exit_status", str(run.returncode)),
                        ("capture", run.mode)):
        ET.SubElement(props, "property", name=name, value=value)
    for crashes, seconds in zip(groups, cases, strict=True):
        first = crashes[0]
        case = ET.SubElement(ts, "testcase", classname=f"crash.{first.process or 'unknown'}",
                             name=first.signature, time=f"{seconds:.3f}")
        failure = ET.SubElement(case, "failure", message=_message(first) + _count(crashes),
                                type=first.signal)
        failure.text = "\n\n".join(f"pid {c.pid}:\n{_details(c)}" if len(crashes) > 1
                                   else _details(c) for c in crashes)
    if not run.crashes:
        ET.SubElement(ts, "testcase", classname="crash", name="no crash", time="0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _esc_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(text: str) -> str:
    return _esc_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(run: CiRun, workspace: Path) -> str:
    """Workflow commands, one ``::error`` line per crash (empty when none)."""
    out = []
    for c in run.crashes:
        props = [f"title={_esc_prop('crash: ' + c.signature[:200])}"]
        where = source_frame(c, workspace)
        if where is not None:
            props[:0] = [f"file={_esc_prop(where[0])}", f"line={where[1]}"]
        body = _message(c) + "\n" + _details(c)
        out.append(f"::error {','.join(props)}::{_esc_data(body)}")
    return "".join(line + "\n" for line in out)


def gitlab_codequality(run: CiRun, workspace: Path) -> str:
    """The code-quality report: a JSON array of issues."""
    issues = []
    for crashes in _grouped(run):
        c = crashes[0]
        where = next((w for w in (source_frame(x, workspace) for x in crashes) if w), None)
        path, line = where if where else (_placeholder(c, workspace), 1)
        fingerprint = hashlib.sha256(f"{c.signature}\0{c.process}".encode()).hexdigest()[:32]
        issues.append({
            "description": _message(c) + _count(crashes), "check_name": "coreepi-crash",
            "fingerprint": fingerprint, "severity": "critical",
            "location": {"path": path, "lines": {"begin": int(line)}},
        })
    return json.dumps(issues, indent=2) + "\n"


def _placeholder(c: CiCrash, workspace: Path) -> str:
    """A repository-relative path for a crash without a workspace frame: the
    executable's when it lies in the workspace, else ``coreepi-crash/<process>``."""
    exe = c.report.process.exe if c.report is not None else None
    if exe:
        try:
            return Path(exe).resolve().relative_to(workspace.resolve()).as_posix()
        except (ValueError, OSError):
            pass
    return f"coreepi-crash/{c.process or 'unknown'}"
