"""BlobStore: content-addressed bytes (cores, large artifacts).

A blob's key is the SHA-256 (64 lower-case hex digits) of its content *as
received* (a core's bytes, compressed or not), so writing the same content
twice stores it once and a key names one content forever. A blob is complete
or absent, never half-written. No database: workers may write blobs
directly. Implementations: :class:`coreepi.store.blobs.DirectoryBlobStore`
(a local directory); an object store (S3) implements the same five methods.
"""

from __future__ import annotations

import abc
import os

__all__ = ["BlobStore"]


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

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The content of a blob, byte for byte as it was received. KeyError
        when absent; ValueError when ``key`` is not 64 lower-case hex digits."""

    @abc.abstractmethod
    def has(self, key: str) -> bool:
        """Whether the blob is stored. ValueError for a malformed ``key``."""

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """Bytes the blob takes in storage (maybe compressed), or None when absent."""
