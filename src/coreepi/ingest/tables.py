"""A fleet directory's tables into the store: ``hosts.csv``, ``exposure.csv``
and ``telemetry.jsonl`` (read by :mod:`coreepi.ingest.fleet_tables`, streaming; a
bad row is a rejection naming file:line). Each table is one transaction with
its ledger row, skipped when unchanged since the last ingest. A table that
is a symlink leaving the fleet directory is refused unread, as a core or
sidecar would be (:func:`coreepi.ingest.boundary.refusal`): a node that can
write the directory must not make ingest read ``/etc/shadow`` as hosts.csv
and show its lines back in rejections."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from coreepi.ingest.boundary import NOT_REGULAR, irregular, refusal
from coreepi.ingest.fleet import Fleet
from coreepi.ingest.fleet_tables import read_exposure, read_hosts, read_telemetry
from coreepi.ingest.summary import IngestSummary, unchanged
from coreepi.model.fleet import Rejections
from coreepi.store import LedgerEntry, Store, sha256_file

__all__ = ["ingest_fleet_tables"]


def _ingest_table(
    store: Store, fleet: Fleet, path: Path, kind: str, summary: IngestSummary,
    load: Callable[[Rejections], None],
) -> None:
    summary.files_seen += 1
    rejections = Rejections()
    why = refusal(path, fleet.root)
    if why is not None or irregular(path):
        rejections.add(path, None, "symlink" if why else "not-a-file", why or NOT_REGULAR)
        with store.transaction():
            store.add_rejections(rejections, replace_files=[str(path)])
        summary.rejections.extend(rejections)
        return
    st = path.stat()
    if unchanged(store, str(path), st):
        summary.files_skipped += 1
        return
    load(rejections)
    with store.transaction():
        store.add_rejections(rejections, replace_files=[str(path)])
        store.record_file(LedgerEntry(str(path), st.st_size, st.st_mtime_ns, sha256_file(path),
                                      kind, "done"))
    summary.rejections.extend(rejections)


def ingest_fleet_tables(store: Store, fleet: Fleet, summary: IngestSummary) -> None:
    """Hosts first (so host ids can be checked), then exposure and telemetry
    events of ``fleet``, into ``store``; counts and rejections into ``summary``."""
    if fleet.hosts is not None:
        path = fleet.hosts

        def load_hosts(rej: Rejections) -> None:
            summary.hosts += store.add_hosts(read_hosts(path, rej))

        _ingest_table(store, fleet, path, "hosts", summary, load_hosts)
    known = store.host_ids() or None
    if known is None and (fleet.exposure or fleet.telemetry or fleet.crashes):
        summary.notes.append(f"{fleet.root}: no hosts known (no hosts.csv): host ids not checked")
    if fleet.exposure is not None:
        exposure_path = fleet.exposure

        def load_exposure(rej: Rejections) -> None:
            result = store.add_exposure(read_exposure(exposure_path, rej, known), str(exposure_path))
            summary.exposure_added += result.added
            summary.exposure_duplicates += result.duplicates
            for interval, s, e in result.conflicts:
                rej.add(exposure_path, interval.line, "overlap",
                        f"interval of host {interval.host_id!r} overlaps a stored one "
                        f"[{s.isoformat()}, {e.isoformat()})")

        _ingest_table(store, fleet, exposure_path, "exposure", summary, load_exposure)
    if fleet.telemetry is not None:
        telemetry_path = fleet.telemetry

        def load_events(rej: Rejections) -> None:
            summary.events_added += store.add_events(read_telemetry(telemetry_path, rej, known))

        _ingest_table(store, fleet, telemetry_path, "telemetry", summary, load_events)

