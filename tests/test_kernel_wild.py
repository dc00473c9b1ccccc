"""Real kernel crash logs from the wild against hand-checked truth.

Corpus: ``tests/data/kernel-wild/NNN-<arch>-<shape>.log`` — kernel log output
posted publicly to Linux mailing lists (x86-64, i386, arm, arm64, ppc64,
s390x; none from syzkaller), with one manifest, ``truth.toml``, giving per
log its source and what a careful reader takes from it: title (syzkaller's
style), pid, comm, kernel release, taint letters, number of modules in
``Modules linked in:``, the first frames of the crashing context's trace, the
function of the faulting-pc line and the architecture. See
``tests/data/kernel-wild/README.md`` for how the truth was read.

Each case parses its log with the project's kernel-log parser, takes the first
report, and compares every field the truth gives. Cases the parser gets wrong
today are listed in ``KNOWN_GAPS`` (strict xfail: a case that starts passing
must leave the list). ``docs/parsers/kernel-wild.md`` is the table of cases by
arch and shape with today's result; regenerate it with
``.venv/bin/python tests/test_kernel_wild.py`` after changing the parser or
the corpus (``test_docs_page_is_current`` checks it).
"""

from __future__ import annotations

import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "kernel-wild"
DOCS_PAGE = ROOT / "docs" / "parsers" / "kernel-wild.md"


def _parser():  # type: ignore[no-untyped-def]
    """The kernel-log parser under test, followed by the one analyze() every
    report goes through (it makes the title the signature and the taint and
    modules phenotype evidence); the one place that names their modules."""
    from coreepi.analyze import analyze
    from coreepi.parse.kernel.oops import parse_kernel_log

    def parse(source: Any, **kwargs: Any) -> list[Any]:
        return [analyze(report) for report in parse_kernel_log(source, **kwargs)]

    return parse


# truth arch -> CrashReport.arch
_ARCH: dict[str, str] = {"x86_64": "x86_64", "i386": "i386", "arm": "arm", "arm64": "aarch64",
                         "ppc64": "ppc64", "s390x": "s390x"}

FIELDS = ("found", "title", "pid", "comm", "kernel", "tainted", "modules_count", "top_frames", "pc_function", "arch")

# Cases the current parser gets wrong, with the fields that differ. Remove a
# case when the parser is fixed (the xfail is strict).
KNOWN_GAPS: dict[str, str] = {
}


def load_cases() -> list[dict[str, Any]]:
    with open(CORPUS / "truth.toml", "rb") as handle:
        return list(tomllib.load(handle)["case"])


@dataclass
class Outcome:
    case: dict[str, Any]
    got: dict[str, Any] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.wrong


def _taint(report: Any) -> str | None:
    for phenotype in report.phenotypes:
        evidence = phenotype.evidence
        if phenotype.name.startswith("kernel-") and "tainted" in evidence:
            if evidence.get("tainted") is None:
                return None
            return str(evidence.get("taint") or "") if evidence.get("tainted") else ""
    return None


def _modules(report: Any) -> int | None:
    for phenotype in report.phenotypes:
        if "modules_linked_in" in phenotype.evidence:
            return len(phenotype.evidence.get("modules_linked_in") or [])
    return None


def evaluate(case: dict[str, Any]) -> Outcome:
    """Parse one log and compare with its truth; never raises for a parser bug
    (an exception counts as every field wrong)."""
    outcome = Outcome(case)
    try:
        reports = _parser()(CORPUS / case["file"], name=case["file"])
    except Exception as error:  # noqa: BLE001 - recorded as a failure of the case
        outcome.got["error"] = f"{type(error).__name__}: {error}"
        outcome.wrong = ["found"]
        return outcome
    if not reports:
        outcome.wrong = ["found"]
        return outcome
    report = reports[0]
    frames = report.threads[0].frames if report.threads else []
    context = [f for f in frames if f.trust is not None and f.trust.value == "context"]
    trace = [f.function for f in frames if f not in context]
    got = {
        "title": report.signature.signature if report.signature else None,
        "pid": report.process.pid if report.process else None,
        "comm": report.process.comm if report.process else None,
        "kernel": report.host.kernel if report.host else None,
        "tainted": _taint(report),
        "modules_count": _modules(report),
        "pc_function": context[0].function if context else None,
        "arch": report.arch,
    }
    outcome.got = got
    for key in ("title", "pid", "comm", "kernel", "tainted", "modules_count", "pc_function"):
        if key in case and got[key] != case[key]:
            outcome.wrong.append(key)
    if "top_frames" in case:
        want = list(case["top_frames"])
        got["top_frames"] = trace[: len(want)]
        if got["top_frames"] != want:
            outcome.wrong.append("top_frames")
    if got["arch"] != _ARCH[case["arch"]]:
        outcome.wrong.append("arch")
    return outcome


