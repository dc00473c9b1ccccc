"""The DuckDB :class:`~coreepi.store.interfaces.HostStore`: ``hosts`` and ``exposure``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from coreepi.store.duckdb_store.gateway import DuckDBGateway, Where, insert_sql, to_json, utc_now
from coreepi.store.interfaces.hosts import HostStore
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

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from coreepi.model.fleet import ExposureInterval, HostRow
    from coreepi.store.frames import NodeTimeFrames, exposure_frame_from
    from coreepi.store.node_time import duckdb_node_time_frames

__all__ = ["DuckDBHostStore"]

EXPOSURE_BATCH = 100_000
"""Intervals staged per statement: bounds the staging frame's memory."""


class DuckDBHostStore(DuckDBGateway, HostStore):
    """Hosts and exposure in DuckDB; node-time summed by :mod:`coreepi.store.node_time`."""

    def add_hosts(self, hosts: Iterable[HostRow]) -> int:
        import pandas as pd

        rows = {h.host_id: to_json(h.attributes) for h in hosts}  # last one of a host wins
        frame = pd.DataFrame(
            {"host_id": list(rows), "attributes": list(rows.values()), "updated_at": utc_now()}
        )
        return self._insert_frame(
            "hosts", frame, casts={"updated_at": "TIMESTAMPTZ"},
            conflict="(host_id) DO UPDATE SET attributes = excluded.attributes, "
            "updated_at = excluded.updated_at",
        )

    def add_exposure(self, intervals: Iterable[ExposureInterval], source: str = "") -> ExposureResult:
        result = ExposureResult()
        for batch in batched(intervals, EXPOSURE_BATCH):
            self._add_exposure_batch(batch, source, result)
        return result

    def _add_exposure_batch(
        self, batch: list[ExposureInterval], source: str, result: ExposureResult
    ) -> None:
        """Write one batch; add what became of it to ``result``."""
        import pandas as pd

        if not batch:
            return
        frame = pd.DataFrame({
            "i": range(len(batch)),
            "host_id": [x.host_id for x in batch],
            "start_ts": [x.start for x in batch],
            "end_ts": [x.end for x in batch],
            "attributes": [to_json(x.attributes) for x in batch],
            "source": [f"{source}:{x.line}" if source else None for x in batch],
        })
        with self.transaction(), self._staged(frame) as con:
            same = con.execute(EXPOSURE_SAME_SQL).fetchall()
            clash = con.execute(EXPOSURE_CLASH_SQL).fetchall()
            skip = {r[0] for r in same} | {r[0] for r in clash}
            row = con.execute(
                insert_sql("exposure", ["host_id", "start_ts", "end_ts", "attributes", "source"],
                           {"source": "VARCHAR"},
                           where="NOT (i IN (SELECT unnest(?::INTEGER[])))"),
                [sorted(skip)],
            ).fetchone()
        count_exposure_batch(result, batch, int(row[0]) if row else 0, same, clash)

    def host_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT host_id FROM hosts").fetchall()}

    def hosts_frame(self) -> pd.DataFrame:
        return hosts_frame_from(
            self._query("SELECT host_id, attributes FROM hosts ORDER BY host_id").fetchall())

    def exposure_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        # overlapping [since, until): clipped to it by exposure_frame_from
        from coreepi.store.frames import exposure_frame_from

        where = Where().add_if(since, "e.end_ts > ?").add_if(until, "e.start_ts < ?")
        rows = self._query(exposure_frame_sql(where.sql), where.params).df()
        return exposure_frame_from(rows, since, until)

    def crashes_outside_exposure(self) -> Iterator[tuple[str, str | None, datetime, str | None]]:
        yield from outside_exposure_rows(self._query(OUTSIDE_EXPOSURE_SQL).fetchall())

    def node_time_frames(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> NodeTimeFrames:
        # a cursor of its own: the query registers temporary views, which
        # stay local to that cursor and vanish with it
        from coreepi.store.node_time import duckdb_node_time_frames

        cur = self._con.cursor()
        cur.execute("SET TimeZone = 'UTC'")
        frames = duckdb_node_time_frames(cur, since, until)
        if self.read_only:
            _drop_cached_blocks(cur)
        return frames


def _drop_cached_blocks(cur: duckdb.DuckDBPyConnection) -> None:
    """Hand back the table blocks DuckDB keeps cached after the node-time queries
    (~170 MB of the exposure table at 10M intervals, held through the whole
    analysis that follows). Lowering ``memory_limit`` makes DuckDB evict them at
    once; the old limit is put back. Only on a read-only store: a one-shot command
    with no other query running, which a momentary 16 MB limit could fail."""
    old = cur.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    cur.execute("SET memory_limit = '16MB'")
    cur.execute(f"SET memory_limit = '{old}'")
