"""Python frames in the signature of a native crash of a CPython process.

A crash in native code called from Python (an extension, or a C library
through ctypes) unwinds through the interpreter: ``_PyEval_EvalFrameDefault``,
``PyObject_Call`` …, frames every Python crash shares and that say nothing of
which Python code was running. When the report carries the process's Python
frames (pystack, :mod:`coreepi.parse.elf.python_frames`), the native frames
from the first interpreter frame outwards are replaced by the crashing
thread's Python frames, innermost first, each written ``module.function``
(the file's stem, or its package for ``__init__.py``: install paths and
line numbers change from host to host and release to release, names do
not). So ``ctypes.memset`` on NULL from ``write_record`` signs as
``memset | crash_ctypes.write_record | …``.

This is Sentry's and Socorro's "interpreter frames are glue" idea applied
at the boundary: the native frames above it (the library or extension
that crashed) stay, the glue goes, the Python caller takes its place.
"""

from __future__ import annotations

import posixpath
import re

from coreepi.analyze.signature.normalize import module_name
from coreepi.analyze.signature.rules import SigFrame, SignatureRule, SignatureState
from coreepi.model.report import RuntimeFrame

__all__ = ["PythonFrames", "is_interpreter_module", "python_frame_text"]

# Modules whose frames are the interpreter or its call machinery: libpython,
# a python3 executable (Debian's links libpython in statically), ctypes and
# the libffi it calls through.
_INTERPRETER = re.compile(
    r"libpython3\.\d+[a-z]*\.so(\.[\d.]+)?"
    r"|python3(\.\d+)?[a-z]*"
    r"|_ctypes(\.cpython-[^/]*)?\.so"
    r"|libffi\.so(\.[\d.]+)?"
)


def is_interpreter_module(path: str | None) -> bool:
    """Whether a module (by path) is the interpreter or ctypes/libffi glue."""
    name = module_name(path)
    return name is not None and _INTERPRETER.fullmatch(name) is not None


def python_frame_text(frame: RuntimeFrame) -> str:
    """``module.function`` of a Python frame (see module docstring)."""
    if not frame.file:
        return frame.function
    stem = posixpath.splitext(posixpath.basename(frame.file))[0]
    if stem == "__init__":
        stem = posixpath.basename(posixpath.dirname(frame.file)) or stem
    return f"{stem}.{frame.function}" if stem else frame.function


class PythonFrames(SignatureRule):
    """From the first interpreter frame outwards, the crashing thread's
    Python frames instead of the native ones."""

    name = "python-frames"

    def predicate(self, state: SignatureState) -> bool:
        return state.report.runtime.kind == "python" and bool(self._python_frames(state))

    def action(self, state: SignatureState) -> None:
        boundary = next(
            (i for i, f in enumerate(state.frames) if is_interpreter_module(f.frame.module)), None
        )
        if boundary is None:
            state.record(self.name, "", "no interpreter frame on the stack: native frames only")
            return
        entry = state.frames[boundary].frame
        added = [
            SigFrame(entry, python_frame_text(rf), runtime=rf) for rf in self._python_frames(state)
        ]
        state.drop(self.name, state.frames[:boundary])
        for f in added:
            state.record(self.name, "", f"python: {f.text}")
        state.frames = state.frames + added

    @staticmethod
    def _python_frames(state: SignatureState) -> list[RuntimeFrame]:
        thread = state.report.crashed_thread
        tid = thread.tid if thread is not None else None
        return [
            f
            for f in state.report.runtime.frames
            if f.kind == "python" and f.thread_id in (None, tid)
        ]
