"""A crash's stored core as a download: the blob file streamed as it lies
on disk (zstd-compressed, never decompressed on the server), with the file
name and the command that opens it.

The blob store keeps a core either zstd-compressed by itself (``KEY.zst``)
or as received when it arrived compressed (a zstd upload from an agent, a
``.gz`` core from a fleet directory); the first bytes tell which.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coreepi.model.compression import compression_of
from coreepi.model.report import CrashReport
from coreepi.store import DirectoryBlobStore, Store

__all__ = ["StoredCore", "iter_file", "stored_core"]

CHUNK = 1 << 20
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
    """``path`` on disk, ``size`` bytes, the download's ``filename`` and
    ``media_type``, and ``gdb_command`` (decompress, then open in gdb)."""

    path: Path
    size: int
    filename: str
    media_type: str
    gdb_command: str


def _blobs(store: Store) -> DirectoryBlobStore | None:
    # the BlobStore interface has no streaming read yet (get returns bytes: a
    # 10 GB core must not be read into memory); a directory of blobs has paths
    blobs = store.blobs
    return blobs if isinstance(blobs, DirectoryBlobStore) else None


def stored_core(store: Store, report: CrashReport) -> StoredCore | None:
    """The core of ``report`` when its blob is stored here, else None."""
    key = report.core.blob_key
    blobs = _blobs(store)
    if not key or blobs is None:
        return None
    try:
        path = blobs.path(key)
    except ValueError:  # not a blob key: nothing stored under it
        return None
    if path is None:
        return None
    with open(path, "rb") as fh:
        head = fh.read(8)
    compression = compression_of(head)
    if compression is None:
        return None
    suffix, media, decompress = _FORMATS[compression]
    name = f"{report.crash_id}.core{suffix}"
    core = f"{report.crash_id}.core"
    exe = report.process.exe or "/path/to/the/executable"
    command = (f"{decompress} {shlex.quote(name)} > {shlex.quote(core)} && "
               f"gdb {shlex.quote(exe)} {shlex.quote(core)}")
    return StoredCore(path, path.stat().st_size, name, media, command)


def iter_file(path: Path) -> Iterator[bytes]:
    """The file's bytes in 1 MiB chunks (a blocking iterator: Starlette runs
    it in a worker thread)."""
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk
