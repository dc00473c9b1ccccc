"""CFI indexes cached by build-id (coreepi.parse.elf.cfi_cache): kept across
cores in one process, bounded, handed from a warm zygote's child to the
zygote by name only — the zygote rebuilds each from its file and refuses a
file whose build-id is not the one claimed (or that is no regular file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401

from coreepi.ingest.artifacts import inspect_file
from coreepi.parse.elf.cfi_cache import CACHE, CfiCache
from coreepi.parse.elf.cfi_index import CfiIndex
from coreepi.parse.elf.elfimage import build_id
from coreepi.reanalysis.warm import _learn


@pytest.fixture
def cache() -> Iterator[CfiCache]:
    CACHE.clear()
    yield CACHE
    CACHE.clear()


def _file_id(path: str) -> str:
    with open(path, "rb") as fh:
        found = build_id(fh)
    assert found is not None
    return found


def test_a_second_core_reuses_the_indexes(coreset: CoreSet, cache: CfiCache) -> None:  # noqa: F811
    first = inspect_file(coreset.cores[0])[0]
    built = cache.take_built()
    # one index per file with a build-id: the executable, libc, ld.so (the vDSO, read from the
    # core's memory, is never cached)
    assert len(built) == len(cache) >= 2
    assert all(role in ("loaded", "debug") and _file_id(path) == bid for bid, role, path in built)
    misses, hits = cache.misses, cache.hits
    second = inspect_file(coreset.cores[1])[0]
    assert cache.misses == misses and cache.hits > hits  # every file of the same build
    assert cache.take_built() == []
    # the same frame trust with and without the cache
    cache.clear()
    cold = inspect_file(coreset.cores[1])[0]
    trust = [[f.trust for f in t.frames] for t in second.threads]
    assert trust == [[f.trust for f in t.frames] for t in cold.threads]
    assert first.signature is not None and first.signature.signature == "main"


def test_the_cache_is_bounded_least_recently_used() -> None:
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    small = CfiCache(maxsize=2)
    made: list[str] = []

    def build(path: str) -> CfiIndex:
        made.append(path)
        return CfiIndex()

    for bid in ("aa", "bb", "aa", "cc", "bb"):
        small.get(bid, "loaded", libc, build)
    # aa, bb built; aa hit (bb now oldest); cc evicts bb; bb built again
    assert (len(made), small.hits, len(small)) == (4, 1, 2)
    small.get(None, "loaded", libc, build)  # no build-id: built, never kept
    assert (len(made), len(small)) == (5, 2)


def test_the_zygote_builds_only_what_checks_out(coreset: CoreSet, cache: CfiCache,  # noqa: F811
                                                tmp_path: Path) -> None:
    inspect_file(coreset.cores[0])
    built = cache.take_built()
    keys = {(bid, role) for bid, role, _ in built}
    cache.clear()
    bid, role, path = built[0]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    lies = [[bid[::-1], role, path],  # a build-id the file does not have
            ["00" * 20, "loaded", str(fifo)],  # not a regular file: must not block
            ["11" * 20, "sideways", path],  # no such role
            ["22" * 20, "loaded", str(tmp_path / "missing")]]
    r, w = os.pipe()
    os.write(w, json.dumps([*map(list, built), *lies]).encode())
    os.close(w)
    _learn(r)
    os.close(r)
    assert set(cache._entries) == keys  # what checked out, and nothing else
    before = cache.misses
    inspect_file(coreset.cores[1])
    assert cache.misses == before  # the next "child" found them all


def test_garbage_from_a_child_is_ignored(cache: CfiCache) -> None:
    for data in (b"", b"not json", b'{"a": 1}', b'[[1, 2, 3], "x"]'):
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        _learn(r)
        os.close(r)
    assert len(cache) == 0


@pytest.mark.parametrize(("value", "size", "said"), [
    ("0", 0, ""), ("7", 7, ""),
    ("lots", 128, "COREEPI_CFI_CACHE_FILES='lots': not an integer >= 0; using 128")])
def test_the_bound_comes_from_the_environment(value: str, size: int, said: str) -> None:
    code = "from coreepi.parse.elf.cfi_cache import CACHE; print(CACHE.maxsize)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "COREEPI_CFI_CACHE_FILES": value})
    assert int(proc.stdout) == size
    assert proc.stderr.strip() == said
