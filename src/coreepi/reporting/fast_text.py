"""Printing to a Rich console without paying Rich's per-call cost when it
changes nothing: what ``coreepi inspect`` needs for a log with thousands of
crashes (a 73 MB kernel log with 20,000 oopses took 135 s in text mode and
23 s with ``--json``; Rich's ~1 ms per ``print`` and ~7 ms per table were
the difference).

- :func:`print_line`: on a console without colours (redirected output,
  ``NO_COLOR``, a dumb terminal), a line of printable one-column characters
  is word-wrapped here exactly as Rich wraps it (Rich's own ``divide_line``)
  and written; anything else goes through ``console.print``.
- :func:`print_table`: a table is laid out once per distinct content and
  console width, and the text reused (big logs repeat the same stack).
- :func:`print_rule`: ``console.rule()``.

The output is byte for byte what ``console.print`` gives
(``tests/test_hardening_text.py`` compares them).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Hashable

from rich._emoji_replace import _emoji_replace
from rich._wrap import divide_line
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["print_line", "print_rule", "print_table"]

_RENDERED: dict[Hashable, str] = {}
_RENDERED_MAX = 1024  # distinct tables kept (each a few KB of text)


def _plain_console(console: Console) -> bool:
    """Whether ``console`` prints text as is: no colours and no recording."""
    return console.color_system is None and not console.record and not console.is_jupyter


def print_line(console: Console, text: str | Text) -> None:
    """``console.print(text)`` (a ``str`` is printed without markup)."""
    plain = text.plain if isinstance(text, Text) else text
    if (_plain_console(console) and plain.isprintable() and cell_len(plain) == len(plain)
            # Rich replaces :emoji: codes in a str (not in a Text)
            and (isinstance(text, Text) or ":" not in plain or _emoji_replace(plain) == plain)):
        console.file.write(_wrapped(plain, console.width))
    else:
        console.print(text, markup=False)


def _wrapped(plain: str, width: int) -> str:
    """``plain`` (one line of one-column characters) word-wrapped to ``width``
    columns as Rich's ``Text.wrap`` does it (whitespace at a break is kept up
    to the width), each line ending in a newline."""
    if len(plain) <= width:
        return plain + "\n"
    offsets = [0, *divide_line(plain, width, fold=True), len(plain)]
    lines = []
    for start, end in zip(offsets, offsets[1:], strict=False):
        line = plain[start:end]
        if len(line) > width:  # Rich's rstrip_end: blanks beyond the width are dropped
            excess = len(line) - width
            blanks = len(line) - len(line.rstrip())
            line = line[: len(line) - min(blanks, excess)]
        lines.append(line + "\n")
    return "".join(lines)


def print_rule(console: Console) -> None:
    """``console.rule()``; a line of ``─`` written as is on a console without colours."""
    if _plain_console(console) and console.encoding.lower().startswith("utf"):
        console.file.write("─" * console.width + "\n")
    else:
        console.rule()


def print_table(console: Console, key: Hashable, build: Callable[[], Table]) -> None:
    """``console.print(build())``, the text reused for a table of the same
    ``key`` (everything the table shows) printed before on a console of the
    same width and colours. A recording console (export) is always printed to."""
    if console.record:
        console.print(build())
        return
    full_key = (key, console.width, console.color_system, console.no_color, console.is_terminal)
    text = _RENDERED.get(full_key)
    if text is None:
        scratch = Console(file=io.StringIO(), width=console.width, no_color=console.no_color,
                          force_terminal=console.is_terminal, legacy_windows=False,
                          color_system=console.color_system)  # type: ignore[arg-type]
        scratch.print(build())
        text = scratch.file.getvalue()  # type: ignore[attr-defined]
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        _RENDERED[full_key] = text
    console.file.write(text)
