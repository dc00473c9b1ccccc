"""The PostgreSQL :class:`~coreepi.store.interfaces.HostStore`: ``hosts`` and ``exposure``.

Node-time is summed in the database
(:meth:`~coreepi.store.interfaces.HostStore.node_time_frames`, see
:mod:`coreepi.store.postgres_store.node_time`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Iterable, Iterator
from datetime import datetime

from coreepi.store.interfaces.hosts import HostStore
from coreepi.store.postgres_store.gateway import PostgresGateway
from coreepi.store.records import ExposureResult
from coreepi.store.rows import (
    EXPOSURE_CLASH_SQL,
    EXPOSURE_SAME_SQL,
    OUTSIDE_EXPOSURE_SQL,
    batched,
    count_exposure_batch,
    exposure_frame_sql,
    hosts_frame_from,
    outside_exposure_rows,
)
from coreepi.store.sqlbuild import Where, to_json, utc_now

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.fleet import ExposureInterval, HostRow
    from coreepi.store.frames import NodeTimeFrames, exposure_frame_from

__all__ = ["PostgresHostStore"]

EXPOSURE_BATCH = 50_000
"""Intervals sent per statement: bounds the parameter arrays' memory."""

_STAGE_TYPES = {"i": "INTEGER", "host_id": "VARCHAR", "start_ts": "TIMESTAMPTZ",
                "end_ts": "TIMESTAMPTZ", "attributes": "TEXT", "source": "VARCHAR"}


class PostgresHostStore(PostgresGateway, HostStore):
    """Hosts and exposure in PostgreSQL. Concurrent writers (replicas) of one
    host's intervals are serialized by a transaction-scoped advisory lock per
    host, so two overlapping heartbeats cannot both pass the overlap check."""

    def add_hosts(self, hosts: Iterable[HostRow]) -> int:
        rows = {h.host_id: to_json(h.attributes) for h in hosts}  # last one of a host wins
        if not rows:
            return 0
        now = utc_now()
        cur = self._insert_rows(
            "hosts", {"host_id": "VARCHAR", "attributes": "TEXT", "updated_at": "TIMESTAMPTZ"},
            [(h, a, now) for h, a in sorted(rows.items())],
            conflict="(host_id) DO UPDATE SET attributes = excluded.attributes, "
            "updated_at = excluded.updated_at")
        return cur.rowcount

    def add_exposure(self, intervals: Iterable[ExposureInterval], source: str = "") -> ExposureResult:
        result = ExposureResult()
        for batch in batched(intervals, EXPOSURE_BATCH):
            self._add_exposure_batch(batch, source, result)
        return result

    def _add_exposure_batch(
        self, batch: list[ExposureInterval], source: str, result: ExposureResult
    ) -> None:
        """Write one batch through a temporary staging table; add what became
        of it to ``result``."""
        if not batch:
            return
        rows = [(i, x.host_id, x.start, x.end, to_json(x.attributes),
                 f"{source}:{x.line}" if source else None) for i, x in enumerate(batch)]
        unnest = ", ".join(f"?::{t}[]" for t in _STAGE_TYPES.values())
        arrays = [[r[k] for r in rows] for k in range(len(_STAGE_TYPES))]
        with self.transaction():
            self._write("SELECT pg_advisory_xact_lock(hashtext(h)) FROM "
                        "(SELECT DISTINCT unnest(?::VARCHAR[]) AS h ORDER BY 1) AS hosts",
                        [sorted({x.host_id for x in batch})])
            self._write("CREATE TEMP TABLE _stage ON COMMIT DROP AS SELECT * FROM "
                        f"unnest({unnest}) AS s({', '.join(_STAGE_TYPES)})", arrays)
            same = self._write(EXPOSURE_SAME_SQL).fetchall()
            clash = self._write(EXPOSURE_CLASH_SQL).fetchall()
            skip = sorted({r[0] for r in same} | {r[0] for r in clash})
            added = self._write(
                "INSERT INTO exposure (host_id, start_ts, end_ts, attributes, source) "
                "SELECT host_id, start_ts, end_ts, attributes, source FROM _stage "
                "WHERE NOT (i = ANY(?::INTEGER[])) ON CONFLICT DO NOTHING", [skip]).rowcount
            self._write("DROP TABLE _stage")
        count_exposure_batch(result, batch, added, same, sorted(clash))

    def host_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT host_id FROM hosts")}

    def hosts_frame(self) -> pd.DataFrame:
        return hosts_frame_from(self._query("SELECT host_id, attributes FROM hosts ORDER BY "
                                            "host_id"))

    def exposure_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        # overlapping [since, until): clipped to it by exposure_frame_from
        from coreepi.store.frames import NodeTimeFrames, exposure_frame_from

        where = Where().add_if(since, "e.end_ts > ?").add_if(until, "e.start_ts < ?")
        rows = self._frame(exposure_frame_sql(where.sql), where.params)
        return exposure_frame_from(rows, since, until)

    def crashes_outside_exposure(self) -> Iterator[tuple[str, str | None, datetime, str | None]]:
        yield from outside_exposure_rows(self._query(OUTSIDE_EXPOSURE_SQL))

    def node_time_frames(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> NodeTimeFrames:
        from coreepi.store.postgres_store.node_time import postgres_node_time_frames

        return postgres_node_time_frames(self, since, until)
