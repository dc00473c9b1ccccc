"""The embedded store: one data dir with ``coreepi.duckdb`` and ``blobs/``.

DuckDB allows one writing process per database file (it locks the file), and
within the process one connection should write. Following Datasette's
``Database`` (one gateway for writes), every write goes through
:meth:`DuckDBStore.transaction`, which holds a lock around the single writer
connection: threads of one process (ingest's dispatchers, a future server's
handlers) queue there, never open the database themselves. Reads use cursors
(DuckDB's per-thread connections to the same database) and see committed
data. A second process gets a :class:`~coreepi.errors.StoreError` naming the
data dir, unless it opens read-only while nobody writes.

Bulk rows go in as a registered DataFrame (``INSERT … SELECT … FROM _stage
ON CONFLICT DO NOTHING``): one statement per batch instead of one per row.
The SQL itself is portable (PostgreSQL has ``ON CONFLICT``, ``TIMESTAMPTZ``,
``VARCHAR[]``); only the staging mechanism is DuckDB's.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from coreepi.errors import StoreError
from coreepi.model.events import TelemetryEvent
from coreepi.model.fleet import ExposureInterval, HostRow, Rejection
from coreepi.model.report import CrashReport
from coreepi.store.base import (
    ApiToken,
    CoreStatus,
    CrashRecord,
    ExposureResult,
    LedgerEntry,
    Receipt,
    Store,
)
from coreepi.store.blobs import BlobStore
from coreepi.store.frames import crash_frame_from, exposure_frame_from, telemetry_frame_from
from coreepi.store.migrations import MIGRATIONS, SCHEMA_VERSION_TABLE, latest_version
from coreepi.store.node_time import NodeTimeFrames, duckdb_node_time_frames

__all__ = ["DB_NAME", "DuckDBStore", "default_data_dir"]

DB_NAME = "coreepi.duckdb"
BLOB_DIR = "blobs"


def default_data_dir() -> Path:
    """``$COREEPI_DATA``, else the per-user data dir (platformdirs), e.g.
    ``~/.local/share/coreepi`` on Linux."""
    env = os.environ.get("COREEPI_DATA")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("coreepi", appauthor=False))


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def _now() -> datetime:
    return datetime.now(UTC)


def _window(column: str, since: datetime | None, until: datetime | None) -> tuple[str, list[Any]]:
    clauses, params = [], []
    if since is not None:
        clauses.append(f"{column} >= ?")
        params.append(since)
    if until is not None:
        clauses.append(f"{column} < ?")
        params.append(until)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def _crash_row(rec: CrashRecord) -> dict[str, Any]:
    """The ``crashes`` row of a record (every column)."""
    r = rec.report
    attrs = rec.attributes
    exe = attrs.get("exe") if attrs.get("exe") is not None else r.process.exe
    return {
        "crash_id": r.crash_id,
        "host_id": r.host_id,
        "captured_at": r.captured_at,
        "source": str(r.source),
        "signature": r.signature.signature if r.signature else None,
        "phenotypes": [p.name for p in r.phenotypes],
        "hardware_phenotypes": [p.name for p in r.phenotypes if p.hardware_indicative],
        "signal": r.signal.name if r.signal else None,
        "signal_number": r.signal.number if r.signal else None,
        "si_code_name": r.signal.si_code_name if r.signal else None,
        "exe": None if exe is None else str(exe),
        "app_version": None if attrs.get("app_version") is None
        else str(attrs["app_version"]),
        "attributes": _json(attrs),
        "core_status": str(rec.core_status),
        "core_reason": rec.core_reason,
        "core_sha256": r.core.sha256,
        "blob_key": r.core.blob_key,
        "artifact": rec.artifact,
        "report": r.model_dump_json(),
        "ingested_at": _now(),
    }


_CRASH_CASTS = {c: "VARCHAR" for c in (
    "host_id", "signature", "signal", "si_code_name", "exe", "app_version",
    "core_reason", "core_sha256", "blob_key", "artifact")}
_CRASH_CASTS |= {"captured_at": "TIMESTAMPTZ", "ingested_at": "TIMESTAMPTZ",
                 "signal_number": "INTEGER", "phenotypes": "VARCHAR[]",
                 "hardware_phenotypes": "VARCHAR[]"}


class DuckDBStore(Store):
    """The store in ``data_dir`` (created if needed, migrated on open)."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, read_only: bool = False):
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.read_only = read_only
        self.db_path = self.data_dir / DB_NAME
        self.blobs = BlobStore(self.data_dir / BLOB_DIR)
        if read_only and not self.db_path.exists():
            raise StoreError(f"{self.data_dir}: no coreepi store here (nothing ingested yet)")
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._con = duckdb.connect(os.fspath(self.db_path), read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise StoreError(
                    f"{self.data_dir}: the store is in use by another process "
                    f"(DuckDB allows one writer): {text.splitlines()[0]}"
                ) from None
            raise StoreError(f"{self.db_path}: cannot open: {text.splitlines()[0]}") from None
        except (duckdb.Error, OSError) as exc:
            raise StoreError(f"{self.db_path}: cannot open: {exc}") from None
        self._con.execute("SET TimeZone = 'UTC'")
        self._lock = threading.RLock()
        self._depth = 0
        self._owner: int | None = None  # thread inside transaction(), if any
        self._closed = False
        self._migrate()

    # ------------------------------------------------------------------
    # schema

    def schema_version(self) -> int:
        try:
            row = self._con.execute("SELECT max(version) FROM schema_version").fetchone()
        except duckdb.CatalogException:
            return 0
        return int(row[0]) if row and row[0] is not None else 0

    def _migrate(self) -> None:
        current = self.schema_version()
        if current > latest_version():
            raise StoreError(
                f"{self.db_path}: schema version {current} is newer than this coreepi "
                f"knows ({latest_version()}); upgrade coreepi"
            )
        if current == latest_version():
            return
        if self.read_only:
            raise StoreError(f"{self.db_path}: schema version {current} needs migrating; "
                             "open it writable once (e.g. run ingest)")
        with self.transaction():
            self._con.execute(SCHEMA_VERSION_TABLE)
        for m in MIGRATIONS:
            if m.version <= current:
                continue
            with self.transaction():
                for statement in m.statements:
                    self._con.execute(statement)
                self._con.execute(
                    "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                    [m.version, m.description, _now()],
                )

    # ------------------------------------------------------------------
    # the write gateway

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self.read_only:
            raise StoreError(f"{self.db_path}: opened read-only")
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._con.begin()
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if outer:
                    self._con.rollback()
                raise
            self._depth -= 1
            if outer:
                self._con.commit()

    def _insert_frame(self, table: str, columns: list[str], frame: pd.DataFrame,
                      conflict: str = "DO NOTHING", casts: dict[str, str] | None = None) -> int:
        """INSERT the rows of ``frame`` into ``table``; returns rows inserted."""
        if frame.empty:
            return 0
        casts = casts or {}
        select = ", ".join(
            f"CAST({c} AS {casts[c]})" if c in casts else c for c in columns
        )
        with self.transaction():
            self._con.register("_stage", frame)
            try:
                row = self._con.execute(
                    f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} FROM _stage "
                    f"ON CONFLICT {conflict}"
                ).fetchone()
            finally:
                self._con.unregister("_stage")
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------
    # writes

    def add_hosts(self, hosts: Iterable[HostRow]) -> int:
        rows = {h.host_id: _json(h.attributes) for h in hosts}  # last one of a host wins
        frame = pd.DataFrame(
            {"host_id": list(rows), "attributes": list(rows.values()), "updated_at": _now()}
        )
        return self._insert_frame(
            "hosts", ["host_id", "attributes", "updated_at"], frame,
            conflict="(host_id) DO UPDATE SET attributes = excluded.attributes, "
            "updated_at = excluded.updated_at",
            casts={"updated_at": "TIMESTAMPTZ"},
        )

    def add_exposure(self, intervals: Iterable[ExposureInterval], source: str = "") -> ExposureResult:
        result = ExposureResult()
        batch: list[ExposureInterval] = []
        for interval in intervals:
            batch.append(interval)
            if len(batch) >= 100_000:
                self._add_exposure_batch(batch, source, result)
                batch = []
        self._add_exposure_batch(batch, source, result)
        return result

    def _add_exposure_batch(
        self, batch: list[ExposureInterval], source: str, result: ExposureResult
    ) -> None:
        if not batch:
            return
        frame = pd.DataFrame({
            "i": range(len(batch)),
            "host_id": [x.host_id for x in batch],
            "start_ts": [x.start for x in batch],
            "end_ts": [x.end for x in batch],
            "attributes": [_json(x.attributes) for x in batch],
            "source": [f"{source}:{x.line}" if source else None for x in batch],
        })
        with self.transaction():
            self._con.register("_stage", frame)
            try:
                # identical to a stored interval: already there (re-ingest)
                same = self._con.execute(
                    "SELECT s.i FROM _stage s JOIN exposure e ON e.host_id = s.host_id "
                    "AND e.start_ts = s.start_ts AND e.end_ts = s.end_ts"
                ).fetchall()
                # overlapping a stored interval of the host otherwise: a conflict
                clash = self._con.execute(
                    "SELECT s.i, min(e.start_ts), min(e.end_ts) FROM _stage s JOIN exposure e "
                    "ON e.host_id = s.host_id AND e.start_ts < s.end_ts AND s.start_ts < e.end_ts "
                    "AND NOT (e.start_ts = s.start_ts AND e.end_ts = s.end_ts) GROUP BY s.i"
                ).fetchall()
                skip = {r[0] for r in same} | {r[0] for r in clash}
                row = self._con.execute(
                    "INSERT INTO exposure (host_id, start_ts, end_ts, attributes, source) "
                    "SELECT host_id, start_ts, end_ts, attributes, CAST(source AS VARCHAR) "
                    "FROM _stage WHERE NOT (i IN (SELECT unnest(?::INTEGER[]))) "
                    "ON CONFLICT DO NOTHING",
                    [sorted(skip)],
                ).fetchone()
            finally:
                self._con.unregister("_stage")
        result.added += int(row[0]) if row else 0
        result.duplicates += len(same)
        result.duplicated.extend(batch[r[0]] for r in same)
        result.conflicts.extend((batch[i], s, e) for i, s, e in clash)

    def add_crashes(self, records: Iterable[CrashRecord]) -> int:
        rows: dict[str, dict[str, Any]] = {}
        for rec in records:
            if rec.report.crash_id not in rows:
                rows[rec.report.crash_id] = _crash_row(rec)
        if not rows:
            return 0
        frame = pd.DataFrame(list(rows.values()))
        return self._insert_frame("crashes", list(frame.columns), frame, casts=_CRASH_CASTS)

    def add_crashes_new_ids(self, records: Sequence[CrashRecord]) -> set[str]:
        rows: dict[str, dict[str, Any]] = {}
        for rec in records:
            if rec.report.crash_id not in rows:
                rows[rec.report.crash_id] = _crash_row(rec)
        if not rows:
            return set()
        frame = pd.DataFrame(list(rows.values()))
        columns = list(frame.columns)
        select = ", ".join(f"CAST({c} AS {_CRASH_CASTS[c]})" if c in _CRASH_CASTS else c
                           for c in columns)
        with self.transaction():
            self._con.register("_stage", frame)
            try:
                new = self._con.execute(
                    f"INSERT INTO crashes ({', '.join(columns)}) SELECT {select} FROM _stage "
                    "ON CONFLICT DO NOTHING RETURNING crash_id"
                ).fetchall()
            finally:
                self._con.unregister("_stage")
        return {r[0] for r in new}

    def add_events(self, events: Iterable[TelemetryEvent]) -> int:
        rows: dict[str, dict[str, Any]] = {}
        for ev in events:
            rows.setdefault(ev.event_id, {
                "event_id": ev.event_id, "host_id": ev.host_id, "ts": ev.ts,
                "uptime_seconds": ev.uptime_seconds, "kind": str(ev.kind),
                "severity": ev.severity, "component": ev.component,
                "hardware_indicative": ev.hardware_indicative, "summary": ev.summary,
                "detail": _json(ev.detail), "source": ev.source, "raw": ev.raw,
            })
        if not rows:
            return 0
        frame = pd.DataFrame(list(rows.values()))
        casts = {c: "VARCHAR" for c in ("host_id", "severity", "component", "source", "raw")}
        casts |= {"ts": "TIMESTAMPTZ", "uptime_seconds": "DOUBLE PRECISION"}
        return self._insert_frame("telemetry", list(frame.columns), frame, casts=casts)

    def add_rejections(self, rejections: Iterable[Rejection], replace_files: Iterable[str] = ()) -> int:
        items = list(rejections)
        files = sorted(set(replace_files))
        with self.transaction():
            if len(files) == 1:
                self._con.execute("DELETE FROM ingest_rejections WHERE file = ?", files)
            elif files:
                self._con.execute("DELETE FROM ingest_rejections "
                                  "WHERE file IN (SELECT unnest(?::VARCHAR[]))", [files])
            return self._insert_rejections(items)

    def replace_rejections(self, category: str, rejections: Iterable[Rejection]) -> int:
        items = list(rejections)
        with self.transaction():
            self._con.execute("DELETE FROM ingest_rejections WHERE category = ?", [category])
            return self._insert_rejections(items)

    def _insert_rejections(self, items: list[Rejection]) -> int:
        if not items:
            return 0
        frame = pd.DataFrame({
            "file": [r.file for r in items],
            "line": pd.array([r.line for r in items], dtype="Int64"),
            "category": [r.category for r in items],
            "reason": [r.reason for r in items],
            "action": [r.action for r in items],
            "recorded_at": _now(),
        })
        with self.transaction():
            self._con.register("_stage", frame)
            try:
                self._con.execute(
                    "INSERT INTO ingest_rejections SELECT file, CAST(line AS INTEGER), category, "
                    "reason, action, CAST(recorded_at AS TIMESTAMPTZ) FROM _stage"
                )
            finally:
                self._con.unregister("_stage")
        return len(items)

    def record_file(self, entry: LedgerEntry) -> None:
        with self.transaction():
            self._con.execute(
                "INSERT INTO ingest_ledger (path, size, mtime_ns, sha256, kind, outcome, ingested_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET size = excluded.size, "
                "mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, kind = excluded.kind, "
                "outcome = excluded.outcome, ingested_at = excluded.ingested_at",
                [entry.path, entry.size, entry.mtime_ns, entry.sha256, entry.kind, entry.outcome,
                 _now()],
            )

    def record_files(self, entries: Iterable[LedgerEntry]) -> None:
        rows = {e.path: e for e in entries}  # the last one of a path wins
        if not rows:
            return
        frame = pd.DataFrame({
            "path": list(rows),
            "size": [e.size for e in rows.values()],
            "mtime_ns": [e.mtime_ns for e in rows.values()],
            "sha256": [e.sha256 for e in rows.values()],
            "kind": [e.kind for e in rows.values()],
            "outcome": [e.outcome for e in rows.values()],
            "ingested_at": _now(),
        })
        self._insert_frame(
            "ingest_ledger", list(frame.columns), frame,
            conflict="(path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, "
            "sha256 = excluded.sha256, kind = excluded.kind, outcome = excluded.outcome, "
            "ingested_at = excluded.ingested_at",
            casts={"ingested_at": "TIMESTAMPTZ", "size": "BIGINT", "mtime_ns": "BIGINT",
                   "sha256": "VARCHAR"},
        )

    # ------------------------------------------------------------------
    # reads

    def _query(self, sql: str, params: list[Any] | None = None) -> duckdb.DuckDBPyConnection:
        if self._depth and self._owner == threading.get_ident():
            # inside this thread's transaction: read through the writer, which
            # sees the transaction's own uncommitted rows (check-then-insert)
            return self._con.execute(sql, params or [])
        cur = self._con.cursor()
        cur.execute("SET TimeZone = 'UTC'")
        return cur.execute(sql, params or [])

    def ledger_entry(self, path: str) -> LedgerEntry | None:
        row = self._query(
            "SELECT path, size, mtime_ns, sha256, kind, outcome FROM ingest_ledger WHERE path = ?",
            [path],
        ).fetchone()
        return LedgerEntry(*row) if row else None

    def ledger_entries(self, paths: Iterable[str]) -> dict[str, LedgerEntry]:
        out: dict[str, LedgerEntry] = {}
        todo = list(dict.fromkeys(paths))
        for i in range(0, len(todo), 100_000):
            frame = pd.DataFrame({"path": todo[i:i + 100_000]})
            if self._depth and self._owner == threading.get_ident():
                con = self._con
            else:
                con = self._con.cursor()
            con.register("_paths", frame)
            try:
                rows = con.execute(
                    "SELECT l.path, l.size, l.mtime_ns, l.sha256, l.kind, l.outcome "
                    "FROM ingest_ledger l JOIN _paths p ON p.path = l.path").fetchall()
            finally:
                con.unregister("_paths")
            out.update((r[0], LedgerEntry(*r)) for r in rows)
        return out

    def ledger_has_sha256(self, sha256: str) -> bool:
        row = self._query("SELECT count(*) FROM ingest_ledger WHERE sha256 = ?", [sha256]).fetchone()
        return bool(row and row[0])

    def host_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT host_id FROM hosts").fetchall()}

    def crash_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT crash_id FROM crashes").fetchall()}

    def get_report(self, crash_id: str) -> CrashReport | None:
        row = self._query("SELECT report FROM crashes WHERE crash_id = ?", [crash_id]).fetchone()
        return CrashReport.model_validate_json(row[0]) if row else None

    def crash_frame(self, since: datetime | None = None, until: datetime | None = None) -> pd.DataFrame:
        where, params = _window("captured_at", since, until)
        rows = self._query(
            "SELECT crash_id, host_id, captured_at, source, signature, phenotypes, "
            "hardware_phenotypes, signal, si_code_name, exe, app_version, core_status, attributes "
            f"FROM crashes{where} ORDER BY captured_at, crash_id",
            params,
        ).df()
        return crash_frame_from(rows)

    def exposure_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        clauses, params = [], []
        if since is not None:
            clauses.append("e.end_ts > ?")
            params.append(since)
        if until is not None:
            clauses.append("e.start_ts < ?")
            params.append(until)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        rows = self._query(
            "SELECT e.host_id, e.start_ts AS start, e.end_ts AS \"end\", e.attributes, "
            "h.attributes AS host_attributes FROM exposure e LEFT JOIN hosts h "
            f"ON h.host_id = e.host_id{where} ORDER BY e.host_id, e.start_ts",
            params,
        ).df()
        return exposure_frame_from(rows, since, until)

    def telemetry_frame(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> pd.DataFrame:
        where, params = _window("ts", since, until)
        rows = self._query(
            "SELECT event_id, host_id, ts, kind, severity, component, hardware_indicative, "
            f"summary FROM telemetry{where} ORDER BY ts, event_id",
            params,
        ).df()
        return telemetry_frame_from(rows)

    def node_time_frames(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> NodeTimeFrames:
        cur = self._con.cursor()
        cur.execute("SET TimeZone = 'UTC'")
        return duckdb_node_time_frames(cur, since, until)

    def hosts_frame(self) -> pd.DataFrame:
        rows = self._query("SELECT host_id, attributes FROM hosts ORDER BY host_id").fetchall()
        records = [{"host_id": h, **json.loads(a)} for h, a in rows]
        return pd.DataFrame.from_records(records, columns=None if records else ["host_id"])

    def rejections_frame(self) -> pd.DataFrame:
        return self._query(
            "SELECT file, line, category, reason, action, recorded_at FROM ingest_rejections "
            "ORDER BY file, line"
        ).df()

    def count_crashes(
        self, since: datetime | None = None, until: datetime | None = None,
        core_status: str | None = None,
    ) -> int:
        where, params = _window("captured_at", since, until)
        if core_status is not None:
            where += (" AND " if where else " WHERE ") + "core_status = ?"
            params.append(core_status)
        row = self._query(f"SELECT count(*) FROM crashes{where}", params).fetchone()
        return int(row[0]) if row else 0

    def counts(self) -> dict[str, int]:
        out = {}
        for table in ("hosts", "exposure", "crashes", "telemetry", "ingest_rejections",
                      "ingest_ledger"):
            row = self._query(f"SELECT count(*) FROM {table}").fetchone()
            out[table] = int(row[0]) if row else 0
        return out

    def crashes_outside_exposure(self) -> Iterator[tuple[str, str | None, datetime, str | None]]:
        rows = self._query(
            "SELECT c.crash_id, c.host_id, c.captured_at, c.artifact FROM crashes c "
            "WHERE c.captured_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM exposure e "
            "WHERE e.host_id = c.host_id AND e.start_ts <= c.captured_at "
            "AND c.captured_at < e.end_ts) ORDER BY c.captured_at, c.crash_id"
        ).fetchall()
        for crash_id, host_id, captured_at, artifact in rows:
            yield crash_id, host_id, captured_at.astimezone(UTC), artifact

    # ------------------------------------------------------------------
    def crash_records(
        self, host_id: str, since: datetime, until: datetime
    ) -> list[CrashRecord]:
        rows = self._query(
            "SELECT report, attributes, core_status, core_reason, artifact FROM crashes "
            "WHERE host_id = ? AND captured_at >= ? AND captured_at < ? "
            "ORDER BY captured_at, crash_id LIMIT 1000",
            [host_id, since, until],
        ).fetchall()
        return [
            CrashRecord(CrashReport.model_validate_json(rep), json.loads(attrs or "{}"),
                        CoreStatus(status), reason, artifact)
            for rep, attrs, status, reason, artifact in rows
        ]

    # the HTTP API's tables

    def update_crash(self, record: CrashRecord) -> bool:
        row = _crash_row(record)
        del row["ingested_at"]
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

    def list_crashes(
        self, since: datetime | None = None, until: datetime | None = None, *,
        host_id: str | None = None, signature: str | None = None, limit: int = 100,
        after: tuple[datetime, str] | None = None,
    ) -> list[dict[str, Any]]:
        where, params = _window("captured_at", since, until)
        clauses = [where[len(" WHERE "):]] if where else []
        if host_id is not None:
            clauses.append("host_id = ?")
            params.append(host_id)
        if signature is not None:
            clauses.append("signature = ?")
            params.append(signature)
        if after is not None:
            clauses.append("(ingested_at, crash_id) > (?, ?)")
            params.extend(after)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        cur = self._query(
            "SELECT crash_id, host_id, captured_at, source, signature, phenotypes, "
            "hardware_phenotypes, signal, si_code_name, exe, app_version, core_status, "
            f"core_reason, blob_key, ingested_at FROM crashes{where} "
            "ORDER BY ingested_at, crash_id LIMIT ?",
            [*params, limit],
        )
        names = [d[0] for d in cur.description]
        out = []
        for values in cur.fetchall():
            row = dict(zip(names, values, strict=True))
            for key in ("captured_at", "ingested_at"):
                if row[key] is not None:
                    row[key] = row[key].astimezone(UTC)
            out.append(row)
        return out

    def get_reports(self, crash_ids: Iterable[str]) -> dict[str, CrashReport]:
        ids = sorted(set(crash_ids))
        if not ids:
            return {}
        rows = self._query(
            "SELECT crash_id, report FROM crashes WHERE crash_id IN (SELECT unnest(?::VARCHAR[]))",
            [ids],
        ).fetchall()
        return {c: CrashReport.model_validate_json(r) for c, r in rows}

    def receipts(self, crash_ids: Iterable[str]) -> dict[str, Receipt]:
        ids = sorted(set(crash_ids))
        if not ids:
            return {}
        rows = self._query(
            "SELECT crash_id, content_sha256, core_key, received_at FROM crash_receipts "
            "WHERE crash_id IN (SELECT unnest(?::VARCHAR[]))", [ids],
        ).fetchall()
        return {r[0]: Receipt(r[0], r[1], r[2], r[3].astimezone(UTC)) for r in rows}

    def add_receipts(self, receipts: Iterable[Receipt]) -> None:
        rows = {r.crash_id: r for r in receipts}  # the last one of a crash wins
        if not rows:
            return
        values = ", ".join(["(?, ?, ?, CAST(? AS TIMESTAMPTZ))"] * len(rows))
        params = [x for r in rows.values()
                  for x in (r.crash_id, r.content_sha256, r.core_key, r.received_at)]
        with self.transaction():
            self._con.execute(
                "INSERT INTO crash_receipts (crash_id, content_sha256, core_key, received_at) "
                f"VALUES {values} ON CONFLICT (crash_id) DO UPDATE SET "
                "content_sha256 = excluded.content_sha256, core_key = excluded.core_key",
                params,
            )

    def add_api_token(self, token: ApiToken) -> None:
        with self.transaction():
            self._con.execute(
                "INSERT INTO api_tokens (token_id, name, scopes, token_sha256, created_at, "
                "revoked_at) VALUES (?, ?, ?, ?, ?, ?)",
                [token.token_id, token.name, json.dumps(list(token.scopes)), token.token_sha256,
                 token.created_at, token.revoked_at],
            )

    def api_tokens(self, include_revoked: bool = False) -> list[ApiToken]:
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        rows = self._query(
            "SELECT token_id, name, scopes, token_sha256, created_at, revoked_at "
            f"FROM api_tokens{where} ORDER BY created_at, token_id"
        ).fetchall()
        return [
            ApiToken(t, n, tuple(json.loads(sc)), h, c.astimezone(UTC),
                     r.astimezone(UTC) if r is not None else None)
            for t, n, sc, h, c, r in rows
        ]

    def revoke_api_token(self, token_id_or_name: str) -> int:
        with self.transaction():
            row = self._con.execute(
                "UPDATE api_tokens SET revoked_at = ? WHERE revoked_at IS NULL "
                "AND (token_id = ? OR name = ?)",
                [_now(), token_id_or_name, token_id_or_name],
            ).fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------
    # blobs

    def put_blob(self, path: str | Path, key: str | None = None) -> str:
        return self.blobs.put_file(path, key)

    def get_blob(self, key: str) -> bytes:
        return self.blobs.get(key)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._con.close()
