"""Keep the reading of a fleet directory inside it.

A fleet directory is filled by the nodes (rsync, an NFS drop): whoever can
write there could plant ``crashes/x.core -> /etc/shadow`` (or a link to the
server's token database or TLS key) and read it back as "the core" of a
crash with ``coreepi dump`` or ``GET /api/v1/crashes/ID/core``. So every file
found by scanning a directory must resolve (``os.path.realpath``: symlinks
and ``..`` followed) to a path inside the real path of the directory that
was given; a symlink leaving it is refused with one line and never opened.
Symlinks that stay inside are read like any file; hard links are plain files
(a node can only hard-link what it can already read, on the same file
system). A symlinked directory is not descended (``os.walk``'s default), and
is said so rather than skipped silently.

Only regular files are read: opening a FIFO blocks until a writer comes
(forever, and ingest could then not even be stopped by SIGTERM: its thread
waits in ``open``), a device may never end. :func:`irregular` tells them
apart by ``stat`` alone, which never blocks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["NOT_REGULAR", "irregular", "refusal"]

NOT_REGULAR = "not a regular file (a FIFO, socket or device): not read"


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def refusal(path: Path, root: Path) -> str | None:
    """Why ``path`` (a file or directory found under ``root``) must not be
    read, as one line, or None when it may be: its real path lies outside
    the real path of ``root`` (a symlink, or a symlinked directory on the way,
    leaving it), or it is a symlinked directory (not followed). Never opens
    ``path``; does not raise (a dangling link is left to the reader, which
    says "cannot read")."""
    real = os.path.realpath(path)
    if not _within(real, os.path.realpath(root)):
        return f"symlink to outside the fleet directory ({real}): not read"
    if path.is_symlink() and path.is_dir():
        return "symlinked directory: not followed (its files are read only where they lie)"
    return None


def irregular(path: Path) -> bool:
    """Whether ``path`` (symlinks followed) is there but is neither a regular
    file nor a directory: a FIFO, socket or device, never to be opened. Only
    stats it; False when it cannot be stat'ed (the reader says why)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
