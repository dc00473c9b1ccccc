"""JVM fatal error logs (``hs_err_pid<pid>.log``) into CrashReports.

HotSpot writes such a log when the JVM dies of a signal or Windows
exception (``SIGSEGV (0xb) at pc=…``), of an internal error (``Internal
Error (file.cpp:123)`` with the ``guarantee`` / ``assert`` text) or of a
native out-of-memory (``Native memory allocation (mmap) failed to map N
bytes``). Every JDK from 6 to 25 and every vendor build (Oracle, Red Hat,
Azul, Adoptium, Amazon, Microsoft …) prints the same skeleton: a ``#``
header, then THREAD, PROCESS and SYSTEM sections (JDK 11+ add a SUMMARY).

:func:`parse_hs_err` reads one log as a stream and returns one
:class:`~coreepi.model.report.CrashReport` (``source = hs_err``):

* ``signal`` (name, number, si_code, fault address; Windows exception code
  and access kind), ``process`` (pid, tid, argv from ``Command Line`` or
  ``jvm_args`` + ``java_command``; exe, the ``java`` launcher mapped in
  ``Dynamic libraries``, and comm, its name, as a JVM's core has them),
  ``arch``;
* the crashing thread: ``Thread.frames`` (native stack, pcs rebuilt from
  ``Dynamic libraries``) and ``runtime.frames`` (the same frames with
  HotSpot's kinds C/V/J/A/j/v, then the ``Java frames`` when the native
  walk stopped short), registers; the other listed threads by tid and name;
* ``runtime`` (``jvm``, version, vendor), ``modules`` and ``memory_map``
  from ``Dynamic libraries``, ``host`` (OS, kernel, CPU, microcode,
  hypervisor, memory, container limits; JVM facts under ``host.extra``
  ``jvm.*``), ``captured_at`` from the crash time when its zone is known;
* ``artifact.jvm``: the fatal error as the log states it (kind, error
  line, location, message, pc, sp, stack bounds, bytes at pc, memory,
  container limit, thread state, JVM home) — what the analysis needs;
  phenotypes and signature are left empty: :func:`coreepi.analyze.analyze`
  makes them (``docs/phenotypes.md``, ``docs/signatures.md``);
* ``analysis.warnings``: ``partial report: …`` when the log is cut
  (truncation is common: HotSpot may die while writing it) — partial
  reports are kept, never dropped; ``core`` describes the log itself
  (size, sha256, truncated).

Any input is safe: text of any size is read in blocks of whole lines with
bounded memory (:class:`~coreepi.parse.jvm.scan.HsErrLimits`), any bytes decode
(invalid UTF-8 becomes U+FFFD), and no content makes the parser raise; text
that is not an hs_err log gives None ("no crash found").
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, AnyStr, Final, cast

from coreepi.model.report import AnalysisInfo, CrashReport, Source, stable_crash_id
from coreepi.parse.jvm.build import ANALYZER, build_report
from coreepi.parse.jvm.facts import HsErrLimits
from coreepi.parse.jvm.scan import HsErrScanner
from coreepi.parse.open_input import open_input
from coreepi.parse.sniff import text_head

__all__ = ["HsErrLimits", "looks_like_hs_err", "parse_hs_err"]

Source_ = str | bytes | os.PathLike[str] | IO[str] | IO[bytes] | Iterable[str] | Iterable[bytes]
_HEAD_DIGEST_BYTES: Final = 1 << 16
_BLOCK_BYTES: Final = 1 << 20
DEFAULT_LIMITS: Final = HsErrLimits()


class _Reader:
    """Blocks of whole lines of any source, decoded (``str``, the lines
    joined by ``"\\n"``, no newline at the end: what
    :meth:`~coreepi.parse.jvm.scan.HsErrScanner.feed_text` takes); counts
    bytes and hashes them when the source is binary (the artifact's
    sha256), and hashes the first 64 KiB (a fragment's identity)."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.size = 0
        self.sha = hashlib.sha256()
        self.binary = False
        self.head = hashlib.sha256()
        self.head_left = _HEAD_DIGEST_BYTES

    def _note_head(self, data: bytes) -> None:
        if self.head_left > 0:
            self.head.update(data[: self.head_left])
            self.head_left -= len(data)

    def binary_blocks(self, handle: IO[bytes]) -> Iterator[str]:
        """Read in blocks of ``_BLOCK_BYTES``: one hash update and one
        decode per block, not per line."""
        self.binary = True

        def read() -> bytes:
            block = handle.read(_BLOCK_BYTES)
            self.size += len(block)
            self.sha.update(block)
            self._note_head(block)
            return block

        return _whole_lines(read, b"\n", self.max_chars * 4, _decode)

    def text_blocks(self, handle: IO[str]) -> Iterator[str]:
        """Read ``_BLOCK_BYTES`` characters at a time."""

        def read() -> str:
            block = handle.read(_BLOCK_BYTES)
            if self.head_left > 0:  # a character is at least one byte: enough of the block
                self._note_head(block[: self.head_left].encode("utf-8", "surrogateescape"))
            return block

        return _whole_lines(read, "\n", self.max_chars * 4, str)

    def item_blocks(self, items: Iterable[str | bytes]) -> Iterator[str]:
        """Each item (one line or several, with or without newline) as a block."""
        for item in items:
            text = _decode(item) if isinstance(item, (bytes, bytearray)) else str(item)
            self._note_head(text[:4096].encode("utf-8", "surrogateescape"))
            yield text.removesuffix("\n")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _whole_lines(
    read: Callable[[], AnyStr], newline: AnyStr, max_line: int, decode: Callable[[AnyStr], str]
) -> Iterator[str]:
    """The blocks ``read()`` returns (empty at the end), cut after their
    last ``newline`` so that each given block holds whole lines; the rest
    is carried to the next one. A line longer than ``max_line`` (bytes or
    characters) is given cut to its first ``max_line`` as a block of its
    own (the scanner cuts it further and counts it), the rest read and
    dropped, so memory stays bounded by the block size."""
    carry = newline[:0]
    discarding = False  # the start of the current line was given already
    while block := read():
        data = carry + block if carry else block
        end = data.rfind(newline)
        if end < 0:
            carry = data
        else:
            carry = data[end + 1 :]
            if discarding:  # the first line's start was given: the rest of it goes
                discarding = False
                cut = data.find(newline, 0, end)
                if cut >= 0:
                    yield decode(data[cut + 1 : end])
            else:
                yield decode(data[:end])
        if len(carry) > max_line:
            if not discarding:
                yield decode(carry[:max_line])
            carry, discarding = carry[:0], True
    if carry and not discarding:
        yield decode(carry)


def _path_blocks(path: os.PathLike[str], reader: _Reader) -> Iterator[str]:
    with open_input(path) as handle:
        yield from reader.binary_blocks(handle)


def _blocks(source: Source_, reader: _Reader) -> Iterator[str]:
    """The reader's block iterator for any source."""
    if isinstance(source, os.PathLike):
        return _path_blocks(source, reader)
    if isinstance(source, str):
        return reader.text_blocks(io.StringIO(source))
    if isinstance(source, (bytes, bytearray, memoryview)):
        return reader.binary_blocks(io.BytesIO(bytes(source)))
    if hasattr(source, "readline") and hasattr(source, "read"):
        stream = cast("IO[Any]", source)
        if isinstance(stream.read(0), bytes):
            return reader.binary_blocks(stream)
        return reader.text_blocks(stream)
    return reader.item_blocks(cast("Iterable[str | bytes]", source))


def _fallback(name: str | None, error: Exception, digest: str) -> CrashReport:
    """A crash was seen but building its report failed: it must still be counted."""
    return CrashReport(
        crash_id=stable_crash_id("hs_err", name, digest),
        source=Source.HS_ERR,
        analysis=AnalysisInfo(
            analyzer_version=ANALYZER,
            warnings=[f"partial report: parser error {type(error).__name__}: {error}"[:500]],
        ),
    )


def parse_hs_err(
    source: Source_,
    *,
    name: str | None = None,
    limits: HsErrLimits = DEFAULT_LIMITS,
) -> CrashReport | None:
    """Parse one JVM fatal error log; None when the input holds none.

    ``source``: a path (``pathlib.Path`` / ``os.PathLike``; zstd, gzip,
    bzip2, xz decompressed by magic, see :mod:`coreepi.parse.open_input`), the log text (``str``) or bytes, a text or
    binary file object, or an iterable of lines (``str`` or ``bytes``, with
    or without newlines) — all read as a stream. ``name`` identifies the
    log in the crash id of a fragment that has no error line (defaults to
    the path). Memory is bounded by ``limits`` whatever the input size.
    Raises only OSError, for a path that cannot be read, and
    :class:`~coreepi.parse.open_input.DecompressionError`, for a compressed
    one cut short or corrupt.
    """
    started = time.monotonic()
    if name is None and isinstance(source, os.PathLike):
        name = os.fspath(source)
    reader = _Reader(limits.max_line_chars)
    scanner = HsErrScanner(limits)
    try:
        for block in _blocks(source, reader):
            scanner.feed_text(block)
            if scanner.done:
                break
    except OSError:
        if isinstance(source, os.PathLike):
            raise
        scanner.facts.reporting_errors.append("input stream failed while reading")
    except (UnicodeError, ValueError, TypeError) as error:
        scanner.facts.reporting_errors.append(f"input not readable as text: {type(error).__name__}")
    facts = scanner.facts
    if facts.evidence == 0:
        return None
    digest = reader.head.hexdigest()
    try:
        return build_report(
            facts,
            name=name,
            sha256=reader.sha.hexdigest() if reader.binary and not scanner.done else None,
            size_bytes=reader.size if reader.binary and not scanner.done else None,
            head_digest=digest,
            duration=time.monotonic() - started,
        )
    except Exception as error:  # noqa: BLE001 - a crash seen must still be counted
        return _fallback(name, error, digest)


_SNIFF: Final = re.compile(
    rb"^#\s+A fatal error has been detected by the Java Runtime Environment"
    rb"|^#\s+There is insufficient memory for the Java Runtime Environment"
    rb"|^#\s+An unexpected error has been detected by (?:HotSpot|Java Runtime)"
    rb"|^#\s+(?:SIG[A-Z0-9]+|EXCEPTION_[A-Z_]+) \(0x[0-9a-fA-F]+\) at pc=0x"
    rb"|^# JRE version: |^# Java VM: "
    rb"|^-{10,}\s+(?:T H R E A D|P R O C E S S|S Y S T E M|S U M M A R Y)\s+-{4,}"
    rb"|^Native frames: \(J=compiled Java code|^vm_info: .* for \S+ JRE \("
    rb"|^CPU:\s?total \d+ \(initial active \d+\)",
    re.MULTILINE,
)


def looks_like_hs_err(head: bytes) -> bool:
    """Content sniffing: is this start of a file (any length; the first
    MiB is looked at) a HotSpot fatal error log, or a fragment of one?
    True on a line only HotSpot prints (the ``#`` header, a section banner,
    ``Native frames: (J=compiled Java code…``, ``vm_info: … JRE (…)``).
    Never raises."""
    try:
        # recognised by content: NUL and stray control bytes do not make a log binary
        text = text_head(head[: 1 << 20], 1 << 20)
        if text is None:
            return False
        return _SNIFF.search(text.replace(b"\r\n", b"\n")) is not None
    except Exception:  # noqa: BLE001 - sniffing must not fail
        return False
