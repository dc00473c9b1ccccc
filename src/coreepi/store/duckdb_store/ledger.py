"""The DuckDB :class:`~coreepi.store.interfaces.LedgerStore`: ``ingest_ledger``,
``ingest_rejections`` and ``crash_receipts``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Iterable
from datetime import UTC

from coreepi.store.duckdb_store.gateway import DuckDBGateway, utc_now
from coreepi.store.interfaces.ledger import REJECTION_COLUMNS, LedgerStore
from coreepi.store.records import LedgerEntry, Receipt

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.fleet import Rejection

__all__ = ["DuckDBLedgerStore"]

_LEDGER_COLUMNS = ("path", "size", "mtime_ns", "sha256", "kind", "outcome")
PATHS_PER_QUERY = 100_000
"""Paths staged per ledger lookup: bounds the staging frame's memory."""


class DuckDBLedgerStore(DuckDBGateway, LedgerStore):
    """Ingest bookkeeping in DuckDB; batches are staged frames."""

    # -- ingest ledger

    def record_files(self, entries: Iterable[LedgerEntry]) -> None:
        import pandas as pd

        rows = {e.path: e for e in entries}  # the last one of a path wins
        frame = pd.DataFrame(
            {c: [getattr(e, c) for e in rows.values()] for c in _LEDGER_COLUMNS}
        ).assign(ingested_at=utc_now())
        updates = ", ".join(f"{c} = excluded.{c}" for c in (*_LEDGER_COLUMNS[1:], "ingested_at"))
        self._insert_frame(
            "ingest_ledger", frame,
            casts={"ingested_at": "TIMESTAMPTZ", "size": "BIGINT", "mtime_ns": "BIGINT",
                   "sha256": "VARCHAR"},
            conflict=f"(path) DO UPDATE SET {updates}",
        )

    def ledger_entries(self, paths: Iterable[str]) -> dict[str, LedgerEntry]:
        import pandas as pd

        out: dict[str, LedgerEntry] = {}
        todo = list(dict.fromkeys(paths))
        for i in range(0, len(todo), PATHS_PER_QUERY):
            frame = pd.DataFrame({"path": todo[i:i + PATHS_PER_QUERY]})
            with self._staged(frame, "_paths", self._reader()) as con:
                rows = con.execute(
                    f"SELECT {', '.join('l.' + c for c in _LEDGER_COLUMNS)} "
                    "FROM ingest_ledger l JOIN _paths p ON p.path = l.path").fetchall()
            out.update((r[0], LedgerEntry(*r)) for r in rows)
        return out

    def ledger_has_sha256(self, sha256: str) -> bool:
        row = self._query("SELECT count(*) FROM ingest_ledger WHERE sha256 = ?", [sha256]).fetchone()
        return bool(row and row[0])

    # -- rejections

    def add_rejections(self, rejections: Iterable[Rejection], replace_files: Iterable[str] = ()) -> int:
        items = list(rejections)
        files = sorted(set(replace_files))
        with self.transaction():
            if files:
                self._con.execute("DELETE FROM ingest_rejections "
                                  "WHERE file IN (SELECT unnest(?::VARCHAR[]))", [files])
            return self._insert_rejections(items)

    def replace_rejections(self, category: str, rejections: Iterable[Rejection]) -> int:
        items = list(rejections)
        with self.transaction():
            self._con.execute("DELETE FROM ingest_rejections WHERE category = ?", [category])
            return self._insert_rejections(items)

    def _insert_rejections(self, items: list[Rejection]) -> int:
        import pandas as pd

        frame = pd.DataFrame({
            "file": [r.file for r in items],
            "line": pd.array([r.line for r in items], dtype="Int64"),
            "category": [r.category for r in items],
            "reason": [r.reason for r in items],
            "action": [r.action for r in items],
        }).assign(recorded_at=utc_now())
        self._insert_frame("ingest_rejections", frame, conflict=None,
                           casts={"line": "INTEGER", "recorded_at": "TIMESTAMPTZ"})
        return len(items)

    def rejections_frame(self) -> pd.DataFrame:
        return self._query(
            f"SELECT {', '.join(REJECTION_COLUMNS)} FROM ingest_rejections ORDER BY file, line"
        ).df()

    # -- receipts

    def add_receipts(self, receipts: Iterable[Receipt]) -> None:
        import pandas as pd

        rows = {r.crash_id: r for r in receipts}  # the last one of a crash wins
        frame = pd.DataFrame({
            "crash_id": list(rows),
            "content_sha256": [r.content_sha256 for r in rows.values()],
            "core_key": [r.core_key for r in rows.values()],
            "received_at": [r.received_at for r in rows.values()],
        })
        self._insert_frame(
            "crash_receipts", frame,
            casts={"core_key": "VARCHAR", "received_at": "TIMESTAMPTZ"},
            conflict="(crash_id) DO UPDATE SET content_sha256 = excluded.content_sha256, "
            "core_key = excluded.core_key",
        )

    def receipts(self, crash_ids: Iterable[str]) -> dict[str, Receipt]:
        ids = sorted(set(crash_ids))
        if not ids:
            return {}
        rows = self._query(
            "SELECT crash_id, content_sha256, core_key, received_at FROM crash_receipts "
            "WHERE crash_id IN (SELECT unnest(?::VARCHAR[]))", [ids],
        ).fetchall()
        return {r[0]: Receipt(r[0], r[1], r[2], r[3].astimezone(UTC)) for r in rows}
