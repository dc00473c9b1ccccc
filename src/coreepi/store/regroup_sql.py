"""The regroup history's rows and statements, shared by the DuckDB and
PostgreSQL stores (the table is portable: ``migrations.py`` version 5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["CHANGES", "REGROUP_COLUMNS", "RegroupRow", "insert_regroup_sql", "lineage_sql",
           "regroup_params", "regroup_row"]

CHANGES = ("split", "merge", "split+merge", "rename", "same")
REGROUP_COLUMNS = ("run_id, old_signature, new_signature, crashes, change, analyzer_version, "
                   "rules_version, recorded_at")


@dataclass(frozen=True, slots=True)
class RegroupRow:
    """One (old group -> new group) pair of one re-analysis run.

    ``old_signature`` / ``new_signature``: None for "no signature";
    ``crashes``: how many went from one to the other; ``change``: one of
    :data:`CHANGES` (``split``: the old group's crashes went to 2+ groups;
    ``merge``: the new group gathered 2+ old groups; ``rename``: a whole
    group under another name; ``same``: unchanged); ``recorded_at``: UTC."""

    run_id: str
    old_signature: str | None
    new_signature: str | None
    crashes: int
    change: str
    analyzer_version: str
    rules_version: str
    recorded_at: datetime


def insert_regroup_sql() -> str:
    """One row; a run's pair recorded twice is replaced (both engines take this form)."""
    sets = ", ".join(f"{c} = excluded.{c}" for c in REGROUP_COLUMNS.split(", ")[3:])
    return (f"INSERT INTO regroup_history ({REGROUP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            f"ON CONFLICT (run_id, old_signature, new_signature) DO UPDATE SET {sets}")


def lineage_sql() -> str:
    """The rows where ``signature`` (both parameters) is the old or the new
    group of a change, oldest run first."""
    return (f"SELECT {REGROUP_COLUMNS} FROM regroup_history "
            "WHERE change <> 'same' AND (old_signature = ? OR new_signature = ?) "
            "ORDER BY recorded_at, run_id, old_signature, new_signature")


def regroup_params(r: RegroupRow) -> list[Any]:
    if r.change not in CHANGES:
        raise ValueError(f"regroup row {r.old_signature!r} -> {r.new_signature!r}: change "
                         f"{r.change!r} is not one of {', '.join(CHANGES)}")
    return [r.run_id, r.old_signature or "", r.new_signature or "", r.crashes, r.change,
            r.analyzer_version, r.rules_version, r.recorded_at]


def regroup_row(r: tuple[Any, ...]) -> RegroupRow:
    return RegroupRow(r[0], r[1] or None, r[2] or None, int(r[3]), r[4], r[5], r[6],
                      r[7].astimezone(UTC))
