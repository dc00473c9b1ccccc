"""The DuckDB :class:`~coreepi.store.interfaces.CrashStore`: the ``crashes`` table."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from coreepi.store.duckdb_store.gateway import DuckDBGateway, Where, insert_sql
from coreepi.store.interfaces.crashes import CRASH_SUMMARY_COLUMNS, CrashStore
from coreepi.store.records import CoreStatus, CrashRecord
from coreepi.store.rows import crash_row

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.report import CrashReport
    from coreepi.store.frames import CRASH_COLUMNS, crash_frame_from

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

        rows: dict[str, dict[str, Any]] = {}
        for rec in records:
            if rec.report.crash_id not in rows:
                rows[rec.report.crash_id] = crash_row(rec)
        if not rows:
            return set()
        frame = pd.DataFrame(list(rows.values()))
        with self.transaction(), self._staged(frame) as con:
            new = con.execute(
                insert_sql("crashes", frame.columns, _CRASH_CASTS, returning="crash_id")
            ).fetchall()
        return {r[0] for r in new}

    def update_crash(self, record: CrashRecord) -> bool:
        row = crash_row(record)
        del row["ingested_at"]  # kept: the crash was ingested when it first came
        crash_id = row.pop("crash_id")
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
        from coreepi.model.report import CrashReport

        where = Where().equals("host_id", host_id).since_until("captured_at", since, until)
        rows = self._query(
            "SELECT report, attributes, core_status, core_reason, artifact FROM crashes"
            f"{where.sql} ORDER BY captured_at, crash_id LIMIT 1000",
            where.params,
        ).fetchall()
        return [
            CrashRecord(CrashReport.model_validate_json(rep), json.loads(attrs or "{}"),
                        CoreStatus(status), reason, artifact)
            for rep, attrs, status, reason, artifact in rows
        ]

    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        from coreepi.store.frames import CRASH_COLUMNS, crash_frame_from

        where = Where().since_until("captured_at", since, until)
        rows = self._query(
            f"SELECT {', '.join(CRASH_COLUMNS)}, attributes "
            f"FROM crashes{where.sql} ORDER BY captured_at, crash_id",
            where.params,
        ).df()
        return crash_frame_from(rows)

    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int:
        where = Where().since_until("captured_at", since, until).equals("core_status", core_status)
        row = self._query(f"SELECT count(*) FROM crashes{where.sql}", where.params).fetchone()
        return int(row[0]) if row else 0

    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        where = (Where().since_until("captured_at", since, until)
                 .equals("host_id", host_id).equals("signature", signature))
        if after is not None:
            where.add("(ingested_at, crash_id) > (?, ?)", *after)
        rows = self._query(
            f"SELECT {', '.join(CRASH_SUMMARY_COLUMNS)} FROM crashes{where.sql} "
            "ORDER BY ingested_at, crash_id LIMIT ?",
            [*where.params, limit],
        ).fetchall()
        out = []
        for values in rows:
            row = dict(zip(CRASH_SUMMARY_COLUMNS, values, strict=True))
            row["captured_at"] = _utc_or_none(row["captured_at"])
            row["ingested_at"] = _utc_or_none(row["ingested_at"])
            out.append(row)
        return out
