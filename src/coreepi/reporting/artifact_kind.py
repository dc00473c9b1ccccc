"""What a crash's stored artifact is, in words: a core, a kernel log, an hs_err
log or a minidump, from the report's ``source`` (``model.report.Source``
values, taken as text so that ``coreepi list`` need not import the model).

The one place that decides what to call the artifact (page, API download
name, ``coreepi info / dump / list``), whether gdb can open it, and how a
frame's trust reads for it: a kernel log's frames were printed by the
kernel's own unwinder and read back from text, so no unwinding of ours
vouches for them.
"""

from __future__ import annotations

__all__ = [
    "LOG_TRUST",
    "LOG_TRUST_NOTE",
    "ArtifactKind",
    "artifact_kind",
    "frame_trust_text",
]

LOG_TRUST = "log"
"""The trust word shown for a frame read from a kernel log's call trace
(``model.report.FrameTrust.LOG``'s value, as text: see the module docstring)."""
LOG_TRUST_NOTE = ("frames as the kernel's unwinder printed them in its log "
                  "(the frames it marked unreliable, \"?\", are left out)")
"""What :data:`LOG_TRUST` means, under a kernel log's frames."""


class ArtifactKind:
    """``name`` (``"kernel log"``), ``title`` (a heading: ``"Kernel log"``,
    ``"hs_err log"``), ``short`` (``coreepi list``'s CORE cell
    when stored: ``"yes"`` for a core, ``"log"`` for a log), ``debuggable``
    (an ELF core gdb opens), ``text`` (a text log a pager shows) and
    :meth:`filename` (the download's name)."""

    __slots__ = ("_stem", "debuggable", "name", "short", "text", "title")

    def __init__(self, name: str, short: str, stem: str, *, debuggable: bool, text: bool) -> None:
        self.name, self.short, self._stem = name, short, stem
        # "hs_err" is the JVM's own lower-case name: never capitalised
        self.title = name if name.startswith("hs_err") else name[:1].upper() + name[1:]
        self.debuggable, self.text = debuggable, text

    def filename(self, crash_id: str, suffix: str = "") -> str:
        """The file name of this artifact of ``crash_id``, with the
        compression ``suffix`` (``".zst"``), e.g. ``hs_err_<id>.log.zst``."""
        return self._stem.format(id=crash_id) + suffix


_CORE = ArtifactKind("core", "yes", "{id}.core", debuggable=True, text=False)
_KINDS = {
    "kernel-oops": ArtifactKind("kernel log", "log", "{id}.kernel.log",
                                debuggable=False, text=True),
    # hs_err_pid<pid>.log is the JVM's own name; the crash id keeps downloads apart
    "hs_err": ArtifactKind("hs_err log", "log", "hs_err_{id}.log", debuggable=False, text=True),
    "minidump": ArtifactKind("minidump", "minidump", "{id}.dmp", debuggable=False, text=False),
}


def artifact_kind(source: str | None) -> ArtifactKind:
    """The kind of artifact a crash of ``source`` keeps; an ELF core (also
    a JVM crash paired with its core, which takes the core's source) for
    ``elf-core``, ``systemd-coredump`` and anything unknown."""
    return _KINDS.get(source or "", _CORE)


def frame_trust_text(source: str | None, trust: str) -> str:
    """A frame's trust as shown: :data:`LOG_TRUST` for every frame of a
    kernel log (reports of schema 1.4.0 on say so themselves; older stored
    ones said ``context``/``cfi`` after the line a frame came from), else
    the trust itself."""
    return LOG_TRUST if source == "kernel-oops" else trust
