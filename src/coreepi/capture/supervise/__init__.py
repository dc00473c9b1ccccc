"""capture.supervise: the capture modes of ``coreepi ci run`` — run one
command and get a core for every process of its tree that dies of a
core-dumping signal, without touching the machine's core_pattern.

Modules: :mod:`~coreepi.capture.supervise.base` (what a mode returns; the
run-id marker), :mod:`~coreepi.capture.supervise.kernelfiles` (core_pattern
writes files), :mod:`~coreepi.capture.supervise.journal` (systemd-coredump),
:mod:`~coreepi.capture.supervise.tracer` (ptrace supervisor) with
:mod:`~coreepi.capture.supervise.ptrace` (ctypes) and
:mod:`~coreepi.capture.supervise.elfcore` (the core writer). The choice
between them is :func:`coreepi.cirun.run.choose_mode`. See ``docs/ci.md``.
"""
