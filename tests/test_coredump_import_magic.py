"""systemd-coredump's stored cores are decompressed by their content's magic
through the one input opener, never by their file name (issue 15): a zstd core
named ``.xz`` (before: lzma failed on it) and an xz core named ``.zst`` both read."""

from __future__ import annotations

import lzma
from pathlib import Path

import zstandard

from coreepi.capture.coredump_import import entry_core

CORE = b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 4096  # 1 MiB of varied bytes


def _entry(path: Path) -> dict[str, str]:
    return {"COREDUMP_FILENAME": str(path)}


def _read(path: Path) -> bytes:
    stream, why = entry_core(_entry(path))
    assert why is None and stream is not None
    with stream:
        return stream.read()


def test_zstd_core_named_xz_is_read_by_its_magic(tmp_path: Path) -> None:
    path = tmp_path / "core.app.1000.boot.4242.1733036400000000.xz"
    path.write_bytes(zstandard.ZstdCompressor().compress(CORE))
    assert _read(path) == CORE


def test_xz_core_named_zst_and_plain_core_named_zst(tmp_path: Path) -> None:
    xz = tmp_path / "core.a.zst"
    xz.write_bytes(lzma.compress(CORE))
    assert _read(xz) == CORE
    plain = tmp_path / "core.b.zst"
    plain.write_bytes(CORE)
    assert _read(plain) == CORE


def test_lz4_core_is_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "core.c.lz4"
    path.write_bytes(b"\x04\x22\x4d\x18" + bytes(64))
    stream, why = entry_core(_entry(path))
    assert stream is None and why == f"cannot read lz4-compressed core {path} (no lz4 decoder)"
    gone, why = entry_core(_entry(tmp_path / "missing.zst"))
    assert gone is None and why and "is gone" in why
