"""Every input of the fuzz corpus, and every input that once broke a parser
(``tests/fuzz/crashes/<target>/``), still gets the target's property: the
parser returns, or raises its documented clear error — nothing else.

Runs in the default lane without atheris: plain replays, a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from targets import CORPUS, CRASHES, TARGETS


def _inputs() -> list[tuple[str, Path]]:
    out = []
    for name in TARGETS:
        for root in (CORPUS / name, CRASHES / name):
            out += [(name, p) for p in sorted(root.glob("*")) if p.is_file()]
    return out


def test_every_target_has_a_seed_corpus() -> None:
    for name in TARGETS:
        seeds = [p for p in (CORPUS / name).glob("*") if p.is_file()]
        assert len(seeds) >= 2, f"{name}: seed corpus tests/fuzz/corpus/{name}/ is thin"


@pytest.mark.parametrize(("name", "path"), _inputs(), ids=lambda v: getattr(v, "name", v))
def test_replay(name: str, path: Path) -> None:
    target = TARGETS[name]
    try:
        target.run(path.read_bytes())
    except target.allowed as exc:
        text = str(exc)
        assert text and "\n" not in text.strip(), f"{name}: not one clear line: {text!r}"
