"""One way to open an input (coreepi.parse.open_input): every compression by
its magic, never its name; bounded; a reader cut short says so (file and
line). And what it fixed: zstd kernel / hs_err logs were read as garbage (0
reports, no error) by ``inspect`` and ``ingest``; a truncated ``.gz``
telemetry log gave half its events without a word; a host log was read
three times by ``ingest --telemetry``."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import sys
import threading
from pathlib import Path

import pytest
import zstandard
from test_hs_err import INTERNAL_JDK21, WINDOWS
from test_kernel_oops import KASAN_THEN_GPF
from test_telemetry import EDAC
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.errors import InputError
from coreepi.ingest.run import ingest
from coreepi.model.compression import compression_of
from coreepi.parse.open_input import (
    DecompressionError,
    input_lines,
    max_decompressed_bytes,
    open_input,
)
from coreepi.store import DuckDBStore

SRC = Path(__file__).resolve().parents[1] / "src" / "coreepi"
TEXT = "".join(f"line {i}\n" for i in range(100_000)).encode()
COMPRESSORS = {
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "gzip": gzip.compress,
    "bzip2": lambda b: bz2.compress(b, 1),  # 100 kB blocks: a cut leaves some whole
    "xz": lzma.compress,
}


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_every_compression_by_magic_not_name(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "log.txt"  # the name says plain text: the magic decides
    path.write_bytes(COMPRESSORS[kind](TEXT))
    with open_input(path) as stream:
        assert stream.compression == kind
        assert stream.read() == TEXT
    assert compression_of(path.read_bytes()[:8]) == kind
    plain = tmp_path / "plain.zst"
    plain.write_bytes(TEXT)
    with open_input(plain) as stream:
        assert stream.compression is None and stream.read() == TEXT


def test_zstd_frames_are_all_read(tmp_path: Path) -> None:
    path = tmp_path / "frames"
    cctx = zstandard.ZstdCompressor()
    path.write_bytes(cctx.compress(TEXT[:1000]) + cctx.compress(TEXT[1000:]))
    assert sum(1 for _ in input_lines(path, 100)) == 100_000


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_cut_stream_names_file_and_line(tmp_path: Path, kind: str) -> None:
    whole = COMPRESSORS[kind](TEXT)
    path = tmp_path / "cut"
    path.write_bytes(whole[: len(whole) // 2])
    read = 0
    with pytest.raises(DecompressionError) as err:
        for _ in input_lines(path, 100):
            read += 1
    exc = err.value
    assert exc.source == str(path) and exc.compression == kind and not exc.too_large
    assert exc.line == read + 1  # the line being read when the data ended
    assert 0 < read < 100_000
    if kind == "gzip":  # every line that the cut data holds is read
        import zlib

        assert read == zlib.decompressobj(31).decompress(path.read_bytes()).count(b"\n")
    assert exc.stopped_at().startswith(f"{path}: cannot decompress ({kind}): ")
    assert exc.stopped_at().endswith(f"the content stops at line {read + 1}")


def test_cap_names_file_and_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb"
    path.write_bytes(COMPRESSORS["gzip"](bytes(1 << 20)))
    monkeypatch.setenv("COREEPI_MAX_CORE_BYTES", "65536")
    assert max_decompressed_bytes() == 65536
    with pytest.raises(DecompressionError) as err, open_input(path) as stream:
        stream.read()
    assert err.value.too_large
    assert str(err.value) == (f"{path}: cannot decompress (gzip): decompresses to more than 65536 "
                              "bytes (COREEPI_MAX_CORE_BYTES); refusing a possible decompression bomb")
    monkeypatch.setenv("COREEPI_MAX_CORE_BYTES", "lots")
    with pytest.raises(InputError, match="COREEPI_MAX_CORE_BYTES: 'lots' is not a positive"):
        max_decompressed_bytes()


def test_a_pipe_is_read_whole(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(COMPRESSORS["xz"](TEXT),))
    writer.start()
    with open_input(fifo) as stream:
        assert stream.read() == TEXT
    writer.join()


def test_one_table_of_compression_magic() -> None:
    """The magic bytes of the compressions are spelled in one module only."""
    magic = re.compile(r'b"(\\x28\\xb5\\x2f\\xfd|\\x1f\\x8b|BZh|\\xfd7zXZ)')
    where = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if magic.search(p.read_text()))
    assert where == ["model/compression.py"]


# ------------------------------------------------------------ zstd logs were 0 reports


def _zst(path: Path, text: str) -> Path:
    path.write_bytes(COMPRESSORS["zstd"](text.encode()))
    return path


def test_zstd_kernel_and_hs_err_logs_through_inspect(tmp_path: Path) -> None:
    kernel = _zst(tmp_path / "console.log", KASAN_THEN_GPF)
    result = CliRunner().invoke(app, ["inspect", "--json", str(kernel)])
    assert result.exit_code == 0, result.output
    titles = [r["signature"]["signature"] for r in json.loads(result.stdout)]
    assert titles == ["KASAN: slab-use-after-free Read in ext4_fill_super",
                      "general protection fault in nf_tables_newrule"]
    hs_err = _zst(tmp_path / "hs_err_pid4242.log", WINDOWS)
    result = CliRunner().invoke(app, ["inspect", "--json", str(hs_err)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["signature"]["signature"] == "nvoglv64.dll+0x2a10"
    assert report["process"]["pid"] == 4242


def test_zstd_kernel_and_hs_err_logs_through_ingest(tmp_path: Path) -> None:
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    _zst(crashes / "console.log", KASAN_THEN_GPF)
    (crashes / "console.log.json").write_text(
        json.dumps({"host_id": "h1", "captured_at": "2024-05-01T00:00:00Z"}))
    _zst(crashes / "hs_err_pid77.log", INTERNAL_JDK21)
    (crashes / "hs_err_pid77.log.json").write_text(
        json.dumps({"host_id": "h2", "captured_at": "2024-05-02T00:00:00Z"}))
    log = _zst(tmp_path / "kern.log", "[    0.000000] Booting\n" + KASAN_THEN_GPF)
    data = tmp_path / "store"
    result = CliRunner().invoke(app, ["ingest", "--data-dir", str(data), str(crashes),
                                      "--telemetry", str(log), "--host", "h3"])
    assert result.exit_code == 0, result.output
    with DuckDBStore(data) as store:
        got = sorted(store._query("SELECT host_id, source FROM crashes").fetchall())
    assert got == [("h1", "kernel-oops"), ("h1", "kernel-oops"), ("h2", "hs_err"),
                   ("h3", "kernel-oops"), ("h3", "kernel-oops")]


# ------------------------------------------------------- a cut telemetry log says so


def _cut_gz(path: Path, text: str) -> Path:
    whole = gzip.compress(text.encode())
    path.write_bytes(whole[: len(whole) * 2 // 3])
    return path


LONG_EDAC = EDAC * 400  # long enough that a cut leaves events on both sides


def test_cli_telemetry_of_a_cut_gz_exits_2_with_one_line(tmp_path: Path) -> None:
    cut = _cut_gz(tmp_path / "kern.log.gz", LONG_EDAC)
    result = CliRunner().invoke(app, ["telemetry", "--json", str(cut)])
    assert result.exit_code == 2
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert 0 < len(events) < 5 * 400  # the events before the cut are given
    [line] = result.stderr.splitlines()
    assert re.fullmatch(
        rf"coreepi: error: {re.escape(str(cut))}: cannot decompress \(gzip\): .*; "
        r"the content stops at line \d+", line), line


def test_ingest_of_a_cut_gz_host_log_is_a_rejection(tmp_path: Path) -> None:
    cut = _cut_gz(tmp_path / "kern.log.gz", LONG_EDAC)
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([], store, telemetry_logs=[(cut, "h1")])
        events = store._query("SELECT count(*) FROM telemetry").fetchone()[0]
    [rejection] = [r for r in summary.rejections if r.category == "truncated-input"]
    assert rejection.file == str(cut) and rejection.line is not None and rejection.line > 1
    assert rejection.action == "kept"
    assert f"the log stops at line {rejection.line}" in rejection.reason
    assert 0 < events == summary.events_added < 5 * 400


# --------------------------------------------------------- a host log is read once


def test_ingest_reads_a_host_log_once(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(EDAC + KASAN_THEN_GPF)
    opened: list[str] = []

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "open" and args and str(args[0]) == str(log):
            opened.append(event)

    sys.addaudithook(hook)  # audit hooks cannot be removed: this one only counts
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([], store, telemetry_logs=[(log, "h1")])
    assert (summary.events_added, summary.crashes_added) == (5, 2)
    assert len(opened) == 1


def test_binary_blocks_give_whole_lines_and_cut_a_giant_one() -> None:
    """Blocks end at a line break (one is added to a last line without);
    a line longer than max_bytes with no break in the data read so far is
    cut there and its remainder skipped, as binary_lines does."""
    import io

    from coreepi.parse.open_input import binary_blocks, binary_lines

    data = b"a\nbb\n" + b"x" * (3 << 20) + b"\ntail\nlast"
    blocks = list(binary_blocks(io.BytesIO(data), 100))
    assert all(b.endswith(b"\n") for b in blocks)
    assert b"".join(blocks) == b"a\nbb\n" + b"x" * 100 + b"\ntail\nlast\n"
    assert list(binary_lines(io.BytesIO(data), 100)) == ["a", "bb", "x" * 100, "tail", "last"]
    assert list(binary_blocks(io.BytesIO(b""), 100)) == []
