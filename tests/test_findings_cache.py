"""The findings cache refreshes once per generation of writes: readers that wait
for the findings while the first refresh runs do not start a second one (an idle
server used to recompute its findings once more after start-up for every reader
that asked while the first ran: on a large store, a minute of CPU for nothing)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from coreepi.serve import findings as findings_module
from coreepi.serve.findings import FindingsCache
from coreepi.store import DuckDBStore


@pytest.fixture()
def slow_compute(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The real ``compute``, made to take 0.8 s; returns the generations it computed."""
    real = findings_module.compute
    calls: list[int] = []

    def compute(store, covers):  # type: ignore[no-untyped-def]
        calls.append(covers)
        time.sleep(0.8)
        return real(store, covers)

    monkeypatch.setattr(findings_module, "compute", compute)
    return calls


def _readers(cache: FindingsCache, n: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=cache.wait_covering, args=(cache.wanted, 30))
               for _ in range(n)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    return threads


def test_readers_during_the_first_refresh_do_not_start_a_second(
        tmp_path: Path, slow_compute: list[int]) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        cache = FindingsCache(store, debounce_seconds=0.1, max_delay_seconds=1.0)
        try:
            cache.start()
            time.sleep(0.2)  # the first refresh is under way
            for t in _readers(cache, 3):
                t.join(30)
            assert cache.snapshot.covers == 1
            time.sleep(1.5)  # past the debounce and the max delay: any re-run has started
            assert slow_compute == [1]
            assert cache.refreshes == 1
        finally:
            cache.close()


def test_a_write_during_a_refresh_is_covered_by_the_next(
        tmp_path: Path, slow_compute: list[int]) -> None:
    with DuckDBStore(tmp_path / "data") as store:
        cache = FindingsCache(store, debounce_seconds=0.1, max_delay_seconds=1.0)
        try:
            cache.start()
            time.sleep(0.2)
            cache.notify()  # generation 2, not covered by the refresh under way
            snap = cache.wait_covering(2, 30)
            assert snap.covers == 2
            time.sleep(1.5)
            assert slow_compute == [1, 2]
        finally:
            cache.close()
