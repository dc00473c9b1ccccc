"""One way to open an input: plain or compressed, recognised by content, bounded.

Every reader of coreepi opens a file here — artifact sniffing, core
decompression, the kernel-log, hs_err and telemetry readers, the server's
upload checks — so they all know the same formats and fail the same way.

* The compression is recognised by the file's first bytes (its magic), never
  by its name: zstd (RFC 8878), gzip (RFC 1952), bzip2, xz
  (:func:`coreepi.model.compression.compression_of`). Anything else is read
  as it is.
* :func:`open_input` gives a buffered binary stream of the content,
  decompressed as it is read (streaming: memory stays bounded whatever the
  size). A decompressed stream stops at :func:`max_decompressed_bytes`
  (``COREEPI_MAX_CORE_BYTES``; default 32 GiB, and when written to disk by
  :func:`decompress_to` no more than the free space of the target's file
  system minus 2 GiB — docs/limits.md): a decompression bomb costs a bounded
  amount of time and disk, and nothing else.
* A stream that cannot be read to its end — cut short, corrupt, past the
  cap — raises :class:`DecompressionError`, an
  :class:`~coreepi.errors.InputError` naming the file, what failed, and the
  line where the content stops. It never ends silently early: a truncated
  ``.gz`` is an error, not half a log.

Error tree::

    InputError (coreepi.errors)
     └── DecompressionError     .source, .reason, .compression, .line, .offset
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Final, Protocol

from coreepi.errors import InputError
from coreepi.model.limits import max_core_bytes
from coreepi.model.compression import MAGIC_BYTES, compression_of

__all__ = [
    "DecompressionError",
    "InputStream",
    "binary_blocks",
    "binary_lines",
    "decompress_to",
    "input_lines",
    "max_decompressed_bytes",
    "open_input",
]

_READ_BYTES: Final = 1 << 20
# zstd's RLE blocks turn 4 input bytes into 128 KiB: feeding 1 KiB at a time
# keeps one decompress() call under ~32 MiB of output.
_ZSTD_INPUT_STEP: Final = 1 << 10


class DecompressionError(InputError):
    """A compressed input could not be read to its end: cut short, corrupt,
    or larger than the cap once decompressed. ``compression``: ``zstd``,
    ``gzip``, ``bzip2`` or ``xz``; ``offset``: decompressed bytes delivered
    before the failure; ``line``: the 1-based line of the content where it
    stops (the line being read when it failed); ``too_large``: it was
    refused for growing past the cap, not for being broken."""

    def __init__(self, source: str, compression: str, detail: str, offset: int, line: int,
                 *, too_large: bool = False) -> None:
        super().__init__(source, f"cannot decompress ({compression}): {detail}")
        self.compression = compression
        self.too_large = too_large
        self.detail = detail
        self.offset = offset
        self.line = line

    def stopped_at(self) -> str:
        """One line: the file, what failed, and the line where its content stops."""
        return f"{self}; the content stops at line {self.line}"


def max_decompressed_bytes(scratch: str | os.PathLike[str] | None = None) -> int:
    """The cap on one input's decompressed size, bytes: the environment's
    ``COREEPI_MAX_CORE_BYTES``, else the limit ``max_core_bytes`` of
    docs/limits.md (:func:`coreepi.model.limits.max_core_bytes`): 32 GiB, and
    when the content is written to the directory ``scratch``, at most its
    file system's free space minus a 2 GiB reserve. Raises
    :class:`InputError` (naming the variable) when it is not a positive
    whole number."""
    try:
        return max_core_bytes(None if scratch is None else Path(scratch))
    except ValueError as exc:
        raise InputError("COREEPI_MAX_CORE_BYTES", str(exc)) from None


class _Zstd(io.RawIOBase):
    """Every zstd frame of ``src``, decompressed. Unlike zstandard's
    ``stream_reader``, a stream cut inside a frame is an error (EOFError),
    not a silently shorter content."""

    def __init__(self, src: io.RawIOBase) -> None:
        import zstandard  # only when a zstd input is read: start-up time

        self._src = src
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._in_frame = False
        self._input = memoryview(b"")
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        """Decompress until output is pending; False at the end of the stream."""
        while not self._out:
            if not self._input:
                block = self._src.read(_READ_BYTES)
                if not block:
                    if self._in_frame:
                        raise EOFError("compressed data ended before the end of the zstd frame")
                    return False
                self._input = memoryview(block)
            chunk, self._input = self._input[:_ZSTD_INPUT_STEP], self._input[_ZSTD_INPUT_STEP:]
            self._in_frame = True
            self._out = memoryview(self._obj.decompress(chunk))
            if self._obj.eof:  # a frame ended: what is left belongs to the next frame
                rest = self._obj.unused_data
                self._obj, self._in_frame = self._dctx.decompressobj(), False
                if rest:
                    self._input = memoryview(rest + bytes(self._input))
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._fill():
            return 0
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._src.close()
        super().close()


def _decompressors() -> dict[str, Callable[[io.RawIOBase], IO[bytes]]]:
    return {
        "zstd": _Zstd,  # type: ignore[dict-item]
        "gzip": lambda f: gzip.GzipFile(fileobj=f),  # type: ignore[dict-item]
        "bzip2": lambda f: bz2.BZ2File(f),  # type: ignore[dict-item]
        "xz": lambda f: lzma.LZMAFile(f),  # type: ignore[dict-item]
    }


def _decompress_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    # gzip: BadGzipFile (an OSError), zlib.error, EOFError when cut;
    # bz2: OSError, EOFError; xz: LZMAError, EOFError; zstd: ZstdError.
    return (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


class _Decompressed(io.RawIOBase):
    """The decompressed content of ``src``, counted: past ``limit`` bytes, or
    when the decompressor fails, a :class:`DecompressionError` naming
    ``name`` and the line reached."""

    def __init__(self, src: io.RawIOBase, name: str, compression: str, limit: int) -> None:
        self._file = src
        self._reader = _decompressors()[compression](src)
        # read1: one decompression step per call, so the bytes decompressed
        # before a failure are delivered, not lost with a larger read
        self._read = getattr(self._reader, "read1", self._reader.read)
        self.source, self.compression, self.limit = name, compression, limit
        self.delivered = 0
        self.newlines = 0

    def readable(self) -> bool:
        return True

    def _error(self, detail: str, *, too_large: bool = False) -> DecompressionError:
        return DecompressionError(self.source, self.compression, detail, self.delivered,
                                  self.newlines + 1, too_large=too_large)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            data = self._read(min(len(buffer), self.limit + 1 - self.delivered))
        except _decompress_errors() as exc:
            raise self._error(str(exc) or type(exc).__name__) from None
        n = len(data)
        if self.delivered + n > self.limit:
            raise self._error(f"decompresses to more than {self.limit} bytes "
                              "(COREEPI_MAX_CORE_BYTES); refusing a possible decompression bomb",
                              too_large=True)
        buffer[:n] = data
        self.delivered += n
        self.newlines += data.count(b"\n")
        return n

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self._file.close()
            super().close()


class InputStream(io.BufferedReader):
    """A buffered binary stream of one input's content, decompressed.
    ``source``: the path as given; ``compression``: the compression found
    (None: read as it is). Reads raise :class:`DecompressionError` when a
    compressed input is cut short, corrupt, or past its cap."""

    def __init__(self, raw: io.RawIOBase, source: str, compression: str | None) -> None:
        super().__init__(raw, buffer_size=1 << 16)
        self.source = source
        self.compression = compression


def open_input(path: str | os.PathLike[str], *, limit: int | None = None,
               digest: _Digest | None = None) -> InputStream:
    """Open the file at ``path`` for reading its content: decompressed as it
    is read when its first bytes are a zstd, gzip, bzip2 or xz magic, as it
    is otherwise. ``limit``: the cap on decompressed bytes (default
    :func:`max_decompressed_bytes`; a plain file is not capped). Use it as a
    context manager. Works on pipes too (the magic is peeked, not read).
    ``digest``: a :mod:`hashlib` object fed every byte of the file as it is
    read (compressed bytes, as on disk), so a reader that reads the file to
    its end gets its checksum without a second read.

    Raises OSError when the file cannot be opened; reads raise
    :class:`DecompressionError`.
    """
    name = os.fspath(path)
    raw = io.FileIO(name, "rb")
    try:
        src: io.RawIOBase = raw if digest is None else _Hashing(raw, digest)
        if digest is None and raw.seekable():
            head = raw.read(MAGIC_BYTES)
            raw.seek(0)
        else:  # a pipe, or hashed: peek at the magic through a buffer, losing nothing
            src = _Passthrough(io.BufferedReader(src, buffer_size=_READ_BYTES))
            head = src.peek(MAGIC_BYTES)
        compression = compression_of(head[:MAGIC_BYTES])
        if compression is None:
            return InputStream(src, name, None)
        cap = max_decompressed_bytes() if limit is None else limit
        return InputStream(_Decompressed(src, name, compression, cap), name, compression)
    except BaseException:
        raw.close()
        raise


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


class _Hashing(io.RawIOBase):
    """A file whose bytes feed ``digest`` as they are read."""

    def __init__(self, src: io.FileIO, digest: _Digest) -> None:
        self._src, self._digest = src, digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._src.readinto(buffer)
        if n:
            self._digest.update(memoryview(buffer)[:n])
        return n or 0

    def close(self) -> None:
        self._src.close()
        super().close()


class _Passthrough(io.RawIOBase):
    """A pipe behind a peeking buffer (what was peeked is not lost)."""

    def __init__(self, src: io.BufferedReader) -> None:
        self._src = src

    def readable(self) -> bool:
        return True

    def peek(self, size: int) -> bytes:
        return self._src.peek(size)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        return self._src.readinto(buffer)

    def close(self) -> None:
        self._src.close()
        super().close()


def decompress_to(path: str | os.PathLike[str], dst: str | os.PathLike[str], *,
                  limit: int | None = None) -> int:
    """Write the content of the (possibly compressed) file at ``path`` to a
    new file ``dst``; return its size in bytes. ``limit``: default
    :func:`max_decompressed_bytes` of ``dst``'s file system, so a bomb
    cannot fill the disk it is written to. Errors as :func:`open_input`;
    on any error or interruption (SIGTERM's SystemExit, ^C) ``dst`` is
    removed: no partial file outlives the call."""
    total = 0
    if limit is None:
        limit = max_decompressed_bytes(Path(dst).parent)
    try:
        with open_input(path, limit=limit) as src, open(dst, "wb") as out:
            while chunk := src.read(_READ_BYTES):
                out.write(chunk)
                total += len(chunk)
    except BaseException:
        Path(dst).unlink(missing_ok=True)
        raise
    return total


def binary_blocks(handle: IO[bytes], max_bytes: int) -> Iterator[bytes]:
    """A binary stream in blocks of whole lines, each block ending with
    ``\\n`` (one is added to a last line without). A block is what one read
    of the stream gives (``read1``, up to 1 MiB) up to its last line break,
    so when a read fails every complete line before it has been given. A
    line longer than ``max_bytes`` with no line break in the data read so
    far is cut at ``max_bytes`` and its remainder skipped, so one 2 GB line
    costs ``max_bytes`` of memory."""
    read = getattr(handle, "read1", handle.read)
    pending = b""
    discarding = False
    while True:
        block = read(_READ_BYTES)
        if not block:
            break
        data = pending + block
        end = data.rfind(b"\n")
        if end < 0:
            if not discarding and len(data) >= max_bytes:
                yield data[:max_bytes] + b"\n"
                discarding, data = True, b""
            pending = b"" if discarding else data
            continue
        start = data.find(b"\n") + 1 if discarding else 0  # the cut line's remainder
        discarding = False
        if start <= end:
            yield data[start:end + 1]
        pending = data[end + 1:]
    if pending and not discarding:
        yield pending[:max_bytes] + b"\n"


def binary_lines(handle: IO[bytes], max_bytes: int) -> Iterator[str]:
    """Lines of a binary stream split on ``\\n`` only, decoded as UTF-8
    (invalid bytes become U+FFFD), without their newline, each block of
    :func:`binary_blocks` decoded at once (no character is split: a block
    ends at a line break). A longer line is cut at ``max_bytes``."""
    for block in binary_blocks(handle, max_bytes):
        for line in block[:-1].decode("utf-8", "replace").split("\n"):
            yield line if len(line) <= max_bytes else line[:max_bytes]


def input_lines(path: str | os.PathLike[str], max_bytes: int, *,
                digest: _Digest | None = None) -> Iterator[str]:
    """:func:`binary_lines` of the file at ``path``, opened with
    :func:`open_input` (``digest`` as there). Raises OSError when it cannot
    be opened, :class:`DecompressionError` where a compressed file stops early."""
    with open_input(path, digest=digest) as handle:
        yield from binary_lines(handle, max_bytes)
