"""What every ``coreepi`` command shares and that needs no Typer: the
one-line error (exit status 2), the last-resort handler, ISO-8601 time
options and the output streams (ASCII stand-ins where the terminal's
encoding lacks a character, no escape sequences for ``TERM=dumb``). Kept apart from
:mod:`coreepi.cli.common` so that ``coreepi inspect`` can run without
importing Typer (:mod:`coreepi.cli.inspect_args`)."""

from __future__ import annotations

import codecs
import io
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INPUT_ERROR",
    "STAND_INS",
    "encode_stdout",
    "escapes_allowed",
    "fail",
    "parse_capture_time",
    "parse_when",
    "run_guarded",
    "setup_streams",
    "use_siglists",
    "write_stdout",
]

EXIT_INPUT_ERROR = 2
EXIT_BROKEN_PIPE = 141
"""Exit status when the reader of standard output went away (``| head``):
128 + SIGPIPE, what a shell reports for ``cat``/``seq``/``git`` killed by
the signal, so ``set -o pipefail`` sees the same as with coreutils; never 1,
which means a bug of ours."""


STAND_INS = "coreepi-stand-ins"
"""The codec error handler (:func:`codecs.register_error`) that
:func:`setup_streams` gives stdout and stderr: a character the stream's
encoding lacks (``PYTHONIOENCODING=iso-8859-1``, ``LC_ALL=C
PYTHONCOERCECLOCALE=0``) becomes its ASCII stand-in of :data:`ASCII_STAND_INS`,
else ``?`` — the output stays readable instead of an internal error."""

ASCII_STAND_INS: dict[str, str] = {
    "\u2013": "-", "\u2014": "-", "\u2212": "-", "\u2022": "*", "\u00b7": "-",
    "\u221e": "inf", "\u00d7": "x", "\u2026": "...", "\u2265": ">=", "\u2264": "<=",
    "\u2192": "->", "\u2190": "<-", "\u2018": "'", "\u2019": "'", "\u201c": '"',
    "\u201d": '"', "\u00b1": "+/-", "\u00b5": "u", "\u00a0": " ",
}
"""The characters coreepi's sentences and tables use, by their ASCII stand-in."""


def _stand_ins(exc: UnicodeError) -> tuple[str, int]:
    """The :data:`STAND_INS` handler: the stand-ins of ``exc``'s unencodable run."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    run = exc.object[exc.start:exc.end]
    return "".join(ASCII_STAND_INS.get(c, "?") for c in run), exc.end


def setup_streams() -> None:
    """Give stdout and stderr the :data:`STAND_INS` error handler (once, at
    start-up: every writer — ``sys.stdout.write``, Rich, :func:`write_stdout`,
    the pager — then goes through it). A stream that is not a text file
    (a test's capture) is left alone."""
    codecs.register_error(STAND_INS, _stand_ins)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=STAND_INS)


def encode_stdout(text: str) -> bytes:
    """``text`` in standard output's encoding, characters it lacks as their
    stand-ins (:data:`STAND_INS`): what goes to stdout's bytes or a pager."""
    codecs.register_error(STAND_INS, _stand_ins)  # idempotent; for callers without setup_streams
    return text.encode(getattr(sys.stdout, "encoding", None) or "utf-8", STAND_INS)


def escapes_allowed() -> bool:
    """Whether standard output may get ANSI escape sequences: a terminal
    whose ``$TERM`` is not ``dumb`` (Emacs' shell, ``watch``, CI log viewers
    show the codes raw). ``NO_COLOR`` is not checked here: Rich drops the
    colours and keeps bold and underline, as the convention allows."""
    return sys.stdout.isatty() and os.environ.get("TERM", "") not in ("dumb", "unknown")


