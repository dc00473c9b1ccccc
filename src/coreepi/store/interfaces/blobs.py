"""BlobStore: content-addressed bytes (cores, large artifacts).

A blob's key is the SHA-256 (64 lower-case hex digits) of its content *as
received* (a core's bytes, compressed or not), so writing the same content
twice stores it once and a key names one content forever. A blob is complete
or absent, never half-written. No database: workers may write blobs
directly. Implementations: :class:`coreepi.store.blobs.DirectoryBlobStore`
(a local directory), :class:`coreepi.store.s3_blobs.S3BlobStore` (an
S3-compatible bucket). Retention (:meth:`BlobStore.prune`) is built on
:meth:`BlobStore.entries` and :meth:`BlobStore.delete`.
"""

from __future__ import annotations

import abc
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO

__all__ = ["BlobInfo", "BlobStore", "PruneResult"]


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """One stored blob: its key, bytes in storage, when it was written (UTC)."""

    key: str
    size: int
    modified: datetime


@dataclass
class PruneResult:
    """What :meth:`BlobStore.prune` did: blobs and bytes deleted for age and
    for the size cap, and what is kept."""

    deleted_for_age: int = 0
    deleted_for_size: int = 0
    deleted_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0

    @property
    def deleted(self) -> int:
        return self.deleted_for_age + self.deleted_for_size


class BlobStore(abc.ABC):
    """Blobs addressed by the SHA-256 of their content."""

    @abc.abstractmethod
    def put_file(self, path: str | os.PathLike[str], key: str | None = None) -> str:
        """Store the file at ``path``; returns its key. With ``key`` given (the
        caller already hashed the file) an existing blob is not rewritten;
        otherwise the content is hashed while copying and a mismatch with
        ``key`` raises ValueError naming ``path`` (the file changed under
        us), storing nothing. OSError when ``path`` cannot be read."""

    @abc.abstractmethod
    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; returns its key."""

    def get(self, key: str) -> bytes:
        """The content of a blob, byte for byte as it was received. KeyError
        when absent; ValueError when ``key`` is not 64 lower-case hex digits.
        Whole in memory: use :meth:`write_to` for cores."""
        out = io.BytesIO()
        self.write_to(key, out)
        return out.getvalue()

    @abc.abstractmethod
    def write_to(self, key: str, out: IO[bytes]) -> int:
        """Stream the content of a blob, as received, into ``out`` in bounded
        memory; returns its size in bytes. KeyError / ValueError as :meth:`get`."""

    @abc.abstractmethod
    def stored_chunks(self, key: str) -> Iterator[bytes]:
        """The blob as it lies in storage — zstd-compressed by the store, or
        compressed as it arrived — in chunks of at most a few MiB, without
        decompressing or verifying it (a download hands this form out: a
        10 GB core must neither be inflated nor held in memory). KeyError
        when absent (raised by the first ``next``); ValueError for a
        malformed key."""

    def stored_head(self, key: str, n: int = 8) -> bytes:
        """The first ``n`` bytes of :meth:`stored_chunks` (its compression's
        magic). KeyError / ValueError as :meth:`stored_chunks`."""
        head = b""
        for chunk in self.stored_chunks(key):
            head += chunk
            if len(head) >= n:
                break
        return head[:n]

    @abc.abstractmethod
    def check(self, timeout_seconds: float = 2.0) -> str | None:
        """Whether blobs can be stored now, for a readiness probe: None when
        so, else one line naming the store and the reason. One cheap call,
        bounded by ``timeout_seconds``; never raises."""

    @abc.abstractmethod
    def has(self, key: str) -> bool:
        """Whether the blob is stored. ValueError for a malformed ``key``."""

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """Bytes the blob takes in storage (maybe compressed), or None when absent."""

    @abc.abstractmethod
    def entries(self) -> Iterator[BlobInfo]:
        """Every stored blob (any order; temporary uploads left out)."""

    def keep_modified(self, key: str, when: datetime) -> bool:
        """Date the stored blob ``key`` as written at ``when`` (aware), so
        retention (:meth:`prune`) counts its age from there — what a copy of
        a store does to keep each blob's age. False, changing nothing, when
        the storage sets the time itself (an object store's LastModified);
        True when done. KeyError when the blob is absent."""
        return False

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove a blob (absent: nothing happens). ValueError for a malformed key."""

    @abc.abstractmethod
    def mark_pruned(self, key: str) -> None:
        """Record that retention deleted blob ``key`` (a tombstone kept beside
        the blobs), so a reader can tell a pruned core from a blob store that
        never held it. ValueError for a malformed key."""

    @abc.abstractmethod
    def was_pruned(self, key: str) -> bool:
        """Whether retention deleted blob ``key`` from this store
        (:meth:`mark_pruned`). ValueError for a malformed key."""

    @abc.abstractmethod
    def pruned_keys(self) -> Iterator[str]:
        """The key of every tombstone (:meth:`mark_pruned`), any order: what a
        copy of the store carries, so a pruned core stays "pruned" there
        rather than "not found"."""

    def prune(self, max_age: timedelta | None = None, max_total_bytes: int | None = None,
              now: datetime | None = None) -> PruneResult:
        """Retention: delete the blobs written more than ``max_age`` before
        ``now`` (default: the current time), then the oldest ones until the
        rest take at most ``max_total_bytes`` in storage. None: no limit."""
        now = now or datetime.now(UTC)
        result = PruneResult()
        kept: list[BlobInfo] = []
        for info in self.entries():
            if max_age is not None and now - info.modified > max_age:
                self.mark_pruned(info.key)
                self.delete(info.key)
                result.deleted_for_age += 1
                result.deleted_bytes += info.size
            else:
                kept.append(info)
        kept.sort(key=lambda b: (b.modified, b.key))  # oldest first
        total = sum(b.size for b in kept)
        while max_total_bytes is not None and kept and total > max_total_bytes:
            oldest = kept.pop(0)
            self.mark_pruned(oldest.key)
            self.delete(oldest.key)
            total -= oldest.size
            result.deleted_for_size += 1
            result.deleted_bytes += oldest.size
        result.kept, result.kept_bytes = len(kept), total
        return result
