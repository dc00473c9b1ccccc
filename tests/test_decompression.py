"""Compressed artifacts: a decompression bomb is refused in bounded memory,
a cut zstd stream is an error, not a shorter core."""

import os
import subprocess
import sys
from pathlib import Path

import zstandard


def run_inspect(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coreepi", "inspect", str(path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip


def test_zstd_bomb_is_refused_with_one_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.core.zst"
    # 32 KiB that expands to 512 MiB: ELF magic then zeros.
    bomb.write_bytes(zstandard.ZstdCompressor(level=19).compress(b"\x7fELF" + bytes(512 << 20)))
    assert bomb.stat().st_size < 64 << 10
    result = run_inspect(bomb, COREEPI_MAX_CORE_BYTES=str(64 << 20))
    assert result.returncode == 2
    assert result.stderr == (
        f"coreepi: error: {bomb}: cannot decompress (zstd): decompresses to more than "
        f"{64 << 20} bytes (COREEPI_MAX_CORE_BYTES); refusing a possible decompression bomb\n"
    )
    assert not list(tmp_path.glob("coreepi-*"))


def test_cut_zstd_stream_is_an_error(tmp_path: Path) -> None:
    whole = zstandard.ZstdCompressor().compress(b"\x7fELF" + os.urandom(1 << 20))
    cut = tmp_path / "cut.core.zst"
    cut.write_bytes(whole[: len(whole) // 2])
    result = run_inspect(cut)
    assert result.returncode == 2
    assert "ended before the end of the zstd frame" in result.stderr
    assert "Traceback" not in result.stderr
