"""The compressions an artifact may come in, recognised by content.

An artifact (core, kernel log, hs_err log, telemetry log) is plain or
compressed with zstd (RFC 8878), gzip (RFC 1952), bzip2 or xz, as
systemd-coredump and log shippers store them. The compression is told by the
first bytes (the magic), never by the file's name. This is the one table of
those magics: :mod:`coreepi.parse.open_input` opens inputs with it, the blob
store (:mod:`coreepi.store.blobs`) uses it to not compress twice.
"""

from __future__ import annotations

from typing import Final

__all__ = ["COMPRESSION_MAGIC", "MAGIC_BYTES", "compression_of"]

COMPRESSION_MAGIC: Final = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
"""(magic, name) of each compression, in the order they are tried."""
MAGIC_BYTES: Final = max(len(magic) for magic, _ in COMPRESSION_MAGIC)
"""How many first bytes :func:`compression_of` needs."""


def compression_of(head: bytes) -> str | None:
    """The compression whose magic starts ``head`` (``zstd``, ``gzip``,
    ``bzip2``, ``xz``), or None for anything else (plain). Give at least
    :data:`MAGIC_BYTES` bytes."""
    return next((name for magic, name in COMPRESSION_MAGIC if head.startswith(magic)), None)
