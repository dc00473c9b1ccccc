"""Python frames of a CPython process's core, read with pystack.

pystack (https://github.com/bloomberg/pystack, ``pystack.engine
.get_process_threads_for_core``) finds the interpreter state in the core's
memory (debug offsets, symbols, the .bss or the ELF data of libpython) and
walks each thread's frame chain. coreepi keeps, for every thread, the
Python functions in the order of its native frames (innermost first), as
:class:`coreepi.model.report.RuntimeFrame` with the thread's id.

Only processes that look like CPython are read (the executable is named
``python3…``, or a module is ``libpython3….so``): pystack is imported, and
costs time, only for them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from coreepi.model.report import Module, Runtime, RuntimeFrame

__all__ = ["is_cpython", "python_runtime"]

_PYTHON_EXE = re.compile(r"python3(\.\d+)?[a-z]*")
_LIBPYTHON = re.compile(r"libpython3\.\d+[a-z]*\.so(\.[\d.]+)?")


def is_cpython(modules: list[Module]) -> bool:
    """True when the main module (first) is a ``python3…`` executable or any
    module is ``libpython3.X.so`` (embedding programs: uWSGI, Blender …)."""
    if modules and _PYTHON_EXE.fullmatch(os.path.basename(modules[0].path)):
        return True
    return any(_LIBPYTHON.fullmatch(os.path.basename(m.path)) for m in modules)


def python_runtime(
    core: str | os.PathLike[str], executable: str | os.PathLike[str], warnings: list[str]
) -> Runtime | None:
    """The CPython runtime of ``core`` (its ``executable`` must be readable):
    version ``"3.X"`` and every thread's Python frames, innermost first, each
    with ``thread_id``; None, with a line in ``warnings``, when pystack is
    missing or cannot read the interpreter state."""
    try:
        from pystack.engine import NativeReportingMode, get_process_threads_for_core
        from pystack.errors import PystackError
    except ImportError:
        warnings.append("CPython process, but pystack is not installed: no Python frames")
        return None
    if not Path(executable).is_file():
        warnings.append(f"CPython process, but its executable {executable} is not at hand: "
                        "no Python frames (give --exe)")  # fmt: skip
        return None
    try:
        threads = list(
            get_process_threads_for_core(
                Path(core), Path(executable), native_mode=NativeReportingMode.OFF
            )
        )
    except (PystackError, OSError, RuntimeError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # no help text
        warnings.append(f"CPython process, but pystack could not read its Python frames: {reason}")
        return None
    version = next((t.python_version for t in threads if t.python_version), None)
    frames = [
        RuntimeFrame(
            function=frame.code.scope,
            file=frame.code.filename or None,
            line=frame.code.location.lineno if frame.code.location.lineno > 0 else None,
            kind="python",
            thread_id=thread.tid,
        )
        for thread in threads
        for frame in reversed(list(thread.frames))
        if not frame.is_shim
    ]
    return Runtime(
        kind="python",
        version=f"{version[0]}.{version[1]}" if version else None,
        frames=frames,
    )
