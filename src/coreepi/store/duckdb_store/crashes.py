"""The DuckDB :class:`~coreepi.store.interfaces.CrashStore`: the ``crashes`` table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.duckdb_store.gateway import DuckDBGateway, Where, insert_sql
from coreepi.store.interfaces.crashes import CRASH_SUMMARY_COLUMNS, CrashStore
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

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.report import CrashReport
    from coreepi.store.frames import crash_frame_from

__all__ = ["DuckDBCrashStore"]

# SQL types of the columns whose pandas dtype does not say it (all-None
# columns, lists, timestamps)
_CRASH_CASTS = {c: "VARCHAR" for c in (
    "host_id", "signature", "signal", "si_code_name", "exe", "app_version",
    "core_reason", "core_sha256", "blob_key", "artifact")}
_CRASH_CASTS |= {"captured_at": "TIMESTAMPTZ", "ingested_at": "TIMESTAMPTZ",
                 "signal_number": "INTEGER", "phenotypes": "VARCHAR[]",
                 "hardware_phenotypes": "VARCHAR[]"}


def _utc_or_none(value: datetime | None) -> datetime | None:
    return value.astimezone(UTC) if value is not None else None


class DuckDBCrashStore(DuckDBGateway, CrashStore):
    """Crash records in DuckDB (one batch = one ``INSERT … RETURNING``)."""

    def add_crashes_new_ids(self, records: Sequence[CrashRecord]) -> set[str]:
        import pandas as pd

        rows = first_per_crash(records, crash_row)
        if not rows:
            return set()
        frame = pd.DataFrame(list(rows.values()))
        with self.transaction(), self._staged(frame) as con:
            new = con.execute(
                insert_sql("crashes", frame.columns, _CRASH_CASTS, returning="crash_id")
            ).fetchall()
        return {r[0] for r in new}

    def update_crash(self, record: CrashRecord) -> bool:
        crash_id, row = crash_update(record)
        sets = ", ".join(
            f"{c} = CAST(? AS {_CRASH_CASTS[c]})" if c in _CRASH_CASTS else f"{c} = ?"
            for c in row
        )
        with self.transaction():
            result = self._con.execute(
                f"UPDATE crashes SET {sets} WHERE crash_id = ?", [*row.values(), crash_id]
            ).fetchone()
        return bool(result and result[0])

    def crash_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT crash_id FROM crashes").fetchall()}

    def get_reports(self, crash_ids: Iterable[str]) -> dict[str, CrashReport]:
        from coreepi.model.report import CrashReport

        ids = sorted(set(crash_ids))
        if not ids:
            return {}
        rows = self._query(
            "SELECT crash_id, report FROM crashes WHERE crash_id IN (SELECT unnest(?::VARCHAR[]))",
            [ids],
        ).fetchall()
        return {c: CrashReport.model_validate_json(r) for c, r in rows}

    def crash_records(self, host_id: str, since: datetime, until: datetime) -> list[CrashRecord]:
        return crash_records_from(
            self._query(*crash_records_query(host_id, since, until)).fetchall())

    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        from coreepi.store.frames import crash_frame_from

        return crash_frame_from(self._query(*crash_frame_query(since, until)).df())

    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int:
        where = Where().since_until("captured_at", since, until).equals("core_status", core_status)
        row = self._query(f"SELECT count(*) FROM crashes{where.sql}", where.params).fetchone()
        return int(row[0]) if row else 0

    def last_crash_at(self, host_id: str, before: datetime) -> datetime | None:
        where = Where().equals("host_id", host_id).since_until("captured_at", None, before)
        row = self._query(f"SELECT max(captured_at) FROM crashes{where.sql}",
                          where.params).fetchone()
        return None if not row or row[0] is None else row[0].astimezone(UTC)

    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        rows = self._query(*crash_list_query(since, until, host_id, signature, limit,
                                             after)).fetchall()
        out = []
        for values in rows:
            row = dict(zip(CRASH_SUMMARY_COLUMNS, values, strict=True))
            row["captured_at"] = _utc_or_none(row["captured_at"])
            row["ingested_at"] = _utc_or_none(row["ingested_at"])
            out.append(row)
        return out
