"""From an artifact on disk to analysed CrashReports.

The kind of artifact is recognised by its content, never by its name: an ELF
core (plain, or compressed with zstd, gzip, bzip2 or xz, as systemd-coredump
and log shippers store them), or a kernel console log / dmesg. ELF cores are
parsed and then analysed while the core is still open (the analyzers read its
memory).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from coreepi.errors import InputError, NotACoreError
from coreepi.model.report import CrashReport
from coreepi.ingest.scratch import scratch_dir
from coreepi.parse.open_input import decompress_to, open_input

# The parsers and the analyzers are imported where they are needed:
# `coreepi inspect` on a core never loads the log parsers or the
# case-definition language (start-up time is most of a small core's cost).
if TYPE_CHECKING:
    from coreepi.analyze.casedefs import CaseDefinition

__all__ = ["ArtifactKind", "inspect_core", "inspect_file", "plain_core", "sniff"]

SNIFF_BYTES = 64 << 10


class ArtifactKind(StrEnum):
    """What an artifact is, from its content."""

    ELF = "elf"
    KERNEL_LOG = "kernel-log"
    HS_ERR = "hs_err"
    UNKNOWN = "unknown"


def sniff(path: str | os.PathLike[str]) -> tuple[ArtifactKind, str | None]:
    """(kind, compression) of the file at ``path``, from its first 64 KiB
    (decompressed first when compressed; compression as
    :func:`coreepi.parse.open_input.compression_of`, None when plain).
    Raises :class:`NotACoreError` when the path is not a readable regular
    file, :class:`~coreepi.parse.open_input.DecompressionError` when those
    first bytes do not decompress."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise NotACoreError(name, "is a directory, not a crash artifact")
    try:
        mode = os.stat(name).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            # open() on a FIFO blocks until a writer comes; drgn needs a
            # seekable file anyway.
            kind = "FIFO" if stat.S_ISFIFO(mode) else "socket"
            raise NotACoreError(name, f"is a {kind}, not a regular file")
        with open_input(name) as fh:
            head = fh.read(SNIFF_BYTES)
            compression = fh.compression
    except FileNotFoundError:
        raise NotACoreError(name, "no such file") from None
    except OSError as exc:
        raise NotACoreError(name, f"cannot read: {exc.strerror}") from None
    if head.startswith(b"\x7fELF"):
        return ArtifactKind.ELF, compression
    if head.startswith(b"MDMP"):  # MINIDUMP_HEADER.Signature (Breakpad, Crashpad, Windows)
        raise NotACoreError(name, "minidump: not supported yet")
    from coreepi.parse.jvm.hs_err import looks_like_hs_err
    from coreepi.parse.kernel.oops import looks_like_kernel_log

    # hs_err logs quote kernel-looking lines (dmesg excerpts): test them first.
    if looks_like_hs_err(head):
        return ArtifactKind.HS_ERR, compression
    if looks_like_kernel_log(head):
        return ArtifactKind.KERNEL_LOG, compression
    return ArtifactKind.UNKNOWN, compression


def inspect_core(
    path: str | os.PathLike[str],
    *,
    exe: str | os.PathLike[str] | None = None,
    sysroot: str | os.PathLike[str] | None = None,
    debug_dirs: Sequence[str | os.PathLike[str]] = (),
    run_analysis: bool = True,
    case_defs: CaseDefs = None,
) -> CrashReport:
    """Parse the (uncompressed) ELF core at ``path`` and, unless
    ``run_analysis`` is False, analyse it. ``case_defs``: user case
    definitions, a TOML file or already loaded (see
    :mod:`coreepi.analyze.casedefs`). Arguments and errors as
    :func:`coreepi.parse.parse_core`."""
    from coreepi.parse.elf.core import open_core

    definitions = _case_definitions(case_defs)
    with open_core(path, exe=exe, sysroot=sysroot, debug_dirs=debug_dirs) as parsed:
        if run_analysis:
            from coreepi.analyze import analyze

            analyze(parsed.report, parsed.memory, case_definitions=definitions)
        return parsed.report


CaseDefs: TypeAlias = "str | os.PathLike[str] | Sequence[CaseDefinition] | None"


def _case_definitions(case_defs: CaseDefs) -> list[CaseDefinition]:
    """Load a case-definition file (InputError if bad), or pass a list through."""
    if case_defs is None:
        return []
    if isinstance(case_defs, (str, os.PathLike)):
        from coreepi.analyze.casedefs import load_case_definitions

        return load_case_definitions(case_defs)
    return list(case_defs)


def inspect_file(
    path: str | os.PathLike[str],
    *,
    exe: str | os.PathLike[str] | None = None,
    sysroot: str | os.PathLike[str] | None = None,
    debug_dirs: Sequence[str | os.PathLike[str]] = (),
    run_analysis: bool = True,
    case_defs: CaseDefs = None,
) -> list[CrashReport]:
    """Every crash report in the artifact at ``path``, whatever its kind:
    one for a core, zero or more for a kernel log. A compressed core is
    decompressed to a temporary file first (drgn needs a seekable file).

    Raises :class:`InputError` when the file is unreadable, not a known kind
    of artifact, or a broken core, or when ``case_defs`` is a bad file.
    """
    name = os.fspath(path)
    definitions = _case_definitions(case_defs)
    kind, compression = sniff(name)
    if kind in (ArtifactKind.KERNEL_LOG, ArtifactKind.HS_ERR):
        if kind is ArtifactKind.KERNEL_LOG:
            from coreepi.parse.kernel.oops import parse_kernel_log

            reports = parse_kernel_log(Path(name), name=name)
        else:
            from coreepi.parse.jvm.hs_err import parse_hs_err

            hs_err = parse_hs_err(Path(name), name=name)
            reports = [hs_err] if hs_err is not None else []
        if run_analysis:  # the same analyze() as a core's, without memory
            from coreepi.analyze import analyze

            for report in reports:
                analyze(report, case_definitions=definitions)
        return reports
    if kind is ArtifactKind.UNKNOWN:
        raise NotACoreError(name, "not an ELF core dump, a JVM hs_err log or a kernel log")
    if compression is None:
        return [inspect_core(name, exe=exe, sysroot=sysroot, debug_dirs=debug_dirs,
                             run_analysis=run_analysis, case_defs=definitions)]
    with tempfile.TemporaryDirectory(prefix="core-", dir=scratch_dir()) as tmp:
        plain = plain_core(name, Path(tmp))
        try:
            report = inspect_core(plain, exe=exe, sysroot=sysroot, debug_dirs=debug_dirs,
                                  run_analysis=run_analysis, case_defs=definitions)
        except InputError as exc:
            # name the user's file, not the temporary one
            if exc.source == str(plain):
                raise type(exc)(name, exc.reason) from None
            raise
    report.analysis.warnings = [w.replace(str(plain), name) for w in report.analysis.warnings]
    return [report]


def plain_core(path: str | os.PathLike[str], tmp: Path) -> Path:
    """The compressed core at ``path`` decompressed into ``tmp/core`` (drgn
    needs a seekable file), within the cap of
    :func:`~coreepi.parse.open_input.max_decompressed_bytes`. Returns that
    path. Raises :class:`~coreepi.parse.open_input.DecompressionError` when
    it is cut short, corrupt or too large once decompressed."""
    plain = tmp / "core"
    decompress_to(path, plain)
    return plain
