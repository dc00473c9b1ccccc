"""Cancelling reads in flight: the hook behind the server's read budget.

A thread that runs store reads inside ``with cancellable(scope):`` has every
query it starts registered on ``scope``. ``scope.cancel(reason)`` (from any
thread) stops them where they run — DuckDB: ``interrupt()`` on the query's
cursor; PostgreSQL: a cancel request for the query's connection — and makes
every later query of that thread in the scope raise :class:`ReadCancelled`
before it starts, so a cancelled read does not go on with its next query.

Outside a scope nothing changes (the CLI, the findings refresh, writes).

Error tree::

    StoreError (coreepi.errors)
     └── ReadCancelled      .reason
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from coreepi.errors import StoreError

__all__ = ["CancelScope", "ReadCancelled", "cancellable", "track_query", "watch_query"]


class ReadCancelled(StoreError):
    """The read was cancelled; ``reason`` (also ``str()``) says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CancelScope:
    """The queries of one read: :meth:`cancel` stops them all, once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interrupts: dict[int, Callable[[], object]] = {}
        self._next = 0
        self.reason: str | None = None

    def cancel(self, reason: str) -> None:
        """Stop the running queries and refuse later ones; ``reason`` is what
        :class:`ReadCancelled` says. Later calls do nothing."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            interrupts = list(self._interrupts.values())
        for interrupt in interrupts:
            try:
                interrupt()
            except Exception:  # noqa: BLE001,S110 - a query that already ended cannot be stopped
                pass

    def check(self) -> None:
        """ReadCancelled when the scope was cancelled."""
        if self.reason is not None:
            raise ReadCancelled(self.reason)

    def _add(self, interrupt: Callable[[], object]) -> int:
        with self._lock:
            self.check()
            self._next += 1
            self._interrupts[self._next] = interrupt
            return self._next

    def _remove(self, key: int) -> None:
        with self._lock:
            self._interrupts.pop(key, None)


_local = threading.local()


@contextmanager
def cancellable(scope: CancelScope) -> Iterator[CancelScope]:
    """Register the store queries this thread starts in the block on ``scope``."""
    outer = getattr(_local, "scope", None)
    _local.scope = scope
    try:
        yield scope
    finally:
        _local.scope = outer


@contextmanager
def watch_query(interrupt: Callable[[], object]) -> Iterator[None]:
    """For a store backend: around one query (or the life of its cursor),
    ``interrupt`` is what stops it. Raises ReadCancelled at once when the
    thread's scope is already cancelled; nothing outside a scope."""
    scope: CancelScope | None = getattr(_local, "scope", None)
    if scope is None:
        yield
        return
    key = scope._add(interrupt)  # noqa: SLF001 - the scope's own protocol
    try:
        yield
    finally:
        scope._remove(key)  # noqa: SLF001


def track_query(interrupt: Callable[[], object]) -> None:
    """For a store backend whose query handle lives on after the call that
    starts it (a DuckDB cursor): ``interrupt`` stops it for the rest of the
    thread's scope. ReadCancelled at once when the scope is already
    cancelled; nothing outside a scope."""
    scope: CancelScope | None = getattr(_local, "scope", None)
    if scope is not None:
        scope._add(interrupt)  # noqa: SLF001 - the scope's own protocol
