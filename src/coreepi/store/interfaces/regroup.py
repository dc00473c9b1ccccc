"""RegroupStore: what each re-analysis did to the groups (``coreepi reanalyze``)."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from coreepi.store.interfaces.session import Transactional
from coreepi.store.regroup_sql import RegroupRow

__all__ = ["RegroupStore"]


class RegroupStore(Transactional):
    """The regroup history: rows of :class:`~coreepi.store.regroup_sql.RegroupRow`."""

    @abc.abstractmethod
    def record_regroup(self, rows: Sequence[RegroupRow]) -> int:
        """Store one run's rows in one transaction (a pair recorded again for
        the same run is replaced); returns how many rows were written.
        ValueError (naming the pair) for a change outside ``CHANGES``."""

    @abc.abstractmethod
    def group_lineage(self, signature: str | None) -> list[RegroupRow]:
        """The changed pairs (not ``same``) where ``signature`` (None: no
        signature) is the old or the new group, by ``recorded_at`` then run."""
