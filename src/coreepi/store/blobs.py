"""The local-directory :class:`~coreepi.store.interfaces.BlobStore`.

A blob's key is the SHA-256 (lower-case hex) of its content *as received*
(e.g. the core file's bytes, compressed or not). On disk it lives at
``ROOT/ab/abcdef….zst`` — zstd-compressed — or ``ROOT/ab/abcdef…`` when the
content is already compressed (zstd, gzip, bzip2, xz), which is not worth
compressing again. Writes go to a temporary file and are renamed into place,
so a blob is complete or absent, and concurrent writers of one key are
harmless (same content).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import zstandard

from coreepi.model.compression import compression_of
from coreepi.store.interfaces.blobs import BlobInfo, BlobStore

__all__ = ["DirectoryBlobStore", "check_key", "sha256_file"]

_CHUNK = 1 << 20
ZSTD_LEVEL = 3


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 of the file at ``path``, lower-case hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check_key(key: str) -> str:
    """``key`` if it is a blob key (64 lower-case hex digits), else ValueError."""
    if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(f"not a blob key (64 lower-case hex digits): {key!r}")
    return key


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (POSIX: fsync the directory)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


PRUNED_DIR = "pruned"
"""Where a blob store keeps the tombstones of the blobs retention deleted."""


class DirectoryBlobStore(BlobStore):
    """Blobs under the directory ``root`` (created on the first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __str__(self) -> str:
        return str(self.root)

    def _paths(self, key: str) -> tuple[Path, Path]:
        base = self.root / check_key(key)[:2] / key
        return base.with_name(key + ".zst"), base

    def path(self, key: str) -> Path | None:
        """Where the blob is on disk (possibly zstd-compressed), or None."""
        return next((p for p in self._paths(key) if p.exists()), None)

    def has(self, key: str) -> bool:
        """Whether the blob is stored. ValueError for a malformed ``key``."""
        return self.path(key) is not None

    def check(self, timeout_seconds: float = 2.0) -> str | None:
        """See :meth:`BlobStore.check`: ``root`` (or, before the first write,
        its nearest existing parent, where it will be created) is a
        directory this process can write."""
        where = self.root
        while not where.exists() and where != where.parent:
            where = where.parent
        if not where.is_dir():
            return f"blob store {self.root}: {where} is not a directory"
        if not os.access(where, os.W_OK | os.X_OK):
            return f"blob store {self.root}: {where} is not writable by this process"
        return None

    def put_file(self, path: str | os.PathLike[str], key: str | None = None) -> str:
        """See :meth:`BlobStore.put_file`. The content is hashed while it is
        copied (and compressed) to a temporary file in ``root``, then renamed
        into place."""
        if key is not None and self.has(key):
            return key
        self.root.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as src:
            head = src.read(8)
            src.seek(0)
            compress = compression_of(head) is None
            fd, tmp = tempfile.mkstemp(prefix=".put-", dir=self.root)
            try:
                h = hashlib.sha256()
                with os.fdopen(fd, "wb") as dst:
                    if compress:
                        cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
                        with cctx.stream_writer(dst, closefd=False) as writer:
                            while chunk := src.read(_CHUNK):
                                h.update(chunk)
                                writer.write(chunk)
                    else:
                        while chunk := src.read(_CHUNK):
                            h.update(chunk)
                            dst.write(chunk)
                    dst.flush()
                    os.fsync(dst.fileno())  # durable before it is renamed into place
                digest = h.hexdigest()
                if key is not None and digest != key:
                    raise ValueError(f"{path}: content changed while storing (sha256 {digest})")
                zst, raw = self._paths(digest)
                target = zst if compress else raw
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, target)
                _fsync_dir(target.parent)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return digest

    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; returns its key."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".bytes-", dir=self.root)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            return self.put_file(tmp)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def write_to(self, key: str, out: IO[bytes]) -> int:
        """Stream a blob's content, as received, into ``out``. KeyError when absent."""
        zst, raw = self._paths(key)
        try:
            with open(zst, "rb") as fh:
                reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
                return _copy(reader, out)
        except FileNotFoundError:
            pass
        try:
            with open(raw, "rb") as fh:
                return _copy(fh, out)
        except FileNotFoundError:
            raise KeyError(key) from None

    def stored_chunks(self, key: str) -> Iterator[bytes]:
        path = self.path(key)
        if path is None:
            raise KeyError(key)
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                yield chunk

    def entries(self) -> Iterator[BlobInfo]:
        if not self.root.is_dir():
            return
        for sub in sorted(self.root.iterdir()):
            if len(sub.name) != 2 or not sub.is_dir():
                continue
            for p in sub.iterdir():
                key = p.name.removesuffix(".zst")
                if len(key) == 64:
                    st = p.stat()
                    yield BlobInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC))

    def keep_modified(self, key: str, when: datetime) -> bool:
        """See :meth:`BlobStore.keep_modified`: the file's mtime (and atime)."""
        path = self.path(key)
        if path is None:
            raise KeyError(key)
        stamp = when.timestamp()
        os.utime(path, (stamp, stamp))
        return True

    def delete(self, key: str) -> None:
        for p in self._paths(key):
            p.unlink(missing_ok=True)

    def _tombstone(self, key: str) -> Path:
        # "pruned" is not a two-character shard: entries() never lists it
        return self.root / PRUNED_DIR / check_key(key)

    def mark_pruned(self, key: str) -> None:
        tomb = self._tombstone(key)
        tomb.parent.mkdir(parents=True, exist_ok=True)
        tomb.touch()

    def was_pruned(self, key: str) -> bool:
        return self._tombstone(key).exists()

    def pruned_keys(self) -> Iterator[str]:
        tombs = self.root / PRUNED_DIR
        if tombs.is_dir():
            yield from (p.name for p in tombs.iterdir() if len(p.name) == 64)

    def size(self, key: str) -> int | None:
        """Bytes the blob takes on disk, or None when absent."""
        p = self.path(key)
        return p.stat().st_size if p is not None else None


def _copy(src: IO[bytes], out: IO[bytes]) -> int:
    total = 0
    while chunk := src.read(_CHUNK):
        out.write(chunk)
        total += len(chunk)
    return total
