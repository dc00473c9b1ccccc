"""StoreGateway: the one way handlers reach the store (Datasette's shape).

Store calls block (DuckDB), so they run in worker threads, never on the
event loop. Writes are serialized by the store itself (one writer
connection behind a lock, see :mod:`coreepi.store.duckdb_store.gateway`); the
gateway bounds how many threads wait on it. Core uploads (hash, decompress,
blob, sandboxed analysis) take seconds to minutes, so they have their own
thread limit and never starve the short store calls.

:class:`GroupCommit` batches concurrent writes of one kind (reports,
heartbeats) into one transaction: DuckDB pays a few milliseconds per
statement and a disk sync per commit, so 50 agents posting at once cost one
commit, not 50. A request arriving while a batch is being written waits for
the next one; nothing waits on a timer.

Load shedding: when more than ``max_backlog`` items of one kind already wait
for their batch (:data:`~coreepi.model.limits.MAX_WRITE_BACKLOG`), a new one
is refused at once with :class:`Backlogged` (the API answers 503 with
``Retry-After``) instead of joining a queue whose wait would grow without
bound: a client that is told to come back costs nothing, one that waits
holds a connection and pushes every other request's latency up.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import Generic, ParamSpec, TypeVar

import anyio
from anyio import to_thread

from coreepi.model.limits import READ_CPU_SECONDS
from coreepi.serve.budget import run_read
from coreepi.store import Store

__all__ = ["Backlogged", "GroupCommit", "StoreGateway"]

P = ParamSpec("P")
T = TypeVar("T")
I = TypeVar("I")
R = TypeVar("R")


class StoreGateway:
    """Runs blocking store work in threads: :meth:`read`/:meth:`write` for
    short calls, :meth:`core` for core processing. A read is cancelled past
    ``read_cpu_seconds`` of CPU or when its client leaves
    (:mod:`coreepi.serve.budget`)."""

    def __init__(self, store: Store, threads: int = 16, core_threads: int = 4,
                 read_cpu_seconds: float = READ_CPU_SECONDS) -> None:
        self.store = store
        self.read_cpu_seconds = read_cpu_seconds
        self._limiter = anyio.CapacityLimiter(threads)
        self._core_limiter = anyio.CapacityLimiter(core_threads)

    async def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` within the read budget (ApiError 503 past it)."""
        return await run_read(lambda: fn(*args, **kwargs), self.read_cpu_seconds, self._limiter)

    async def write(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``; the store's writer lock is taken inside the
        thread (same pool as reads). Never cancelled: a write a client left
        still commits."""
        return await to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._limiter)

    async def core(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._core_limiter)


class Backlogged(Exception):
    """Refused: ``backlog`` items already wait to be written (the limit is
    ``limit``); come back in ``retry_after`` seconds (whole, at least 1)."""

    def __init__(self, backlog: int, limit: int, retry_after: int) -> None:
        super().__init__(f"{backlog} writes already wait for the store (limit "
                         f"max_write_backlog={limit}); retry in {retry_after} s")
        self.backlog = backlog
        self.limit = limit
        self.retry_after = retry_after


MAX_RETRY_AFTER = 30  # seconds: a client told to wait longer would lose more than it saves


class GroupCommit(Generic[I, R]):
    """Runs ``fn(store, items) -> results`` (one result per item, in order, in
    one transaction) over every item submitted while the previous batch was
    being written, at most ``max_batch`` at a time. If a batch fails, its
    items are retried one by one, so one bad item fails only its request.
    :meth:`submit` raises :class:`Backlogged` when ``max_backlog`` items
    already wait (None: no limit)."""

    def __init__(self, gateway: StoreGateway, fn: Callable[[Store, list[I]], Sequence[R]],
                 max_batch: int = 256, max_backlog: int | None = None) -> None:
        self.gateway = gateway
        self.fn = fn
        self.max_batch = max_batch
        self.max_backlog = max_backlog
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._running = False
        self._rate = 0.0  # items written per second, moving average over batches

    @property
    def backlog(self) -> int:
        """Items waiting for a batch (not counting the batch being written)."""
        return len(self._pending)

    def _retry_after(self) -> int:
        """Seconds until the backlog is written at the recent rate, 1 to MAX_RETRY_AFTER."""
        if self._rate <= 0:
            return 1
        return max(1, min(MAX_RETRY_AFTER, math.ceil(len(self._pending) / self._rate)))

    def _observe(self, items: int, seconds: float) -> None:
        rate = items / max(seconds, 1e-6)
        self._rate = rate if self._rate <= 0 else 0.8 * self._rate + 0.2 * rate

    async def submit(self, item: I) -> R:
        if self.max_backlog is not None and len(self._pending) >= self.max_backlog:
            raise Backlogged(len(self._pending), self.max_backlog, self._retry_after())
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        batch: list[tuple[I, asyncio.Future[R]]] = []
        try:
            while self._pending:
                batch = self._pending[:self.max_batch]
                del self._pending[:self.max_batch]
                started = time.perf_counter()
                try:
                    results = await self.gateway.write(self.fn, self.gateway.store,
                                                       [item for item, _ in batch])
                    self._observe(len(batch), time.perf_counter() - started)
                except Exception:
                    if len(batch) == 1:
                        raise
                    for item, future in batch:
                        try:
                            one = await self.gateway.write(self.fn, self.gateway.store, [item])
                        except Exception as exc:  # noqa: BLE001 - handed to its request
                            _settle(future, exc=exc)
                        else:
                            _settle(future, one[0])
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    _settle(future, result)
        except Exception as exc:  # noqa: BLE001
            for _, future in batch:
                _settle(future, exc=exc)
        finally:
            self._running = False
            if self._pending:  # arrived while the last batch failed
                self._running = True
                asyncio.get_running_loop().create_task(self._drain())


def _settle(future: asyncio.Future[R], result: R | None = None,
            exc: BaseException | None = None) -> None:
    if future.done():  # the request was cancelled (client gone); the write stands
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)  # type: ignore[arg-type]