CASES = load_cases()


def _param(case: dict[str, Any]) -> Any:
    marks = []
    if case["file"] in KNOWN_GAPS:
        marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[case["file"]]))
    return pytest.param(case, id=case["file"].removesuffix(".log"), marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_wild_log(case: dict[str, Any]) -> None:
    outcome = evaluate(case)
    detail = {k: (case.get(k), outcome.got.get(k)) for k in outcome.wrong if k != "found"}
    assert outcome.ok, f"{case['file']}: wrong {outcome.wrong}; (truth, got) = {detail} {outcome.got.get('error', '')}"


def test_corpus_is_complete() -> None:
    logs = sorted(p.name for p in CORPUS.glob("*.log"))
    assert logs == sorted(c["file"] for c in CASES), "every log has exactly one [[case]] in truth.toml"
    assert len(CASES) >= 40
    by_arch = Counter(c["arch"] for c in CASES)
    assert set(by_arch) == set(_ARCH) and min(by_arch.values()) >= 4, by_arch
    for case in CASES:
        assert case["file"].split("-")[1] == case["arch"], case["file"]
        assert {"source", "licence", "shapes", "title", "kind"} <= set(case), case["file"]
    assert set(KNOWN_GAPS) <= set(logs), "KNOWN_GAPS names a log that does not exist"


# --------------------------------------------------------------------------- docs page


def render_docs(outcomes: list[Outcome]) -> str:
    passing = sum(o.ok for o in outcomes)
    lines = [
        "# Kernel log parser: real logs from the wild",
        "",
        "Generated by `tests/test_kernel_wild.py` (run it as a script to regenerate); do not edit by hand.",
        "",
        "Corpus: `tests/data/kernel-wild/` — real kernel crash logs posted to public Linux mailing lists",
        "(none from syzkaller), with hand-checked truth in `truth.toml` (sources and reading rules in the",
        "corpus README). A case passes when the first report of the log has the truth's title, pid, comm,",
        "kernel release, taint letters, module count, first trace frames, faulting-pc function and arch.",
        "",
        f"**{passing}/{len(outcomes)} cases fully right.**",
        "",
        "## By architecture",
        "",
        "| arch | cases | pass |",
        "|---|---|---|",
    ]
    for arch in _ARCH:
        mine = [o for o in outcomes if o.case["arch"] == arch]
        lines.append(f"| {arch} | {len(mine)} | {sum(o.ok for o in mine)} |")
    lines += ["", "## By shape", "", "| shape | cases | pass |", "|---|---|---|"]
    shapes = sorted({s for o in outcomes for s in o.case["shapes"]})
    for shape in shapes:
        mine = [o for o in outcomes if shape in o.case["shapes"]]
        lines.append(f"| {shape} | {len(mine)} | {sum(o.ok for o in mine)} |")
    wrong = Counter(k for o in outcomes for k in o.wrong)
    lines += ["", "## Fields wrong (cases)", "", "| field | cases wrong |", "|---|---|"]
    for key in FIELDS:
        lines.append(f"| {key} | {wrong.get(key, 0)} |")
    lines += ["", "## Cases", "", "| file | arch | kind | result |", "|---|---|---|---|"]
    for o in outcomes:
        result = "pass" if o.ok else "wrong: " + ", ".join(o.wrong)
        lines.append(f"| `{o.case['file']}` | {o.case['arch']} | {o.case['kind']} | {result} |")
    return "\n".join(lines) + "\n"


def test_docs_page_is_current() -> None:
    expected = render_docs([evaluate(c) for c in CASES])
    assert DOCS_PAGE.is_file() and DOCS_PAGE.read_text() == expected, (
        f"{DOCS_PAGE.relative_to(ROOT)} is stale: run `.venv/bin/python tests/test_kernel_wild.py`")


def test_known_gaps_match_failures() -> None:
    failing = {c["file"] for c in CASES if not evaluate(c).ok}
    assert failing == set(KNOWN_GAPS), (
        f"fixed (remove from KNOWN_GAPS): {sorted(set(KNOWN_GAPS) - failing)}; "
        f"new failures: {sorted(failing - set(KNOWN_GAPS))}")


if __name__ == "__main__":
    results = [evaluate(c) for c in CASES]
    DOCS_PAGE.write_text(render_docs(results))
    print(f"wrote {DOCS_PAGE.relative_to(ROOT)}: {sum(r.ok for r in results)}/{len(results)} pass")
    if "--gaps" in sys.argv:
        for r in results:
            if not r.ok:
                detail = "; ".join(f"{k}: want {r.case.get(k)!r} got {r.got.get(k)!r}" for k in r.wrong if k != "found")
                print(f'    "{r.case["file"]}": "{", ".join(r.wrong)}",  # {detail}')
