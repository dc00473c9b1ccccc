"""The PostgreSQL :class:`~coreepi.store.interfaces.CrashStore`: the ``crashes`` table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.interfaces.crashes import CRASH_SUMMARY_COLUMNS, CrashStore
from coreepi.store.postgres_store.gateway import PostgresGateway, array_literal
from coreepi.store.records import CrashRecord
from coreepi.store.rows import (
    crash_frame_query,
    crash_list_query,
    crash_records_from,
    crash_records_query,
    crash_row,
    crash_update,
    first_per_crash,
)
from coreepi.store.sqlbuild import Where

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.report import CrashReport
    from coreepi.store.frames import crash_frame_from

__all__ = ["PostgresCrashStore"]

# SQL type of each column of a crashes row, in crash_row's order
CRASH_TYPES = {
    "crash_id": "VARCHAR", "host_id": "VARCHAR", "captured_at": "TIMESTAMPTZ",
    "source": "VARCHAR", "signature": "VARCHAR", "phenotypes": "VARCHAR[]",
    "hardware_phenotypes": "VARCHAR[]", "signal": "VARCHAR", "signal_number": "INTEGER",
    "si_code_name": "VARCHAR", "exe": "VARCHAR", "app_version": "VARCHAR", "attributes": "TEXT",
    "core_status": "VARCHAR", "core_reason": "VARCHAR", "core_sha256": "VARCHAR",
    "blob_key": "VARCHAR", "artifact": "VARCHAR", "report": "TEXT", "ingested_at": "TIMESTAMPTZ",
}
_LISTS = ("phenotypes", "hardware_phenotypes")


def _values(rec: CrashRecord) -> tuple[Any, ...]:
    row = crash_row(rec)
    for c in _LISTS:
        row[c] = array_literal(row[c])
    return tuple(row[c] for c in CRASH_TYPES)


class PostgresCrashStore(PostgresGateway, CrashStore):
    """Crash records in PostgreSQL (one batch = one ``INSERT … RETURNING``)."""

    def add_crashes_new_ids(self, records: Sequence[CrashRecord]) -> set[str]:
        rows = first_per_crash(records, _values)
        if not rows:
            return set()
        cur = self._insert_rows("crashes", CRASH_TYPES, list(rows.values()),
                                returning="crash_id")
        return {r[0] for r in cur.fetchall()}

    def update_crash(self, record: CrashRecord) -> bool:
        crash_id, row = crash_update(record)
        sets = ", ".join(f"{c} = ?" for c in row)
        cur = self._write(f"UPDATE crashes SET {sets} WHERE crash_id = ?",
                          [*row.values(), crash_id])
        return cur.rowcount > 0

    def crash_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT crash_id FROM crashes")}

    def get_reports(self, crash_ids: Iterable[str]) -> dict[str, CrashReport]:
        from coreepi.model.report import CrashReport

        ids = sorted(set(crash_ids))
        if not ids:
            return {}
        rows = self._query("SELECT crash_id, report FROM crashes WHERE crash_id = ANY(?)", [ids])
        return {c: CrashReport.model_validate_json(r) for c, r in rows}

    def crash_records(self, host_id: str, since: datetime, until: datetime) -> list[CrashRecord]:
        return crash_records_from(self._query(*crash_records_query(host_id, since, until)))

    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        from coreepi.store.frames import crash_frame_from

        return crash_frame_from(self._frame(*crash_frame_query(since, until)))

    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int:
        where = Where().since_until("captured_at", since, until).equals("core_status", core_status)
        return int(self._query(f"SELECT count(*) FROM crashes{where.sql}", where.params)[0][0])

    def last_crash_at(self, host_id: str, before: datetime) -> datetime | None:
        where = Where().equals("host_id", host_id).since_until("captured_at", None, before)
        last = self._query(f"SELECT max(captured_at) FROM crashes{where.sql}", where.params)[0][0]
        return None if last is None else last.astimezone(UTC)

    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        rows = self._query(*crash_list_query(since, until, host_id, signature, limit, after))
        return [dict(zip(CRASH_SUMMARY_COLUMNS, values, strict=True)) for values in rows]
