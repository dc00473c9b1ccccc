"""The options of ``coreepi inspect``, written once, and a reader of an
ordinary ``inspect`` command line that needs no Typer.

:mod:`coreepi.cli.artifact` builds the Typer command from :data:`OPTIONS`
(flags, metavars, help), so ``--help`` and every error message stay Typer's.
``coreepi inspect CORE [options]`` itself is read by
:func:`parse_inspect_argv` before Typer is imported: Typer, and the pydantic
TypeAdapters it builds for each option, cost ~0.08 s of CPU on every run,
a sixth of what ``inspect`` of a small core costs in all. Anything it does not
read plainly (``--help``, a short or unknown option, a missing value, two
files, ``--``) goes to Typer as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["FILE_HELP", "OPTIONS", "InspectOption", "option", "parse_inspect_argv"]

FILE_HELP = ("Crash artifact: ELF core (plain or zstd/gzip/bzip2/xz), JVM hs_err log or "
             "kernel log; - (or a pipe such as /dev/stdin) reads standard input, spooled to "
             "a temporary file under $TMPDIR (coredumpctl dump PID | coreepi inspect -).")


@dataclass(frozen=True)
class InspectOption:
    """One option: ``dest`` is the parameter name of
    :func:`coreepi.cli.inspect_run.run_inspect`; ``kind`` ``flag`` (a bool,
    no value), ``path``, ``paths`` (repeatable) or ``text``."""

    dest: str
    flag: str
    kind: Literal["flag", "path", "paths", "text"]
    help: str
    metavar: str | None = None


OPTIONS: tuple[InspectOption, ...] = (
    InspectOption("exe", "--exe", "path", "The crashed executable (if not at its path).", "PATH"),
    InspectOption("sysroot", "--sysroot", "path",
                  "Look for the core's modules under this directory.", "DIR"),
    InspectOption("debug_dir", "--debug-dir", "paths",
                  "Directory of debug files (.build-id/xx/…); repeatable.", "DIR"),
    InspectOption("all_threads", "--all-threads", "flag",
                  "Every thread's backtrace, not only the crashing one's."),
    InspectOption("registers", "--registers", "flag", "The registers of the threads shown."),
    InspectOption("json_output", "--json", "flag", "Print the CrashReport as JSON."),
    InspectOption("no_analysis", "--no-analysis", "flag", "Only parse: no phenotypes or signature."),
    InspectOption("case_defs", "--case-defs", "path",
                  "TOML file of user case definitions (CEL expressions); shows which fire.",
                  "FILE"),
    InspectOption("host_id", "--host-id", "text",
                  "Host the crash happened on (for the server's counts).", "HOST"),
    InspectOption("captured_at", "--captured-at", "text",
                  "When it crashed, ISO-8601 (naive means UTC).", "TIME"),
    InspectOption("siglists", "--siglists", "path",
                  "Your own signature lists (prefix.txt, irrelevant.txt, ...), added to the "
                  "built-in ones (default: $COREEPI_SIGLISTS).", "DIR"),
)

_BY_FLAG = {o.flag: o for o in OPTIONS}


def option(dest: str) -> InspectOption:
    """The option whose parameter is ``dest`` (KeyError if none)."""
    return next(o for o in OPTIONS if o.dest == dest)


def parse_inspect_argv(argv: list[str]) -> dict[str, object] | None:
    """The keyword arguments of ``run_inspect`` for the words after
    ``inspect`` (``core`` and every option's ``dest``, defaults filled in),
    or None when Typer should read them (see the module docstring)."""
    values: dict[str, object] = {o.dest: (False if o.kind == "flag" else None) for o in OPTIONS}
    values["debug_dir"] = []
    core: Path | None = None
    words = iter(argv)
    for word in words:
        name, equals, inline = word.partition("=")
        if word.startswith("--"):
            spec = _BY_FLAG.get(name)
            if spec is None or (spec.kind == "flag" and equals):
                return None
            if spec.kind == "flag":
                values[spec.dest] = True
                continue
            value = inline if equals else next(words, None)
            if not value or (not equals and value.startswith("-")):
                return None
            if spec.kind == "paths":
                values[spec.dest].append(Path(value))  # type: ignore[attr-defined]
            else:
                values[spec.dest] = Path(value) if spec.kind == "path" else value
        elif (word.startswith("-") and word != "-") or core is not None or not word:
            return None
        else:
            core = Path(word)
    if core is None:
        return None
    values["core"] = core
    return values
