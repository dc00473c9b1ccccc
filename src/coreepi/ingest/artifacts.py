"""From an artifact on disk to analysed CrashReports.

The kind of artifact is recognised by its content, never by its name: an ELF
core (plain, or compressed with zstd, gzip, bzip2 or xz, as systemd-coredump
and log shippers store them), or a kernel console log / dmesg. ELF cores are
parsed and then analysed while the core is still open (the analyzers read its
memory).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, TypeAlias

from coreepi.errors import InputError, NotACoreError
from coreepi.model.report import CrashReport

# The parsers, the analyzers and the decompressors are imported where they
# are needed: `coreepi inspect` on a core never loads the log parsers or the
# case-definition language (start-up time is most of a small core's cost).
if TYPE_CHECKING:
    from coreepi.analyze.casedefs import CaseDefinition

__all__ = ["ArtifactKind", "decompress", "inspect_core", "inspect_file", "sniff"]

SNIFF_BYTES = 64 << 10

_COMPRESSED: dict[bytes, tuple[str, Callable[[IO[bytes]], IO[bytes]]]] = {
    b"\x28\xb5\x2f\xfd": ("zstd", lambda f: _zstandard().ZstdDecompressor().stream_reader(f)),
    b"\x1f\x8b": ("gzip", lambda f: gzip.GzipFile(fileobj=f)),
    b"BZh": ("bzip2", lambda f: bz2.BZ2File(f)),
    b"\xfd7zXZ\x00": ("xz", lambda f: lzma.LZMAFile(f)),
}


# A compressed core is decompressed to disk before reading; cap what a
# decompression bomb can cost. Real cores beyond 64 GiB are not analysed.
MAX_DECOMPRESSED_BYTES = int(os.environ.get("COREEPI_MAX_CORE_BYTES", 64 << 30))
# zstd's RLE blocks turn 4 input bytes into 128 KiB: feeding 1 KiB at a time
# keeps one decompress() call under ~32 MiB of output.
_ZSTD_INPUT_STEP = 1 << 10


def _zstandard() -> ModuleType:
    import zstandard

    return zstandard


def _decompress_errors() -> tuple[type[BaseException], ...]:
    return (OSError, EOFError, lzma.LZMAError, _zstandard().ZstdError)


class _Capped:
    """Counts bytes written to ``dst`` and refuses to go past the cap."""

    def __init__(self, dst: IO[bytes], limit: int) -> None:
        self.dst, self.limit, self.written = dst, limit, 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        if self.written > self.limit:
            raise EOFError(
                f"decompresses to more than {self.limit} bytes (COREEPI_MAX_CORE_BYTES); "
                "refusing a possible decompression bomb"
            )
        try:
            self.dst.write(data)
        except OSError as exc:  # the output's failure (full disk, closed pipe), not the input's
            raise _WriteFailed() from exc


class _WriteFailed(Exception):
    """Writing the decompressed data failed; ``__cause__`` is the OSError."""


def _copy_zstd(src: IO[bytes], dst: _Capped) -> None:
    """Decompress every zstd frame of ``src`` into ``dst``. Unlike
    ``stream_reader``, a stream cut inside a frame is an error, not a
    silently shorter core."""
    dctx = _zstandard().ZstdDecompressor()
    obj, in_frame = dctx.decompressobj(), False
    while block := src.read(1 << 20):
        for i in range(0, len(block), _ZSTD_INPUT_STEP):
            chunk = block[i : i + _ZSTD_INPUT_STEP]
            while chunk:
                in_frame = True
                dst.write(obj.decompress(chunk))
                chunk = b""
                if obj.eof:  # a frame ended: the rest is the next frame
                    chunk, obj, in_frame = obj.unused_data, dctx.decompressobj(), False
    if in_frame:
        raise EOFError("compressed data ended before the end of the zstd frame")


def _copy_stream(src: IO[bytes], dst: _Capped) -> None:
    while data := src.read(1 << 20):
        dst.write(data)


def decompress(src: IO[bytes], dst: IO[bytes], name: str,
               limit: int = MAX_DECOMPRESSED_BYTES) -> str | None:
    """Copy the seekable artifact ``src`` into ``dst``, decompressed when its
    first bytes say zstd, gzip, bzip2 or xz (else as it is); at most ``limit``
    bytes (default ``COREEPI_MAX_CORE_BYTES``). Returns the compression's name
    (None: plain). Raises :class:`InputError` naming ``name`` when the data is
    corrupt or decompresses past ``limit``."""
    start = src.tell()
    opener = _opener(src.read(8))
    src.seek(start)
    out = _Capped(dst, limit)
    compression = opener[0] if opener is not None else None
    try:
        if opener is None:
            _copy_stream(src, out)
        elif compression == "zstd":
            _copy_zstd(src, out)
        else:
            _copy_stream(opener[1](src), out)
    except _WriteFailed as exc:
        assert exc.__cause__ is not None
        raise exc.__cause__ from None
    except _decompress_errors() as exc:
        raise InputError(name, f"cannot decompress ({compression or 'plain'}): {exc}") from None
    return compression


class ArtifactKind(StrEnum):
    ELF = "elf"
    KERNEL_LOG = "kernel-log"
    HS_ERR = "hs_err"
    UNKNOWN = "unknown"


def _opener(head: bytes) -> tuple[str, Callable[[IO[bytes]], IO[bytes]]] | None:
    return next((v for magic, v in _COMPRESSED.items() if head.startswith(magic)), None)


def sniff(path: str | os.PathLike[str]) -> tuple[ArtifactKind, str | None]:
    """(kind, compression) of the file at ``path``, from its first 64 KiB
    (decompressed first when compressed). Raises :class:`NotACoreError` when
    the path is not a readable regular file."""
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
        with open(name, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
            opener = _opener(head)
            compression = None
            if opener is not None:
                compression = opener[0]
                fh.seek(0)
                try:
                    head = opener[1](fh).read(SNIFF_BYTES)
                except _decompress_errors() as exc:
                    raise NotACoreError(name, f"corrupt {compression} data: {exc}") from None
    except FileNotFoundError:
        raise NotACoreError(name, "no such file") from None
    except OSError as exc:
        raise NotACoreError(name, f"cannot read: {exc.strerror}") from None
    if head.startswith(b"\x7fELF"):
        return ArtifactKind.ELF, compression
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
    with tempfile.TemporaryDirectory(prefix="coreepi-") as tmp:
        plain = Path(tmp) / "core"
        try:
            with open(name, "rb") as src, open(plain, "wb") as out:
                decompress(src, out, name)
        except OSError as exc:
            raise InputError(name, f"cannot decompress into {tmp}: {exc.strerror or exc}") from None
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
