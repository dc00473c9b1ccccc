"""Where the real-world test inputs are: the one place that knows.

* :func:`vendored` — fixtures that travel with the repository, in
  ``tests/data/vendored/<name>/`` (licences that fit Apache-2.0; source,
  commit and licence of each in ``tests/data/NOTICE``): syzkaller's kernel
  crash logs, krashpad's hs_err logs, gpud's kernel logs. Always present; a
  missing folder is an error, not a skip.
* :func:`shared` — data that may not be redistributed with the project (the
  GPL-3.0 elfutils cores), read from ``shared/testdata/<name>/`` beside the
  project (``../shared/testdata``; from a git worktree, the nearest ancestor
  directory that has ``shared/testdata``), or from ``$COREEPI_SHARED_TESTDATA``.
  ``None`` where absent: the caller skips with :func:`shared_missing`'s reason.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests" / "data" / "vendored"
SHARED_ENV = "COREEPI_SHARED_TESTDATA"


def vendored(name: str) -> Path:
    """``tests/data/vendored/<name>``; raises if the folder is not there."""
    path = VENDORED / name
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: vendored test data missing (see tests/data/NOTICE)")
    return path


def _shared_root() -> Path | None:
    env = os.environ.get(SHARED_ENV)
    if env:
        return Path(env) if Path(env).is_dir() else None
    for parent in ROOT.parents:
        candidate = parent / "shared" / "testdata"
        if candidate.is_dir():
            return candidate
    return None


def shared(name: str) -> Path | None:
    """``../shared/testdata/<name>`` if that folder exists here, else ``None``."""
    root = _shared_root()
    if root is None or not (root / name).is_dir():
        return None
    return root / name


def shared_missing(name: str) -> str:
    """The skip reason for a test that needs ``shared(name)`` and did not get it."""
    return (
        f"shared/testdata/{name} not found beside {ROOT} (nor ${SHARED_ENV} set): "
        "it is not redistributed with coreepi (licence), only CI and dev machines have it"
    )
