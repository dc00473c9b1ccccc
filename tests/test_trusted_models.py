"""The log parsers build their CrashReports without validation
(:mod:`coreepi.model.trusted`); these tests hold them to it.

* The parsers' output on every vendored kernel and hs_err input is the one
  recorded before the speed work (``tests/data/parser-golden.json``, see
  ``tests/parser_golden.py``): byte-identical JSON, same report counts.
* The same inputs parsed with validation forced (``validating()``) give
  equal objects with byte-identical JSON, and every report survives a
  round trip through validation (so none holds a value the model refuses).
* ``trusted`` itself: field order, defaults, normalisers, refusals.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from parser_golden import GOLDEN, cases, digest

from coreepi.model.report import (
    AnalysisInfo,
    CrashReport,
    Frame,
    FrameTrust,
    HostFacts,
    Phenotype,
    Source,
    Thread,
)
from coreepi.model.trusted import trusted, validating
from coreepi.parse.kernel.oops import parse_kernel_log
from coreepi.parse.kernel.trace import read_frames

CASES = list(cases())


def test_parser_output_is_the_recorded_one() -> None:
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = {key: digest(parse(path, data)) for key, path, data, parse in CASES}
    changed = sorted(k for k in want if got.get(k) != want[k])
    assert set(got) == set(want)
    assert changed == [], f"{len(changed)} inputs parse differently, e.g. {changed[:5]}"
    # the corpus is the one the benchmark counts: 713 titled logs, 771 reports
    assert want["syz-concatenated"][0] == 771


@pytest.mark.parametrize("group", ["syz-concatenated", "syz/", "wild/", "jvm-hs_err"])
def test_trusted_reports_equal_validated_ones(group: str) -> None:
    compared = 0
    for key, path, data, parse in CASES:
        if not key.startswith(group):
            continue
        fast = parse(path, data)
        with validating():
            slow = parse(path, data)
        assert len(fast) == len(slow), key
        for a, b in zip(fast, slow, strict=True):
            # duration_seconds is a measured time: the only field allowed to differ
            b.analysis.duration_seconds = a.analysis.duration_seconds
            assert a == b, key
            assert a.model_dump_json() == b.model_dump_json(), key
            assert CrashReport.model_validate_json(a.model_dump_json()) == a, key
            compared += 1
    assert compared >= {"syz-concatenated": 771, "syz/": 700, "wild/": 40, "jvm-hs_err": 180}[group]


def test_field_order_defaults_and_fields_set_match_validation() -> None:
    values = {"index": 2, "trust": FrameTrust.CFI, "pc": 0xFFFF_FFFF_8100_0000, "function": "f"}
    fast, slow = trusted(Frame, **values), Frame(**values)
    assert list(fast.__dict__) == list(slow.__dict__)
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set == set(values)
    # default factories give each object its own container
    a, b = trusted(Thread, tid=1), trusted(Thread, tid=2)
    a.frames.append(fast)
    assert b.frames == [] and a.registers is not b.registers


def test_field_normalisers_still_run() -> None:
    """CrashReport.captured_at is normalised to UTC by a field validator;
    trusted() applies it too."""
    local = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    fast = trusted(CrashReport, crash_id="c", source=Source.HS_ERR, captured_at=local,
                   analysis=trusted(AnalysisInfo, analyzer_version="v"))
    assert fast.captured_at == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    assert fast.captured_at.tzinfo is UTC
    naive = trusted(CrashReport, crash_id="c", source=Source.HS_ERR, captured_at=datetime(2026, 3, 1),
                    analysis=trusted(AnalysisInfo, analyzer_version="v"))
    assert naive.captured_at == datetime(2026, 3, 1, tzinfo=UTC)


def test_unknown_and_missing_fields_are_refused() -> None:
    with pytest.raises(TypeError, match=r"unknown fields \['colour'\]"):
        trusted(HostFacts, colour="red")
    with pytest.raises(TypeError, match=r"missing fields \['index', 'pc', 'trust'\]"):
        trusted(Frame)


def test_assignment_on_a_trusted_model_is_still_validated() -> None:
    frame = trusted(Frame, index=0, pc=None, trust=FrameTrust.CFI)
    with pytest.raises(ValueError):
        frame.line = -1
    frame.pc = "0x10"  # type: ignore[assignment]
    assert frame.pc == 16


def test_validating_forces_validation() -> None:
    assert trusted(Phenotype, name="p", confidence=7.0).confidence == 7.0  # trusted: not checked
    with validating(), pytest.raises(ValueError):
        trusted(Phenotype, name="p", confidence=7.0)


def test_garbled_frame_address_falls_back_as_before() -> None:
    """A frame offset past 64 bits was refused by the model; the trace
    reader now refuses it itself, and the crash is still counted (minimal
    report) instead of carrying a value the store cannot hold."""
    with pytest.raises(ValueError, match="64-bit"):
        read_frames(["BUG: x", "Call Trace:", " f+0x1ffffffffffffffff/0x2"])
    log = "[ 1.0] BUG: unable to handle kernel\n[ 1.0] Call Trace:\n[ 1.0]  f+0x1ffffffffffffffff/0x20\n"
    (report,) = parse_kernel_log(log)
    assert report.artifact is not None and report.artifact.kernel is None
    assert "parser error ValueError" in report.analysis.warnings[0]
