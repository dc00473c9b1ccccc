"""What every store interface shares: transactions and closing.

A backend object may implement one interface or all of them over one
connection (see :class:`coreepi.store.Store`); either way a write method is
one transaction of its own unless it runs inside :meth:`transaction`, and a
read sees committed rows plus the rows of the calling thread's open
transaction.
"""

from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from typing import Self

__all__ = ["Transactional"]


class Transactional(abc.ABC):
    """A store connection: transactions, closing, ``with`` support."""

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Group writes: everything inside commits together or not at all.

        Nested calls join the outer transaction. An exception leaving the
        outermost block rolls everything back and propagates. Raises
        :class:`~coreepi.errors.StoreError` when the store was opened
        read-only."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection; idempotent. Nothing may be called after."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
