"""The ``coreepi`` console script (``python -m coreepi`` too). Two command
lines run here without importing Typer:

- ``coreepi collect [--config F] -- %P …``, the kernel's core_pattern pipe
  handler: it runs once per crash, and the crashed process stays in the
  kernel until its core is read, so it goes straight to
  :func:`coreepi.capture.collect.run_collect` (Typer and Click were about a
  third of its start-up);
- an ordinary ``coreepi inspect CORE [options]``
  (:mod:`coreepi.cli.inspect_args` says why); it also collects cycles
  rarely (:data:`YOUNG_GC_THRESHOLD`) and ends without the interpreter's
  teardown (:func:`exit_without_teardown`): a one-shot command's start-up is
  most of what it costs (``docs/performance.md``).

Every other command line (``collect --help``, ``collect
--from-systemd-coredump``, …) goes to :func:`coreepi.cli.main.main`, which
gives the same result.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import NoReturn

__all__ = ["YOUNG_GC_THRESHOLD", "collect_args", "disable_pydantic_plugins",
           "exit_without_teardown", "main"]

#: Allocations between two collections of the cyclic collector's youngest
#: generation in ``inspect`` (Python's default: 700). With the default, its
#: start-up (imports, pydantic's schemas: hundreds of thousands of objects,
#: almost all of them kept) ran ~90 collections that freed ~700 objects, 3.5 %
#: of its CPU time (``perf record``); cyclic garbage still waits for at most
#: this many allocations.
YOUNG_GC_THRESHOLD = 100_000
#: the values of PYDANTIC_DISABLE_PLUGINS for which pydantic's ``get_plugins`` returns ()
_ALL_PLUGINS_OFF = ("__all__", "1", "true")
_PLUGIN_LOADER = "pydantic.plugin._loader"


def collect_args(argv: list[str]) -> tuple[list[str], str | None] | None:
    """(specifiers, config path or None) of ``collect [--config F | --config=F] [--] SPEC…``;
    None for anything else (left to the Typer app)."""
    config: str | None = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            config, i = argv[i + 1], i + 2
        elif arg.startswith("--config="):
            config, i = arg.split("=", 1)[1], i + 1
        else:
            return None
    return argv[i + 1:], config


def disable_pydantic_plugins() -> None:
    """Turn pydantic's plugins off (coreepi uses none) unless the user's own
    PYDANTIC_DISABLE_PLUGINS says otherwise; with every plugin off, spare
    the import that pydantic's plugin loader makes all the same.

    pydantic's plugin loader (``pydantic/plugin/_loader.py``) imports
    ``importlib.metadata`` at module level, on the first model class, even
    when its ``get_plugins()`` is going to return ``()`` because plugins are
    off: ~0.025 CPU-s (the ``email`` package and its parsers) of every
    ``inspect``. With every plugin off, the loader module is registered as a
    module whose ``get_plugins()`` returns ``()``, what pydantic's own returns
    then; pydantic imports nothing else from it
    (``tests/test_inspect_startup.py`` checks its sources)."""
    # as in coreepi.cli.main.main: no scan for pydantic plugins
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if (os.environ["PYDANTIC_DISABLE_PLUGINS"] in _ALL_PLUGINS_OFF
            and _PLUGIN_LOADER not in sys.modules):
        loader = ModuleType(_PLUGIN_LOADER, "pydantic's plugin loader with every plugin off")
        loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
        sys.modules[_PLUGIN_LOADER] = loader


def _no_plugins() -> Iterable[object]:
    return ()


def main() -> None:
    """Console-script entry point."""
    from coreepi.cli.basics import setup_streams

    setup_streams()
    args = sys.argv[1:]
    if args[:1] == ["collect"] and (collect := collect_args(args[1:])) is not None:
        disable_pydantic_plugins()
        from coreepi.capture.collect import run_collect
        from coreepi.ingest.scratch import exit_on_sigterm

        exit_on_sigterm()  # as the Typer app's callback does
        sys.exit(run_collect(*collect))
    if args[:1] == ["inspect"]:
        from coreepi.cli.inspect_args import parse_inspect_argv

        arguments = parse_inspect_argv(args[1:])
        if arguments is not None:
            disable_pydantic_plugins()
            gc.set_threshold(YOUNG_GC_THRESHOLD)
            from coreepi.cli.basics import run_guarded

            run_guarded(lambda: _inspect(arguments))
            exit_without_teardown()
    from coreepi.cli.main import main as typer_main

    typer_main()


def _inspect(arguments: dict[str, object]) -> None:
    """``coreepi inspect`` without Typer (a closed pipe: see
    :func:`coreepi.cli.basics.run_guarded`)."""
    from coreepi.cli.inspect_run import run_inspect
    from coreepi.ingest.scratch import exit_on_sigterm

    exit_on_sigterm()  # as the Typer app's callback does
    run_inspect(**arguments)  # type: ignore[arg-type]


def exit_without_teardown() -> NoReturn:
    """Exit with status 0 once the command's output is flushed and the
    ``atexit`` handlers (the scratch directory's removal, ``weakref.finalize``
    callbacks, logging's flush) have run, without the interpreter's teardown:
    freeing every module and object one by one cost ~0.07 CPU-s of an
    ``inspect`` of a small core (~15 %, gdb's whole run is ~0.3 s), and a
    command that is done has nothing left to free (the kernel takes the
    memory back at once)."""
    sys.stdout.flush()  # already done by run_guarded, which handles a closed pipe
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(0)
