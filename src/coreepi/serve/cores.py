"""A crash's stored artifact as a download: the blob streamed as it lies in
the blob store (a directory or an S3 bucket; zstd-compressed, never
decompressed on the server), named by what it is (a core, a kernel log, an
hs_err log: :mod:`coreepi.reporting.artifact_kind`), with the command that
opens it (gdb for a core, a pager for a log).

The blob store keeps an artifact either zstd-compressed by itself (``KEY.zst``)
or as received when it arrived compressed (a zstd upload from an agent, a
``.gz`` core from a fleet directory); the first bytes tell which.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from coreepi.model.compression import compression_of
from coreepi.model.report import CrashReport
from coreepi.reporting.artifact_kind import artifact_kind
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
    """The blob's ``key``, its ``size`` in storage, what it is (``kind``:
    ``"core"``, ``"kernel log"``, ``"hs_err log"``, ``"minidump"``), the
    download's ``filename`` and ``media_type``, ``gdb_command`` (decompress,
    then open in gdb; None when the artifact is not a core) and
    ``read_command`` (decompress into a pager; None when it is not a text
    log). The bytes: ``store.blobs.stored_chunks(key)``."""

    key: str
    size: int
    kind: str
    filename: str
    media_type: str
    gdb_command: str | None
    read_command: str | None


def stored_core(store: Store, report: CrashReport) -> StoredCore | None:
    """The stored artifact of ``report`` when its blob is stored here, else None."""
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
    kind = artifact_kind(report.source)
    name = kind.filename(report.crash_id, suffix)
    gdb = read = None
    if kind.debuggable:
        core = kind.filename(report.crash_id)
        exe = report.process.exe or "/path/to/the/executable"
        gdb = (f"{decompress} {shlex.quote(name)} > {shlex.quote(core)} && "
               f"gdb {shlex.quote(exe)} {shlex.quote(core)}")
    elif kind.text:
        read = f"{decompress} {shlex.quote(name)} | less"
    return StoredCore(key, size, kind.name, name, media, gdb, read)
