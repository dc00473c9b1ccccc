"""The read budget: a read that cannot finish in its CPU time is cancelled.

Each read the server runs for a request (:meth:`StoreGateway.read`) runs in
a worker thread under a :class:`~coreepi.store.cancel.CancelScope` and is
watched from the event loop every :data:`POLL_SECONDS`:

- when the thread has spent more than ``read_cpu_seconds`` of CPU on it
  (limit ``read_cpu_seconds`` of docs/limits.md; its own CPU clock,
  ``pthread_getcpuclockid``, so time spent waiting — for a lock, for the
  findings refresh — does not count, and a busy machine does not make a
  cheap read fail), its store queries are cancelled (DuckDB
  ``interrupt()``, PostgreSQL cancel) and the client gets 503 naming the
  limit;
- when the client has gone (``http.disconnect``, seen by
  :class:`ClientWatch`) or the request is cancelled, the queries are
  cancelled too: no read goes on for nobody.

DuckDB runs a query on the calling thread plus its own helper threads;
the budget counts the calling thread, so one read's total CPU is at most
the budget times DuckDB's ``threads`` setting (``COREEPI_DUCKDB_THREADS``;
with 1, the budget bounds a read's whole CPU).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
from anyio import to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coreepi.serve.errors import ApiError
from coreepi.store.cancel import CancelScope, cancellable

__all__ = ["POLL_SECONDS", "ClientWatch", "run_read"]

T = TypeVar("T")
POLL_SECONDS = 0.05
"""How often a running read's CPU time and its client are checked."""


@dataclass
class _Client:
    """Whether the client of the current request has disconnected."""

    gone: anyio.Event = field(default_factory=anyio.Event)


_client: contextvars.ContextVar[_Client | None] = contextvars.ContextVar("coreepi_client",
                                                                         default=None)


class ClientWatch:
    """ASGI middleware: for GET/HEAD requests, one task reads the client's
    messages (the app gets them in order through a queue) so a disconnect is
    seen while the handler still works, and the reads it runs can stop."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        client = _Client()
        token = _client.set(client)
        inbox, outbox = anyio.create_memory_object_stream[Message](16)

        async def listen() -> None:
            async with inbox:
                while True:
                    message = await receive()
                    await inbox.send(message)
                    if message["type"] == "http.disconnect":
                        client.gone.set()
                        return

        async def app_receive() -> Message:
            try:
                return await outbox.receive()
            except anyio.EndOfStream:
                return {"type": "http.disconnect"}

        failure: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(listen)
                try:
                    await self.app(scope, app_receive, send)
                except Exception as exc:  # re-raised below, not wrapped in an ExceptionGroup
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            outbox.close()
            _client.reset(token)
        if failure is not None:
            raise failure


class _Read:
    """One read in its worker thread: its CPU clock once started, and
    whether ``fn`` has returned (nothing left to cancel)."""

    def __init__(self) -> None:
        self.scope = CancelScope()
        self.clock: int | None = None
        self.started_cpu = 0.0
        self.ended = False

    def start(self) -> None:
        self.clock = time.pthread_getcpuclockid(threading.get_ident())
        self.started_cpu = time.clock_gettime(self.clock)

    def cpu_seconds(self) -> float:
        return 0.0 if self.clock is None else time.clock_gettime(self.clock) - self.started_cpu


async def _police(read: _Read, cpu_seconds: float, client: _Client | None) -> None:
    """Cancel the read when it passes its budget or its client leaves; runs
    until cancelled (the read ended), and cancels the read if it is
    cancelled itself while the read still runs (the request was cancelled)."""
    try:
        while True:
            with anyio.move_on_after(POLL_SECONDS):
                if client is not None:
                    await client.gone.wait()
                    read.scope.cancel("the client disconnected; the read was cancelled")
                    return
                await anyio.sleep_forever()
            if read.cpu_seconds() > cpu_seconds:
                read.scope.cancel(f"the read used more than {cpu_seconds:g} s of CPU and was "
                                  f"cancelled (limit read_cpu_seconds={cpu_seconds:g})")
                return
    finally:
        if not read.ended:
            read.scope.cancel("the request was cancelled")


async def run_read(fn: Callable[[], T], cpu_seconds: float,
                   limiter: anyio.CapacityLimiter) -> T:
    """``fn()`` in a worker thread of ``limiter``, cancelled past
    ``cpu_seconds`` of its thread's CPU time (ApiError 503, reason
    ``read-budget``, the message naming the limit) or when the request's
    client leaves (ApiError 503, reason ``client-gone``: nobody reads it,
    the metrics count it). Any other error of ``fn`` propagates."""
    read = _Read()

    def run() -> T:
        read.scope.check()  # cancelled while it waited for a thread
        read.start()
        try:
            with cancellable(read.scope):
                result = fn()
            # cancelled while DuckDB finished its last task anyway (an interrupt
            # is honoured only between tasks): the answer is still the 503
            read.scope.check()
            return result
        finally:
            read.ended = True

    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_police, read, cpu_seconds, _client.get())
        try:
            result = await to_thread.run_sync(run, limiter=limiter)
        except Exception as exc:  # raised below, outside the task group (no ExceptionGroup)
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if failure is None:
        return result
    reason = read.scope.reason
    if reason is None:
        raise failure
    gone = not reason.startswith("the read used")
    raise ApiError(503, reason, "client-gone" if gone else "read-budget",
                   None if gone else {"Retry-After": "60"}) from failure
