"""Long output through a pager on a terminal, as git does.

The pager is ``$COREEPI_PAGER``, else ``$PAGER``, else ``less``; ``less``
gets ``LESS=FRX`` unless ``$LESS`` is set (quit at once when the text fits
one screen, keep colours, leave the text on the screen). Not a terminal, an
empty pager or ``cat``: the text is written as it is.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys

from coreepi.cli.basics import encode_stdout, write_stdout

__all__ = ["page", "pager_command"]


def pager_command() -> list[str] | None:
    """The pager's argv, or None when output goes straight to stdout."""
    if not sys.stdout.isatty():
        return None
    spec = os.environ.get("COREEPI_PAGER", os.environ.get("PAGER", "less")).strip()
    argv = shlex.split(spec) if spec else []
    if not argv or argv == ["cat"] or shutil.which(argv[0]) is None:
        return None
    return argv


def page(text: str) -> None:
    """Write ``text`` to stdout, through the pager when there is one."""
    argv = pager_command()
    if argv is None:
        write_stdout(text)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    sys.stdout.flush()
    # Ctrl-C belongs to the pager (less uses it to stop a search), as in git
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
        assert proc.stdin is not None
        try:
            proc.stdin.write(encode_stdout(text))  # the pager reads our locale's encoding
            proc.stdin.close()
        except BrokenPipeError:  # the reader quit before the end: fine
            pass
        proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
