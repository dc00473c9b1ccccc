"""The PostgreSQL :class:`~coreepi.store.interfaces.CrashStore`: the ``crashes`` table."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.interfaces.crashes import CRASH_SUMMARY_COLUMNS, CrashStore
from coreepi.store.postgres_store.gateway import PostgresGateway, array_literal
from coreepi.store.records import CoreStatus, CrashRecord
from coreepi.store.rows import crash_row
from coreepi.store.sqlbuild import Where

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.report import CrashReport
    from coreepi.store.frames import CRASH_COLUMNS, crash_frame_from

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
        rows: dict[str, tuple[Any, ...]] = {}
        for rec in records:
            if rec.report.crash_id not in rows:
                rows[rec.report.crash_id] = _values(rec)
        if not rows:
            return set()
        cur = self._insert_rows("crashes", CRASH_TYPES, list(rows.values()),
                                returning="crash_id")
        return {r[0] for r in cur.fetchall()}

    def update_crash(self, record: CrashRecord) -> bool:
        row = crash_row(record)
        del row["ingested_at"]  # kept: the crash was ingested when it first came
        crash_id = row.pop("crash_id")
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
        from coreepi.model.report import CrashReport

        where = Where().equals("host_id", host_id).since_until("captured_at", since, until)
        rows = self._query(
            "SELECT report, attributes, core_status, core_reason, artifact FROM crashes"
            f"{where.sql} ORDER BY captured_at, crash_id LIMIT 1000", where.params)
        return [
            CrashRecord(CrashReport.model_validate_json(rep), json.loads(attrs or "{}"),
                        CoreStatus(status), reason, artifact)
            for rep, attrs, status, reason, artifact in rows
        ]

    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        from coreepi.store.frames import CRASH_COLUMNS, crash_frame_from

        where = Where().since_until("captured_at", since, until)
        rows = self._frame(f"SELECT {', '.join(CRASH_COLUMNS)}, attributes "
                           f"FROM crashes{where.sql} ORDER BY captured_at, crash_id",
                           where.params)
        return crash_frame_from(rows)

    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int:
        where = Where().since_until("captured_at", since, until).equals("core_status", core_status)
        return int(self._query(f"SELECT count(*) FROM crashes{where.sql}", where.params)[0][0])

    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        where = (Where().since_until("captured_at", since, until)
                 .equals("host_id", host_id).equals("signature", signature))
        if after is not None:
            where.add("(ingested_at, crash_id) > (?, ?)", *after)
        rows = self._query(f"SELECT {', '.join(CRASH_SUMMARY_COLUMNS)} FROM crashes{where.sql} "
                           "ORDER BY ingested_at, crash_id LIMIT ?", [*where.params, limit])
        return [dict(zip(CRASH_SUMMARY_COLUMNS, values, strict=True)) for values in rows]
