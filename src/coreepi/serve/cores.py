"""A crash's stored core as a download: the blob streamed as it lies in the
blob store (a directory or an S3 bucket; zstd-compressed, never
decompressed on the server), with the file name and the command that opens it.

The blob store keeps a core either zstd-compressed by itself (``KEY.zst``)
or as received when it arrived compressed (a zstd upload from an agent, a
``.gz`` core from a fleet directory); the first bytes tell which.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from coreepi.model.compression import compression_of
from coreepi.model.report import CrashReport
from coreepi.store import Store

__all__ = ["StoredCore", "stored_core"]

# compression (coreepi.model.compression) -> (file suffix, media type,
# decompress-to-stdout command)
_FORMATS = {
    "zstd": (".zst", "application/zstd", "zstd -dc"),
    "gzip": (".gz", "application/gzip", "gzip -dc"),
    "xz": (".xz", "application/x-xz", "xz -dc"),
    "bzip2": (".bz2", "application/x-bzip2", "bzip2 -dc"),
}


@dataclass(frozen=True, slots=True)
class StoredCore:
    """The blob's ``key``, its ``size`` in storage, the download's
    ``filename`` and ``media_type``, and ``gdb_command`` (decompress, then
    open in gdb). The bytes: ``store.blobs.stored_chunks(key)``."""

    key: str
    size: int
    filename: str
    media_type: str
    gdb_command: str


def stored_core(store: Store, report: CrashReport) -> StoredCore | None:
    """The core of ``report`` when its blob is stored here, else None."""
    key = report.core.blob_key
    if not key:
        return None
    try:
        size = store.blobs.size(key)
        head = store.blobs.stored_head(key) if size else b""
    except (KeyError, ValueError):  # absent, or not a blob key: nothing stored under it
        return None
    compression = compression_of(head)
    if compression is None:
        return None
    suffix, media, decompress = _FORMATS[compression]
    name = f"{report.crash_id}.core{suffix}"
    core = f"{report.crash_id}.core"
    exe = report.process.exe or "/path/to/the/executable"
    command = (f"{decompress} {shlex.quote(name)} > {shlex.quote(core)} && "
               f"gdb {shlex.quote(exe)} {shlex.quote(core)}")
    return StoredCore(key, size, name, media, command)

