#!/usr/bin/env python3
"""Measure coreepi's kernel-oops titles against syzkaller's ground truth.

Reads every file of ``tests/data/vendored/kernel-oops-syzkaller/`` (747 real
console logs from ``google/syzkaller`` ``pkg/report/testdata/linux/report/``,
each with header lines ``TITLE:``, ``CORRUPTED:`` … a blank line, the raw
log, and optionally an expected ``REPORT:`` section), feeds the raw log only
to :func:`coreepi.parse.kernel.oops.parse_kernel_log` (then
:func:`coreepi.analyze.analyze`, which makes the signature), and compares the first
report's title with ``TITLE:``.

Writes ``docs/parsers/kernel-oops-agreement.md``: the agreement rate and
every miss with the expected title, the title coreepi gave, and a reason
category. Run from the project root::

    .venv/bin/python scripts/gen_oops_agreement.py [--testdata DIR] [--out FILE]

The test ``tests/test_kernel_oops.py`` imports :func:`load_case` and
:func:`evaluate` from this file, so the page and the test agree.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TESTDATA = ROOT / "tests" / "data" / "vendored" / "kernel-oops-syzkaller"
DEFAULT_OUT = ROOT / "docs" / "parsers" / "kernel-oops-agreement.md"


@dataclass
class Case:
    """One ground-truth file: its header fields and the raw log."""

    name: str
    title: str | None
    alt: list[str]
    corrupted: bool
    log: str


@dataclass
class Outcome:
    case: Case
    got_title: str | None
    got_corrupted: bool | None
    reports: int
    category: str | None = None  # None: agreement

    @property
    def agrees(self) -> bool:
        return self.category is None


@dataclass
class Evaluation:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def titled(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.case.title is not None]

    @property
    def untitled(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.case.title is None]

    @property
    def title_agreement(self) -> float:
        titled = self.titled
        return sum(o.got_title == o.case.title for o in titled) / len(titled) if titled else 1.0

    @property
    def misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.agrees]


def load_case(path: Path) -> Case:
    """Split a ground-truth file into header fields and the raw log.

    As syzkaller's own test does: all ``\\r`` are removed, the header ends at
    the first empty line, and a ``REPORT:`` line after an empty line ends the
    log (what follows is the expected report text, not console output).
    """
    text = path.read_bytes().replace(b"\r", b"").decode("utf-8", "replace")
    header, _, body = text.partition("\n\n") if not text.startswith("\n") else ("", "", text[1:])
    title: str | None = None
    alt: list[str] = []
    corrupted = False
    for line in header.split("\n"):
        if line.startswith("TITLE:"):
            title = line[len("TITLE:"):].strip() or None  # an empty TITLE means "no crash"
        elif line.startswith("ALT: "):
            alt.append(line[len("ALT: "):])
        elif line.startswith("CORRUPTED: "):
            corrupted = line[len("CORRUPTED: "):] == "Y"
    log_lines: list[str] = []
    prev_empty = False
    for line in body.split("\n"):
        if prev_empty and line == "REPORT:":
            break
        log_lines.append(line)
        prev_empty = line == ""
    return Case(path.name, title, alt, corrupted, "\n".join(log_lines))


def _categorize(case: Case, got_title: str | None, got_corrupted: bool | None) -> str | None:
    if case.title is None:
        return "false crash (log has no crash)" if got_title is not None else None
    if got_title is None:
        return "crash not found"
    if got_title != case.title:
        exp, got = case.title, got_title
        if exp.split(" in ")[0] != got.split(" in ")[0]:
            return "different crash kind or report chosen"
        return "different guilty frame"
    if got_corrupted != case.corrupted:
        return "corrupted flag differs" if case.corrupted else "flagged corrupted, syzkaller not"
    return None


def evaluate(testdata: Path) -> Evaluation:
    """Parse every ground-truth file and compare with its header."""
    sys.path.insert(0, str(ROOT / "src"))
    from coreepi.analyze import analyze
    from coreepi.parse.kernel.oops import parse_kernel_log

    result = Evaluation()
    for path in sorted(testdata.iterdir(), key=lambda p: (len(p.name), p.name)):
        if not re.fullmatch(r"[0-9]+", path.name):
            continue
        case = load_case(path)
        reports = [analyze(r) for r in parse_kernel_log(case.log, name=case.name)]
        got_title = got_corrupted = None
        if reports:
            first = reports[0]
            # syzbot's title as coreepi reproduces it: the same as the signature
            # except where syzbot writes its "corrupted" placeholder
            kernel = first.artifact.kernel if first.artifact else None
            got_title = kernel.syzbot_title if kernel else None
            got_title = got_title or (first.signature.signature if first.signature else None)
            got_corrupted = bool(first.phenotypes and first.phenotypes[0].evidence.get("corrupted"))
        outcome = Outcome(case, got_title, got_corrupted, len(reports))
        outcome.category = _categorize(case, got_title, got_corrupted)
        result.outcomes.append(outcome)
    return result


def render(result: Evaluation) -> str:
    titled, untitled = result.titled, result.untitled
    exact = sum(o.got_title == o.case.title for o in titled)
    both = sum(o.agrees for o in titled)
    false_crashes = sum(o.got_title is not None for o in untitled)
    corrupted_cases = [o for o in titled if o.case.corrupted]
    flagged = sum(bool(o.got_corrupted) for o in corrupted_cases)
    lines = [
        "# Kernel oops parser: agreement with syzkaller",
        "",
        "Generated by `scripts/gen_oops_agreement.py`; do not edit by hand.",
        "",
        "Ground truth: `tests/data/vendored/kernel-oops-syzkaller/` — real console logs from",
        "syzkaller (`google/syzkaller` `pkg/report/testdata/linux/report/`, Apache-2.0) with the",
        "title syzbot gives the first crash of each log. coreepi sees only the raw log.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| files | {len(result.outcomes)} |",
        f"| files with a `TITLE:` | {len(titled)} |",
        f"| exact title agreement (first report) | {exact}/{len(titled)} = {exact / max(len(titled), 1):.2%} |",
        f"| title and corrupted flag both agree | {both}/{len(titled)} = {both / max(len(titled), 1):.2%} |",
        f"| files without `TITLE:` | {len(untitled)} |",
        f"| false crashes on files without `TITLE:` | {false_crashes} |",
        f"| `CORRUPTED: Y` files flagged corrupted | {flagged}/{len(corrupted_cases)} |",
        "",
        "## Misses",
        "",
    ]
    misses = result.misses
    if not misses:
        lines.append("None.")
    else:
        by_cat: dict[str, list[Outcome]] = {}
        for o in misses:
            by_cat.setdefault(o.category or "", []).append(o)
        lines += ["| category | count |", "|---|---|"]
        lines += [f"| {cat} | {len(items)} |" for cat, items in sorted(by_cat.items())]
        lines += ["", "| file | expected | got | corrupted (expected / got) | reason |", "|---|---|---|---|---|"]
        for o in misses:
            exp = (o.case.title or "(no crash)").replace("|", "\\|")
            got = (o.got_title or "(no crash)").replace("|", "\\|")
            lines.append(f"| {o.case.name} | `{exp}` | `{got}` | {o.case.corrupted} / {o.got_corrupted} "
                         f"| {o.category} |")
    lines += [
        "",
        "Reason categories: *different guilty frame* — same kind of crash, another function named;",
        "*different crash kind or report chosen* — another title rule or another report of the log",
        "won; *crash not found* / *false crash*; *corrupted flag differs* — same title, but syzkaller",
        "and coreepi disagree on whether the report is damaged (counted as agreement for the title",
        "rate, listed here for completeness).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--testdata", type=Path, default=DEFAULT_TESTDATA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not args.testdata.is_dir():
        print(f"{args.testdata}: testdata folder not found", file=sys.stderr)
        return 2
    result = evaluate(args.testdata)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(result), encoding="utf-8")
    print(f"title agreement {result.title_agreement:.2%}; {len(result.misses)} misses; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
