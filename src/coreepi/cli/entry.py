"""The ``coreepi`` console script. An ordinary ``coreepi inspect CORE
[options]`` runs here without importing Typer (:mod:`coreepi.cli.inspect_args`
says why); every other command line goes to :func:`coreepi.cli.main.main`."""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main() -> None:
    """Console-script entry point."""
    args = sys.argv[1:]
    if args[:1] == ["inspect"]:
        from coreepi.cli.inspect_args import parse_inspect_argv

        arguments = parse_inspect_argv(args[1:])
        if arguments is not None:
            # as in coreepi.cli.main.main: no scan for pydantic plugins
            os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
            from coreepi.cli.basics import run_guarded

            run_guarded(lambda: _inspect(arguments))
            return
    from coreepi.cli.main import main as typer_main

    typer_main()


def _inspect(arguments: dict[str, object]) -> None:
    """``coreepi inspect`` without Typer; a closed pipe ends it as Click
    would (exit status 1, nothing more written)."""
    from coreepi.cli.inspect_run import run_inspect
    from coreepi.ingest.scratch import exit_on_sigterm

    exit_on_sigterm()  # as the Typer app's callback does
    try:
        run_inspect(**arguments)  # type: ignore[arg-type]
        sys.stdout.flush()
    except BrokenPipeError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the final flush must not raise again
        sys.exit(1)