def write_stdout(text: str) -> None:
    """Write ``text`` to standard output, all of it or BrokenPipeError.

    CPython's buffered writer, when a large write fills the pipe and the
    reader then goes away (``coreepi list --json | head -c 10``), returns
    the count written so far and drops the rest without an error, so the
    command would end with status 0 and half its output. The count is
    checked here: the next write of the rest raises, and
    :func:`run_guarded` exits with :data:`EXIT_BROKEN_PIPE`."""
    out = sys.stdout
    raw = getattr(out, "buffer", None)
    if raw is None:  # a stream without bytes underneath (a test's StringIO)
        out.write(text)
        return
    out.flush()  # what was written before goes first
    view = memoryview(encode_stdout(text))
    while view:
        view = view[raw.write(view):]
    raw.flush()


def fail(message: str) -> NoReturn:
    """One line ``coreepi: error: MESSAGE`` on stderr, exit status 2
    (SystemExit: Click lets it through, and so does a fast path without Click)."""
    sys.stderr.write(f"coreepi: error: {message}\n")
    raise SystemExit(EXIT_INPUT_ERROR)


def parse_when(value: str | None, option: str) -> datetime | None:
    """An ISO-8601 date or date-time (``Z`` or an offset; naive means UTC), in UTC."""
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value)
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except (ValueError, OverflowError):
        fail(f"{option} {value!r}: not an ISO-8601 date or date-time in range (e.g. "
             "2024-05-01 or 2024-05-01T12:00:00Z)")


def parse_capture_time(value: str | None, option: str) -> datetime | None:
    """:func:`parse_when`, then within the accepted time range of
    :mod:`coreepi.model.limits` (2000 to a day past this clock), so a time
    the server would answer with 422 is refused here, in one line, exit 2."""
    when = parse_when(value, option)
    if when is not None:
        from coreepi.model.limits import TimeRangeError, check_time

        try:
            check_time(when, option)
        except TimeRangeError as exc:
            fail(str(exc))
    return when


def run_guarded(call: Callable[[], None]) -> None:
    """Run a command: Ctrl-C is one line and exit status 130; standard output
    closed by its reader ends it quietly with :data:`EXIT_BROKEN_PIPE`; an
    exception that escapes is a bug of ours: one line and exit status 1 (the
    traceback with ``COREEPI_DEBUG=1``)."""
    try:
        call()
        sys.stdout.flush()  # a closed pipe shows here at the latest, not at exit
    except BrokenPipeError:
        # what is still buffered goes nowhere, so Python's exit-time flush
        # does not complain about the pipe again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    except KeyboardInterrupt:
        sys.stderr.write("coreepi: interrupted\n")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("COREEPI_DEBUG"):
            raise
        sys.stderr.write(
            f"coreepi: internal error: {type(exc).__name__}: {exc} "
            "(set COREEPI_DEBUG=1 for the traceback, and please report it)\n"
        )
        sys.exit(1)


def use_siglists(directory: Path | None) -> None:
    """Check the operator's signature lists (``--siglists DIR``, or
    ``$COREEPI_SIGLISTS`` when ``directory`` is None) and make ``DIR`` the
    lists of every analysis this process runs or starts: its children (the
    sandboxed workers, Dask's) read ``$COREEPI_SIGLISTS``. Exits 2 naming the
    directory when it is not one, holds no list, or a list does not compile."""
    from coreepi.analyze.signature.config import LIST_NAMES, SIGLISTS_ENV, load_lists

    if directory is None:
        if not os.environ.get(SIGLISTS_ENV):
            return
        directory = Path(os.environ[SIGLISTS_ENV])
    where = f"--siglists (COREEPI_SIGLISTS) {directory}"
    if not directory.is_dir():
        fail(f"{where}: no such directory")
    if not any((directory / f"{name}.txt").is_file() for name in LIST_NAMES):
        fail(f"{where}: holds none of {', '.join(f'{name}.txt' for name in LIST_NAMES)}")
    try:
        load_lists((directory.resolve(),))
    except (ValueError, OSError) as exc:
        fail(f"{where}: {exc}")
    os.environ[SIGLISTS_ENV] = str(directory.resolve())  # absolute: children may chdir
