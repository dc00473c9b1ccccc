"""Drain a core from a pipe into a zstd file with bounded memory.

One 1 MiB buffer is reused for every read; zstd compresses with its own
worker threads (``threads``), so the reading thread mostly hashes and hands
over. Whatever happens to the output (the cap, the spool quota, a full disk),
the input is always read to its end: the kernel blocks the crashing process
until its core has been consumed.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import zstandard

__all__ = ["MAX_ZSTD_THREADS", "StreamResult", "compress_stream", "drain", "zstd_threads"]

CHUNK = 1 << 20
MAX_ZSTD_THREADS = 8  # each zstd worker holds a few MiB of job buffers


class _Hasher:
    """SHA-256 in a helper thread (hashlib releases the GIL on large updates),
    so hashing overlaps reading and compressing. At most ``depth`` chunks wait."""

    def __init__(self, depth: int = 4) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(depth)
        self._thread = threading.Thread(target=self._run, name="coreepi-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._digest.update(chunk)

    def update(self, chunk: memoryview) -> None:
        self._queue.put(bytes(chunk))

    def hexdigest(self) -> str:
        self._queue.put(None)
        self._thread.join()
        return self._digest.hexdigest()


@dataclass
class StreamResult:
    size_bytes: int = 0  # bytes read from the input, all of them
    stored_bytes: int = 0  # bytes of the input that went into the file
    compressed_bytes: int = 0
    sha256: str | None = None  # of the stored bytes
    truncated: bool = False
    dropped_reason: str | None = None  # set when the file was abandoned


def zstd_threads(configured: int) -> int:
    """Worker threads for zstd: -1 means one per CPU, capped at MAX_ZSTD_THREADS."""
    if configured < 0:
        return min(os.cpu_count() or 1, MAX_ZSTD_THREADS)
    return configured


Source = int | BinaryIO  # a file descriptor, or a binary file with readinto()


def _reader(src: Source) -> Callable[[memoryview], int]:
    if isinstance(src, int):
        return lambda buf: os.readv(src, [buf])
    readinto = src.readinto  # type: ignore[attr-defined]  # BinaryIO lacks it in typeshed
    return lambda buf: int(readinto(buf) or 0)


def drain(src: Source, buf: memoryview | None = None) -> int:
    """Read ``src`` to its end, discarding; returns the number of bytes read."""
    buf = buf if buf is not None else memoryview(bytearray(CHUNK))
    read = _reader(src)
    total = 0
    while n := read(buf):
        total += n
    return total


def compress_stream(
    fd: Source,
    dest: Path | None,
    *,
    level: int = 3,
    threads: int = -1,
    max_bytes: int | None = None,
    max_compressed_bytes: int | None = None,
    sha256: bool = False,
) -> StreamResult:
    """Read ``fd`` to EOF, storing up to ``max_bytes`` of it zstd-compressed in
    ``dest`` (None: store nothing). If the compressed file would exceed
    ``max_compressed_bytes`` (the spool quota left) or cannot be written, it is
    deleted and ``dropped_reason`` says why; reading goes on regardless.
    ``sha256``: hash the stored bytes too (costs about as much CPU as zstd
    level 3; the zstd frame carries an XXH64 content checksum either way)."""
    result = StreamResult()
    buf = memoryview(bytearray(CHUNK))
    if dest is None:
        result.size_bytes = drain(fd, buf)
        return result
    digest = _Hasher() if sha256 else None
    limit = max_bytes if max_bytes is not None else -1
    out = open(dest, "wb")
    cctx = zstandard.ZstdCompressor(level=level, threads=zstd_threads(threads), write_checksum=True)
    writer = cctx.stream_writer(out, closefd=False)
    storing = True
    try:
        read = _reader(fd)
        while n := read(buf):
            result.size_bytes += n
            if not storing:
                continue
            take = n if limit < 0 else min(n, limit - result.stored_bytes)
            if take > 0:
                chunk = buf[:take]
                if digest is not None:
                    digest.update(chunk)
                writer.write(chunk)
                result.stored_bytes += take
            if take < n:
                result.truncated = True
                storing = False
                writer.close()  # type: ignore[no-untyped-call]
            elif max_compressed_bytes is not None and writer.tell() > max_compressed_bytes:
                storing = False
                result.dropped_reason = (
                    f"spool-quota: compressed core passed the {max_compressed_bytes} bytes left"
                )
                writer.close()  # type: ignore[no-untyped-call]
        if storing:
            writer.close()  # type: ignore[no-untyped-call]
    except (OSError, zstandard.ZstdError) as exc:  # disk full, I/O error: keep draining
        result.dropped_reason = f"write-error: {getattr(exc, 'strerror', None) or exc}"
        try:
            result.size_bytes += drain(fd, buf)
        except OSError:
            pass
    finally:
        if digest is not None and result.dropped_reason:
            digest.hexdigest()  # stop the thread
        out.close()
    if result.dropped_reason is None and max_compressed_bytes is not None \
            and dest.stat().st_size > max_compressed_bytes:  # zstd's last flush passed it
        result.dropped_reason = (
            f"spool-quota: compressed core passed the {max_compressed_bytes} bytes left")
    if result.dropped_reason:
        dest.unlink(missing_ok=True)
        result.stored_bytes = 0
        return result
    result.compressed_bytes = dest.stat().st_size
    result.sha256 = digest.hexdigest() if digest is not None else None
    return result
