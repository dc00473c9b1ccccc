"""Where ``coreepi list|info|dump|debug`` read crashes from: the embedded
store of a data dir (:class:`StoreSource`) or a ``coreepi serve`` over HTTP
(:class:`ServerSource`). Both answer the same four questions, so every
command runs one code path whatever the source:

``summaries(since, until, host, signature)``
    crash summaries (the rows of ``Store.list_crashes`` / ``GET /crashes``:
    ``crash_id, host_id, captured_at`` (ISO-8601 text or datetime), ``source,
    signature, phenotypes, hardware_phenotypes, signal, si_code_name, exe,
    app_version, core_status, core_reason, blob_key, ingested_at``).
``resolve(prefix)``
    the one crash id that starts with ``prefix`` (as git resolves a short hash).
``report(crash_id)``
    the CrashReport.
``stored_core(report, out)``
    the core's blob as stored (plain, or zstd/gzip/bzip2/xz) written to ``out``.
``findings(since, until)``
    the report's FleetFindings (for ``list --verdict``).
``symbol_dirs(report)``
    symbol directories known for the crash (the embedded store: the
    ``symbols/`` of the fleet directory its artifact was ingested from).

Errors are :class:`coreepi.errors.InputError` (unknown or ambiguous id, no
core stored, server refusal) or :class:`coreepi.errors.StoreError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from coreepi.errors import InputError

if TYPE_CHECKING:
    from coreepi.cli.client import ApiClient
    from coreepi.epi.models import FleetFindings
    from coreepi.model.report import CrashReport
    from coreepi.store import Store

__all__ = ["CrashSource", "ServerSource", "StoreSource", "short_id"]

SHORT_ID = 12


def short_id(crash_id: str) -> str:
    """The first 12 hex digits of a crash id (what ``coreepi list`` shows)."""
    return crash_id[:SHORT_ID]


class CrashSource(Protocol):
    name: str

    def summaries(self, since: datetime | None, until: datetime | None, host: str | None,
                  signature: str | None) -> Iterator[dict[str, Any]]: ...

    def resolve(self, prefix: str) -> str: ...

    def report(self, crash_id: str) -> CrashReport: ...

    def stored_core(self, report: CrashReport, out: IO[bytes]) -> None: ...

    def findings(self, since: datetime | None, until: datetime | None) -> FleetFindings: ...

    def symbol_dirs(self, report: CrashReport) -> list[Path]: ...


def _pick(prefix: str, ids: Iterator[str] | set[str] | Callable[[str], list[str]],
          where: str) -> str:
    """The one id of ``ids`` (or of what ``ids(prefix)`` finds) starting with
    ``prefix`` (lower-cased)."""
    from coreepi.store.interfaces.crashes import MIN_CRASH_ID_PREFIX as MIN_PREFIX

    prefix = prefix.strip().lower()
    if len(prefix) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in prefix):
        raise InputError(prefix, f"not a crash id (give at least {MIN_PREFIX} of its hex "
                         "digits, as `coreepi list` shows them)")
    found = (ids(prefix) if callable(ids)
             else sorted({i for i in ids if i.startswith(prefix)}))
    if not found:
        raise InputError(prefix, f"no crash with this id in {where}")
    if len(found) > 1:
        raise InputError(prefix, "ambiguous: several crashes start with it "
                         f"({', '.join(short_id(i) + '…' for i in found[:3])}); give more digits")
    return found[0]


class StoreSource:
    """Crashes of the embedded store (opened read-only by the caller)."""

    def __init__(self, store: Store, name: str) -> None:
        self.store, self.name = store, name

    def summaries(self, since: datetime | None, until: datetime | None, host: str | None,
                  signature: str | None) -> Iterator[dict[str, Any]]:
        from coreepi.store.blobstate import rows_with_blob_state  # a --server run needs no store

        after = None
        while True:
            rows = self.store.list_crashes(since, until, host_id=host, signature=signature,
                                           limit=1000, after=after)
            yield from rows_with_blob_state(self.store, rows)
            if len(rows) < 1000:
                return
            after = (rows[-1]["ingested_at"], rows[-1]["crash_id"])

    def resolve(self, prefix: str) -> str:
        return _pick(prefix, self.store.crash_ids_starting, self.name)

    def report(self, crash_id: str) -> CrashReport:
        report = self.store.get_report(crash_id)
        if report is None:
            raise InputError(crash_id, f"no crash with this id in {self.name}")
        from coreepi.store.blobstate import with_blob_state

        return with_blob_state(self.store, report)

    def stored_core(self, report: CrashReport, out: IO[bytes]) -> None:
        from coreepi.store.blobstate import absent_core

        key = _blob_key(report)
        try:
            self.store.blobs.write_to(key, out)  # streamed: a core may be bigger than memory
        except KeyError:  # the report says stored: pruned since, or in another blob store
            raise InputError(report.crash_id, f"core (blob {key}) "
                             f"{absent_core(self.store, key)[1]}") from None
        except (OSError, ValueError) as exc:
            raise InputError(report.crash_id, f"its core (blob {key}) cannot be read from "
                             f"{self.name}: {exc}") from None

    def findings(self, since: datetime | None, until: datetime | None) -> FleetFindings:
        from coreepi.reporting import build_findings

        return build_findings(self.store, since, until)

    def symbol_dirs(self, report: CrashReport) -> list[Path]:
        if report.host_id is None or report.captured_at is None:
            return []
        # the crash's record holds the path of the artifact ingest read
        records = self.store.crash_records(report.host_id, report.captured_at,
                                           report.captured_at + timedelta(microseconds=1))
        artifact = next((r.artifact for r in records
                         if r.report.crash_id == report.crash_id and r.artifact), None)
        if artifact is None:
            return []
        for parent in Path(artifact).parents:
            if (parent / "crashes").is_dir() and (parent / "symbols").is_dir():
                return [parent / "symbols"]
        return []


class ServerSource:
    """Crashes of a ``coreepi serve`` (read scope)."""

    def __init__(self, client: ApiClient) -> None:
        self.client, self.name = client, client.root

    def summaries(self, since: datetime | None, until: datetime | None, host: str | None,
                  signature: str | None) -> Iterator[dict[str, Any]]:
        yield from self.client.crashes(
            since=since.isoformat() if since else None,
            until=until.isoformat() if until else None, host_id=host, signature=signature)

    def resolve(self, prefix: str) -> str:
        # the API has no prefix query: a full id is asked for directly, a
        # short one is looked for in the summaries (one request per 1,000 crashes)
        if len(prefix) == 32:
            return prefix.lower()
        return _pick(prefix, (row["crash_id"] for row in self.client.crashes()), self.name)

    def report(self, crash_id: str) -> CrashReport:
        from coreepi.model.report import CrashReport

        return CrashReport.model_validate(self.client.get_json(f"/crashes/{crash_id}"))

    def stored_core(self, report: CrashReport, out: IO[bytes]) -> None:
        _blob_key(report)
        self.client.download(f"/crashes/{report.crash_id}/core", out)

    def findings(self, since: datetime | None, until: datetime | None) -> FleetFindings:
        # the server's findings (its own window, refreshed as data arrives)
        from coreepi.epi.models import FleetFindings

        return FleetFindings.model_validate(self.client.get_json("/findings"))

    def symbol_dirs(self, report: CrashReport) -> list[Path]:
        return []  # the server's symbol directories are on the server


def _blob_key(report: CrashReport) -> str:
    key = report.core.blob_key
    if not report.core.stored or not key:
        why = report.core.dropped_reason or "it was not kept (ingest --no-store-cores?)"
        raise InputError(report.crash_id, f"no core stored: {why}")
    return key
