"""``--help`` in the usual Unix shape: ``--port N``, ``FILE``, ``[DIR]...``.

Typer (0.29) shows an option without a metavar with its Python type
(``--symbol-dir <list[Path]>``), an argument with its type after its name
(``FILE <path>``) and a required argument in braces (``{FILE}``).
:func:`tidy_help` walks the command tree once, before it runs, and gives
every option a metavar named after its type (``PATH``, ``N``, ``NUM``,
``TEXT``) unless it has one, and every argument the plain shape.
"""

from __future__ import annotations

from typing import Any

import typer.core

__all__ = ["tidy_help"]

_NAMES = {"path": "PATH", "int": "N", "int range": "N", "float": "NUM", "float range": "NUM",
          "str": "TEXT", "datetime": "TIME"}


def _metavar(option: typer.core.TyperOption, ctx: Any) -> str:
    label = option.display_type(ctx).strip("<>")
    if label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    return _NAMES.get(label.lower(), label.upper())


class _PlainArgument(typer.core.TyperArgument):
    """An argument shown as ``FILE`` (required) or ``[FILE]``, without its Python type."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if name.startswith("["):  # a metavar that spells its own shape: [-- ARGS...]
            return name
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")


def tidy_help(command: Any, ctx: Any = None) -> None:
    """Give every option of ``command`` and its sub-commands a Unix metavar
    and every argument the plain shape (in place)."""
    for param in getattr(command, "params", []):
        if isinstance(param, typer.core.TyperOption):
            if param.metavar is None and not param.is_flag and not param.count:
                param.metavar = _metavar(param, ctx)
        elif type(param) is typer.core.TyperArgument:
            param.__class__ = _PlainArgument
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub, ctx)
