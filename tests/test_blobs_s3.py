"""S3BlobStore against a real S3-compatible HTTP server (moto's, on 127.0.0.1):
multipart streaming, checksums, server-side encryption, configuration errors.
The BlobStore contract itself runs in test_store_contract.py."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import boto3
import obstore
import pytest

from coreepi.errors import StoreError
from coreepi.store import open_blobs
from coreepi.store.s3_blobs import PART_BYTES, S3BlobStore


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    """An independent S3 client (boto3) to look at and tamper with objects."""
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def _objects(store: S3BlobStore) -> list[str]:
    return sorted(m["path"] for batch in obstore.list(store._store) for m in batch)


def test_big_core_goes_up_in_parts_and_comes_back_verified(s3_bucket: str, tmp_path: Path) -> None:
    blobs = S3BlobStore.from_url(s3_bucket)
    core = tmp_path / "core"
    data = os.urandom(PART_BYTES) * 2 + b"tail"  # incompressible 16 MiB: several parts
    core.write_bytes(data)
    key = blobs.put_file(core, hashlib.sha256(data).hexdigest())
    assert _objects(blobs) == [f"{key[:2]}/{key}"]  # the temporary upload is gone
    out = io.BytesIO()
    assert blobs.write_to(key, out) == len(data) and out.getvalue() == data


def test_a_file_changed_while_stored_leaves_nothing(s3_bucket: str, tmp_path: Path) -> None:
    blobs = S3BlobStore.from_url(s3_bucket)
    core = tmp_path / "core"
    core.write_bytes(b"\x7fELF" + bytes(1000))
    with pytest.raises(ValueError, match="content changed while storing"):
        blobs.put_file(core, "a" * 64)
    assert _objects(blobs) == []


def test_corruption_in_storage_is_caught(s3_bucket: str, s3_server: str) -> None:
    blobs = S3BlobStore.from_url(s3_bucket)
    key = blobs.put_bytes(b"\x28\xb5\x2f\xfd" + b"already zstd, kept as is")
    bucket = s3_bucket.removeprefix("s3://").split("/")[0]
    # someone rewrites the object behind our back
    _client(s3_server).put_object(Bucket=bucket, Key=f"cores/{key[:2]}/{key}", Body=b"tampered")
    with pytest.raises(StoreError, match="does not match its key"):
        blobs.get(key)


def test_server_side_encryption_is_requested(s3_bucket: str, s3_server: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COREEPI_S3_SSE", "AES256")
    blobs = open_blobs(s3_bucket, Path("unused"))
    assert isinstance(blobs, S3BlobStore)
    key = blobs.put_bytes(b"secret core")
    bucket = s3_bucket.removeprefix("s3://").split("/")[0]
    head = _client(s3_server).head_object(Bucket=bucket, Key=f"cores/{key[:2]}/{key}")
    assert head["ServerSideEncryption"] == "AES256"


def test_bad_bucket_urls_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StoreError, match="^s3://: no bucket"):
        S3BlobStore.from_url("s3://")
    monkeypatch.setenv("COREEPI_S3_SSE", "rot13")
    with pytest.raises(StoreError, match="s3://b/p: cannot configure the bucket"):
        S3BlobStore.from_url("s3://b/p")
