"""The PostgreSQL :class:`~coreepi.store.interfaces.LedgerStore`: ``ingest_ledger``,
``ingest_rejections`` and ``crash_receipts``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Iterable

from coreepi.store.interfaces.ledger import REJECTION_COLUMNS, LedgerStore
from coreepi.store.postgres_store.gateway import PostgresGateway
from coreepi.store.records import LedgerEntry, Receipt
from coreepi.store.sqlbuild import utc_now

# pandas and the report models are loaded where they are used, not on import:
# `coreepi list` and `coreepi token` open a store without them
if TYPE_CHECKING:
    import pandas as pd

    from coreepi.model.fleet import Rejection

__all__ = ["PostgresLedgerStore"]

_LEDGER_TYPES = {"path": "VARCHAR", "size": "BIGINT", "mtime_ns": "BIGINT",
                 "sha256": "VARCHAR", "kind": "VARCHAR", "outcome": "VARCHAR",
                 "ingested_at": "TIMESTAMPTZ"}
_LEDGER_COLUMNS = tuple(_LEDGER_TYPES)[:-1]
_REJECTION_TYPES = {"file": "VARCHAR", "line": "INTEGER", "category": "VARCHAR",
                    "reason": "VARCHAR", "action": "VARCHAR", "recorded_at": "TIMESTAMPTZ"}
_RECEIPT_TYPES = {"crash_id": "VARCHAR", "content_sha256": "VARCHAR", "core_key": "VARCHAR",
                  "received_at": "TIMESTAMPTZ"}
PATHS_PER_QUERY = 100_000
"""Paths sent per ledger lookup: bounds the parameter array's memory."""


class PostgresLedgerStore(PostgresGateway, LedgerStore):
    """Ingest bookkeeping in PostgreSQL; batches are array parameters."""

    def record_files(self, entries: Iterable[LedgerEntry]) -> None:
        rows = {e.path: e for e in entries}  # the last one of a path wins
        if not rows:
            return
        now = utc_now()
        updates = ", ".join(f"{c} = excluded.{c}" for c in tuple(_LEDGER_TYPES)[1:])
        self._insert_rows("ingest_ledger", _LEDGER_TYPES,
                          [(*(getattr(e, c) for c in _LEDGER_COLUMNS), now)
                           for e in rows.values()],
                          conflict=f"(path) DO UPDATE SET {updates}")

    def ledger_entries(self, paths: Iterable[str]) -> dict[str, LedgerEntry]:
        out: dict[str, LedgerEntry] = {}
        todo = list(dict.fromkeys(paths))
        for i in range(0, len(todo), PATHS_PER_QUERY):
            rows = self._query(f"SELECT {', '.join(_LEDGER_COLUMNS)} FROM ingest_ledger "
                               "WHERE path = ANY(?)", [todo[i:i + PATHS_PER_QUERY]])
            out.update((r[0], LedgerEntry(*r)) for r in rows)
        return out

    def ledger_has_sha256(self, sha256: str) -> bool:
        return bool(self._query("SELECT EXISTS (SELECT 1 FROM ingest_ledger WHERE sha256 = ?)",
                                [sha256])[0][0])

    # -- rejections

    def add_rejections(self, rejections: Iterable[Rejection], replace_files: Iterable[str] = ()) -> int:
        items = list(rejections)
        files = sorted(set(replace_files))
        with self.transaction():
            if files:
                self._write("DELETE FROM ingest_rejections WHERE file = ANY(?)", [files])
            return self._insert_rejections(items)

    def replace_rejections(self, category: str, rejections: Iterable[Rejection]) -> int:
        items = list(rejections)
        with self.transaction():
            self._write("DELETE FROM ingest_rejections WHERE category = ?", [category])
            return self._insert_rejections(items)

    def _insert_rejections(self, items: list[Rejection]) -> int:
        if items:
            now = utc_now()
            self._insert_rows("ingest_rejections", _REJECTION_TYPES,
                              [(r.file, r.line, r.category, r.reason, r.action, now)
                               for r in items], conflict=None)
        return len(items)

    def rejections_frame(self) -> pd.DataFrame:
        import pandas as pd

        df = self._frame(f"SELECT {', '.join(REJECTION_COLUMNS)} FROM ingest_rejections "
                         "ORDER BY file, line")
        df["line"] = pd.array(df["line"], dtype="Int64")
        return df

    # -- receipts

    def add_receipts(self, receipts: Iterable[Receipt]) -> None:
        rows = {r.crash_id: r for r in receipts}  # the last one of a crash wins
        if not rows:
            return
        self._insert_rows(
            "crash_receipts", _RECEIPT_TYPES,
            [(r.crash_id, r.content_sha256, r.core_key, r.received_at) for r in rows.values()],
            conflict="(crash_id) DO UPDATE SET content_sha256 = excluded.content_sha256, "
            "core_key = excluded.core_key")

    def receipts(self, crash_ids: Iterable[str]) -> dict[str, Receipt]:
        ids = sorted(set(crash_ids))
        if not ids:
            return {}
        rows = self._query("SELECT crash_id, content_sha256, core_key, received_at "
                           "FROM crash_receipts WHERE crash_id = ANY(?)", [ids])
        return {r[0]: Receipt(*r) for r in rows}
