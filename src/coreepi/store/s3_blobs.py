"""Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, GCS's S3 API).

``s3://bucket/prefix`` names the place. Everything else comes from the
environment, as the AWS tools read it (through obstore, the Python binding
of the Rust ``object_store`` crate): ``AWS_ENDPOINT_URL`` (a non-AWS
server), ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN`` — or, without keys, the instance metadata / web
identity credentials; server-side encryption with
``COREEPI_S3_SSE`` (``AES256``, ``aws:kms``, ``aws:kms:dsse``) and
``COREEPI_S3_SSE_KMS_KEY_ID``. ``COREEPI_S3_CHECKSUM=sha256`` (the default)
makes every PUT carry its SHA-256 so the server verifies what it received;
``none`` turns that off for servers that do not support it.

Layout: the blob of key ``K`` is the object ``prefix/K[:2]/K``; content that is
not already compressed is stored zstd-compressed, marked by the object
metadata ``coreepi-encoding: zstd``. A put streams the file through the
hash and the compressor into a multipart upload of :data:`PART_BYTES` parts
(never the whole core in memory) under ``prefix/tmp/``, then — the content
hash matching — copies it to its key (server-side) and deletes the temporary
object, so a blob is complete or absent. A get verifies the content hash.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

import obstore
import zstandard
from obstore.store import S3Store

from coreepi.errors import StoreError
from coreepi.model.compression import compression_of
from coreepi.store.blobs import PRUNED_DIR, ZSTD_LEVEL, check_key
from coreepi.store.interfaces.blobs import BlobInfo, BlobStore

__all__ = ["PART_BYTES", "S3BlobStore"]

PART_BYTES = 8 << 20
"""Multipart part size (S3's minimum is 5 MiB)."""
_CHUNK = 1 << 20
_UPLOAD_CONCURRENCY = 4  # parts in flight: bounds memory at ~4 x PART_BYTES
_ENCODING = "coreepi-encoding"


def _config_from_env() -> dict[str, Any]:
    """S3 options coreepi adds to what obstore reads from ``AWS_*``."""
    config: dict[str, Any] = {}
    sse = os.environ.get("COREEPI_S3_SSE")
    if sse:
        config["aws_server_side_encryption"] = sse
        kms = os.environ.get("COREEPI_S3_SSE_KMS_KEY_ID")
        if kms:
            config["aws_sse_kms_key_id"] = kms
    checksum = os.environ.get("COREEPI_S3_CHECKSUM", "sha256").lower()
    if checksum != "none":
        config["aws_checksum_algorithm"] = checksum
    return config


class S3BlobStore(BlobStore):
    """Blobs in one bucket under one prefix (see the module docstring)."""

    def __init__(self, store: S3Store, name: str) -> None:
        self._store = store
        self.name = name
        # what from_url built the store from: the readiness probe's client
        self._probe_options: tuple[dict[str, Any], dict[str, Any]] | None = None

    def __str__(self) -> str:
        return self.name

    @classmethod
    def from_url(cls, url: str) -> S3BlobStore:
        """``s3://bucket[/prefix]``, configured from the environment. Raises
        StoreError naming the URL when it is malformed or the options invalid."""
        rest = url.removeprefix("s3://")
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise StoreError(f"{url}: no bucket (expected s3://bucket/prefix)")
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        client = {"allow_http": True} if endpoint and endpoint.startswith("http://") else {}
        options = {"bucket": bucket, "prefix": prefix.strip("/") or None,
                   "config": _config_from_env()}
        try:
            store = S3Store(**options, client_options=client)  # type: ignore[arg-type]
        except Exception as exc:  # obstore's configuration errors have no common base
            raise StoreError(f"{url}: cannot configure the bucket: {exc}") from None
        blobs = cls(store, url)
        blobs._probe_options = (options, client)
        return blobs

    def check(self, timeout_seconds: float = 2.0) -> str | None:
        """See :meth:`BlobStore.check`: one HEAD of an object that need not
        exist (absent is an answer from a reachable bucket), through a client
        of its own without retries and with ``timeout_seconds`` for connect
        and request (the store's client retries an outage with back-off for
        minutes). A store built without :meth:`from_url` probes with its own
        client."""
        endpoint = (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
                    or "AWS")
        try:
            probe = self._store
            if self._probe_options is not None:
                options, client = self._probe_options
                limit = f"{timeout_seconds:g}s"
                probe = S3Store(**options, retry_config={"max_retries": 0},  # type: ignore
                                client_options={**client, "timeout": limit,
                                                "connect_timeout": limit})
            obstore.head(probe, "readiness-probe")
        except FileNotFoundError:
            return None
        except Exception as exc:  # obstore's errors have no common base
            reason = " ".join(str(exc).split())[:300]
            return f"blob store {self.name} (endpoint {endpoint}): unreachable: {reason}"
        return None

    # -- paths

    @staticmethod
    def _path(key: str) -> str:
        return f"{check_key(key)[:2]}/{key}"

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return obstore.head(self._store, self._path(key))  # type: ignore[return-value]
        except FileNotFoundError:
            return None

    def has(self, key: str) -> bool:
        return self._head(key) is not None

    def size(self, key: str) -> int | None:
        meta = self._head(key)
        return int(meta["size"]) if meta is not None else None

    # -- writes

    def put_file(self, path: str | os.PathLike[str], key: str | None = None) -> str:
        """See :meth:`BlobStore.put_file`: streamed (hash, maybe compress,
        multipart upload to a temporary object), then copied to its key."""
        if key is not None and self.has(key):
            return key
        with open(path, "rb") as src:
            head = src.read(8)
            src.seek(0)
            compress = compression_of(head) is None
            digest = hashlib.sha256()
            tmp = f"tmp/{uuid.uuid4().hex}"
            attributes = {_ENCODING: "zstd"} if compress else {}
            try:
                obstore.put(self._store, tmp, _parts(src, digest, compress),
                            attributes=attributes, chunk_size=PART_BYTES,
                            max_concurrency=_UPLOAD_CONCURRENCY)
                got = digest.hexdigest()
                if key is not None and got != key:
                    raise ValueError(f"{path}: content changed while storing (sha256 {got})")
                obstore.copy(self._store, tmp, self._path(got))
            finally:
                _delete_quietly(self._store, tmp)
        return got

    def put_bytes(self, data: bytes) -> str:
        key = hashlib.sha256(data).hexdigest()
        if not self.has(key):
            compress = compression_of(data[:8]) is None
            body = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data) if compress else data
            obstore.put(self._store, self._path(key), body,
                        attributes={_ENCODING: "zstd"} if compress else {})
        return key

    # -- reads

    def write_to(self, key: str, out: IO[bytes]) -> int:
        """Stream the content of a blob into ``out`` (decompressed, hash
        verified); returns its size. KeyError when absent; StoreError when
        the content does not match its key."""
        try:
            result = obstore.get(self._store, self._path(key))
        except FileNotFoundError:
            raise KeyError(key) from None
        digest = hashlib.sha256()
        total = 0
        chunks: Iterator[bytes] = (bytes(c) for c in result.stream(min_chunk_size=_CHUNK))
        if result.attributes.get(_ENCODING) == "zstd":
            chunks = _decompressed(chunks)
        for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
            total += len(chunk)
        if digest.hexdigest() != key:
            raise StoreError(f"{self.name}: blob {key} does not match its key "
                             f"(sha256 {digest.hexdigest()}): corrupted in storage")
        return total

    def stored_chunks(self, key: str) -> Iterator[bytes]:
        try:
            result = obstore.get(self._store, self._path(key))
        except FileNotFoundError:
            raise KeyError(key) from None
        for chunk in result.stream(min_chunk_size=_CHUNK):
            yield bytes(chunk)

    def stored_head(self, key: str, n: int = 8) -> bytes:
        # one ranged GET, not the start of a stream of a multi-GB object
        try:
            return bytes(obstore.get_range(self._store, self._path(key), start=0, length=n))
        except FileNotFoundError:
            raise KeyError(key) from None

    def entries(self) -> Iterator[BlobInfo]:
        for batch in obstore.list(self._store, chunk_size=1000):
            for meta in batch:
                name = meta["path"].rsplit("/", 1)[-1]
                if meta["path"].startswith(("tmp/", f"{PRUNED_DIR}/")) or len(name) != 64:
                    continue
                modified: datetime = meta["last_modified"]
                yield BlobInfo(name, int(meta["size"]), modified)

    def delete(self, key: str) -> None:
        obstore.delete(self._store, self._path(key))

    def mark_pruned(self, key: str) -> None:
        obstore.put(self._store, f"{PRUNED_DIR}/{check_key(key)}", b"")

    def was_pruned(self, key: str) -> bool:
        try:
            obstore.head(self._store, f"{PRUNED_DIR}/{check_key(key)}")
        except FileNotFoundError:
            return False
        return True

    def pruned_keys(self) -> Iterator[str]:
        for batch in obstore.list(self._store, prefix=PRUNED_DIR, chunk_size=1000):
            for meta in batch:
                name = meta["path"].rsplit("/", 1)[-1]
                if len(name) == 64:
                    yield name


def _parts(src: IO[bytes], digest: Any, compress: bool) -> Iterator[bytes]:
    """The file's bytes as upload chunks: hashed as read, zstd-compressed
    when ``compress``; about :data:`_CHUNK` bytes each."""
    if not compress:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            yield chunk
        return
    cobj = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compressobj()
    while chunk := src.read(_CHUNK):
        digest.update(chunk)
        out = cobj.compress(chunk)
        if out:
            yield out
    yield cobj.flush()


def _decompressed(chunks: Iterator[bytes]) -> Iterator[bytes]:
    dobj = zstandard.ZstdDecompressor().decompressobj()
    for chunk in chunks:
        out = dobj.decompress(chunk)
        if out:
            yield out


def _delete_quietly(store: S3Store, path: str) -> None:
    try:
        obstore.delete(store, path)
    except (FileNotFoundError, OSError):
        pass  # never uploaded (the upload failed first); nothing to remove
