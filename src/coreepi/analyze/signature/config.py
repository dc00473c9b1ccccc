"""Signature configuration and the frame lists (``siglists/*.txt``).

The lists are data, like Socorro's ``socorro/signature/siglists/``: one
regular expression per line, ``#`` starts a comment. :class:`SignatureConfig`
can add directories of lists of the same names; their lines extend the
built-in ones (or replace them, with ``builtin_lists=False``). See
``siglists/README.md`` and ``docs/signatures.md``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = [
    "LIST_NAMES",
    "SIGLISTS_DIR",
    "SIGLISTS_ENV",
    "SigLists",
    "SignatureConfig",
    "UnusableStackRule",
    "env_list_dirs",
    "load_lists",
]

SIGLISTS_DIR = Path(__file__).resolve().parent / "siglists"
LIST_NAMES = ("prefix", "irrelevant", "trim_modules", "unusable_stack")

#: directories of the operator's own lists (``os.pathsep``-separated), which
#: extend the built-in ones in every analysis; an environment variable so that
#: it reaches every analysis child (sandbox, warm zygote, Dask worker) unchanged
SIGLISTS_ENV = "COREEPI_SIGLISTS"


def env_list_dirs() -> tuple[Path, ...]:
    """The directories ``$COREEPI_SIGLISTS`` names (empty: none)."""
    value = os.environ.get(SIGLISTS_ENV, "")
    return tuple(Path(d) for d in value.split(os.pathsep) if d)


@dataclass(frozen=True)
class SignatureConfig:
    """How signatures are made.

    ``top_n``: frames in a signature (Socorro stops at its first non-prefix
    frame; see docs/signatures.md for why coreepi takes N). ``strip_templates``:
    collapse template arguments to ``<T>``. ``max_length``: characters,
    longer signatures are cut and end in ``...`` (Socorro: 255).
    ``list_dirs``: directories holding more ``prefix.txt``,
    ``irrelevant.txt``, ``trim_modules.txt``, ``unusable_stack.txt``.
    """

    top_n: int = 5
    strip_templates: bool = True
    max_length: int = 255
    list_dirs: tuple[Path, ...] = ()
    builtin_lists: bool = True

    def __post_init__(self) -> None:
        if self.top_n < 1:
            raise ValueError("top_n must be at least 1")
        if self.max_length < 16:
            raise ValueError("max_length must be at least 16")


@dataclass(frozen=True)
class UnusableStackRule:
    """One line of ``unusable_stack.txt``: a phenotype that makes the stack
    unusable, what follows it in the signature (``frames`` or ``exe``) and how
    many frames (None: the configured top N)."""

    phenotype: str
    key: str
    frames: int | None = None


@dataclass(frozen=True)
class SigLists:
    """The compiled lists. Patterns are matched with ``fullmatch``."""

    prefix: re.Pattern[str] | None
    irrelevant: re.Pattern[str] | None
    trim_modules: re.Pattern[str] | None
    unusable_stack: tuple[UnusableStackRule, ...]


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _compile(lines: list[str], name: str) -> re.Pattern[str] | None:
    """The lines as one alternation; ValueError naming the first bad line.
    Lines are compiled one by one only to find that line: compiling ~90
    patterns twice was ~10 ms of every ``coreepi inspect``."""
    if not lines:
        return None
    try:
        return re.compile("|".join(f"(?:{line})" for line in lines))
    except re.error as combined:
        for line in lines:
            try:
                re.compile(line)
            except re.error as exc:
                raise ValueError(
                    f"bad regular expression in {name}.txt: {line!r}: {exc}") from None
        raise ValueError(f"bad regular expressions in {name}.txt: {combined}") from None


def _unusable(lines: list[str]) -> tuple[UnusableStackRule, ...]:
    rules: dict[str, UnusableStackRule] = {}
    for line in lines:
        parts = line.split()
        if len(parts) not in (2, 3) or parts[1] not in ("frames", "exe"):
            raise ValueError(f"bad line in unusable_stack.txt: {line!r}")
        frames = int(parts[2]) if len(parts) == 3 else None
        # A later directory's line for the same phenotype replaces the earlier
        # one in place (keeping its precedence); new phenotypes go last.
        rules[parts[0]] = UnusableStackRule(parts[0], parts[1], frames)
    return tuple(rules.values())


@lru_cache(maxsize=16)
def load_lists(list_dirs: tuple[Path, ...] = (), builtin_lists: bool = True) -> SigLists:
    """Read and compile the lists; cached, since every crash uses them.
    Raises ValueError on a malformed line."""
    dirs = ((SIGLISTS_DIR,) if builtin_lists else ()) + tuple(Path(d) for d in list_dirs)
    lines = {
        name: [line for d in dirs for line in _lines(d / f"{name}.txt")] for name in LIST_NAMES
    }
    return SigLists(
        prefix=_compile(lines["prefix"], "prefix"),
        irrelevant=_compile(lines["irrelevant"], "irrelevant"),
        trim_modules=_compile(lines["trim_modules"], "trim_modules"),
        unusable_stack=_unusable(lines["unusable_stack"]),
    )
