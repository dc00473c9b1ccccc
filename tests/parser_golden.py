"""Digests of every CrashReport the log parsers make from the vendored
corpora, to prove a speed change left their output byte-identical.

Corpora: syzkaller's kernel logs (each alone, and all 713 titled ones
concatenated as ``benchmarks/bench_logs.py`` feeds them), the kernel-wild
logs, and krashpad's hs_err logs (Linux and Windows; each whole, cut in
half and doubled). Each entry is ``[number of reports, sha256 of their
model_dump_json() joined]``, with the two things that differ between runs
masked: the analyzer version string and ``duration_seconds``.

Regenerate (only when a change of output is intended, and say why in the
commit)::

    .venv/bin/python tests/parser_golden.py tests/data/parser-golden.json
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from testdata import ROOT, vendored

from coreepi.model.report import CrashReport
from coreepi.parse.jvm.hs_err import parse_hs_err
from coreepi.parse.kernel.oops import parse_kernel_log

GOLDEN = ROOT / "tests" / "data" / "parser-golden.json"
_VERSION = re.compile(r'"analyzer_version":"coreepi [^"]* (kernel-oops|hs_err)"')
_DURATION = re.compile(r'"duration_seconds":[0-9.e-]+')

Parse = Callable[[Path, bytes], list[CrashReport]]


def stable_json(report: CrashReport) -> str:
    """The report's JSON with the run-dependent values masked."""
    text = _VERSION.sub(r'"analyzer_version":"ANALYZER \1"', report.model_dump_json())
    return _DURATION.sub('"duration_seconds":null', text)


def syzkaller_concatenated() -> bytes:
    """The titled syzkaller logs without their header, one after another
    (the benchmark's input, once)."""
    pieces = []
    for f in sorted(vendored("kernel-oops-syzkaller").iterdir()):
        head, sep, body = f.read_bytes().partition(b"\n\n")
        if sep and b"TITLE:" in head:
            pieces.append(body if body.endswith(b"\n") else body + b"\n")
    return b"".join(pieces)


def _kernel(path: Path, data: bytes) -> list[CrashReport]:
    return parse_kernel_log(data, name=path.name)


def _hs_err(path: Path, data: bytes) -> list[CrashReport]:
    report = parse_hs_err(data, name=path.name)
    return [] if report is None else [report]


def cases() -> Iterator[tuple[str, Path, bytes, Parse]]:
    """(key, file, input bytes, parser) of every corpus input."""
    syz = vendored("kernel-oops-syzkaller")
    yield "syz-concatenated", syz, syzkaller_concatenated(), _kernel
    for f in sorted(syz.iterdir()):
        yield f"syz/{f.name}", f, f.read_bytes(), _kernel
    for f in sorted((ROOT / "tests" / "data" / "kernel-wild").glob("*.log")):
        yield f"wild/{f.name}", f, f.read_bytes(), _kernel
    for folder in ("jvm-hs_err-krashpad", "jvm-hs_err-krashpad-windows"):
        for f in sorted(vendored(folder).iterdir()):
            data = f.read_bytes()
            for variant, cut in (("", data), ("#half", data[: len(data) // 2]), ("#double", data * 2)):
                yield f"{folder}/{f.name}{variant}", f, cut, _hs_err


def digest(reports: Iterable[CrashReport]) -> list[object]:
    """[count, sha256 of the reports' stable JSON]."""
    texts = [stable_json(r) for r in reports]
    return [len(texts), hashlib.sha256("\n".join(texts).encode()).hexdigest()]


def digests() -> dict[str, list[object]]:
    """Every case's digest, by key."""
    return {key: digest(parse(path, data)) for key, path, data, parse in cases()}


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN
    found = digests()  # one case a line, for readable diffs
    rows = ",\n".join(f"{json.dumps(k)}: {json.dumps(found[k])}" for k in sorted(found))
    out.write_text("{\n" + rows + "\n}\n", encoding="utf-8")
    print(f"wrote {out}")
