"""``collect`` keeping up with the kernel's pipe: the stream into zstd (cut,
quota, hash) and a start without the CLI framework."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import zstandard
from capturekit import kernel_args, queued, write_config

from coreepi.capture.stream import CHUNK, compress_stream
from coreepi.cli.entry import collect_args


def test_compress_stream_round_trip_and_cut(tmp_path: Path) -> None:
    data = os.urandom(CHUNK // 2) * 5 + bytes(3 * CHUNK + 17)
    src = tmp_path / "in"
    src.write_bytes(data)
    with open(src, "rb") as fh:
        got = compress_stream(fh, tmp_path / "all.zst", sha256=True)
    assert (got.size_bytes, got.stored_bytes, got.truncated) == (len(data), len(data), False)
    assert zstandard.ZstdDecompressor().decompress(
        (tmp_path / "all.zst").read_bytes(), max_output_size=len(data)) == data
    import hashlib

    assert got.sha256 == hashlib.sha256(data).hexdigest()
    with open(src, "rb") as fh:
        cut = compress_stream(fh, tmp_path / "cut.zst", max_bytes=CHUNK + 5)
    assert (cut.size_bytes, cut.stored_bytes, cut.truncated) == (len(data), CHUNK + 5, True)
    with open(src, "rb") as fh:
        over = compress_stream(fh, tmp_path / "over.zst", max_compressed_bytes=1000)
    assert over.size_bytes == len(data) and over.dropped_reason is not None
    assert over.dropped_reason.startswith("spool-quota") and not (tmp_path / "over.zst").exists()


def test_collect_args_of_the_kernel_form() -> None:
    assert collect_args(["--config", "c.toml", "--", "1", "2"]) == (["1", "2"], "c.toml")
    assert collect_args(["--config=c.toml", "--", "1"]) == (["1"], "c.toml")
    assert collect_args(["--", "1"]) == (["1"], None)
    assert collect_args([]) == ([], None)
    assert collect_args(["--help"]) is None  # left to the typer app
    assert collect_args(["--from-systemd-coredump"]) is None


def test_collect_starts_without_the_cli_framework(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "coreepi", "collect", "--config", str(config),
         "--", *kernel_args()], input=b"\x7fELF" + bytes(100), capture_output=True, timeout=120,
        check=False)
    assert done.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "coreepi.capture.collect" in imported
    assert "typer" not in imported and "click" not in imported
    assert len(queued(tmp_path / "spool")) == 1
