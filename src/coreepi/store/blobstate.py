"""Whether a crash's core is still in the blob store: one answer for every
reader (``coreepi list|info|dump`` on a store, and the server's crash list,
crash report and download that ``--server`` and the UI read).

A crash row keeps ``core_status`` ``stored`` once its core was kept;
retention (``coreepi store prune``) deletes the blob later and leaves a
``pruned/KEY`` marker (:meth:`~coreepi.store.interfaces.blobs.BlobStore.was_pruned`).
Readers therefore check the blob: ``pruned`` when retention deleted it,
``not-found`` when it is in a blob store this reader was not given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coreepi.model.report import CrashReport
    from coreepi.store.base import Store
    from coreepi.store.interfaces.blobs import BlobStore

__all__ = ["PRUNED", "absent_blob", "absent_core", "rows_with_blob_state", "with_blob_state"]

PRUNED = "pruned: its core was deleted by retention"
"""What a reader says of a crash whose blob retention deleted."""


def absent_core(store: Store, key: str) -> tuple[str, str]:
    """(status, reason) of a crash whose blob ``key`` is not in the store's
    blob store (:func:`absent_blob` of ``store.blobs``)."""
    return absent_blob(store.blobs, key)


def absent_blob(blobs: BlobStore, key: str) -> tuple[str, str]:
    """(status, reason) of a blob ``key`` not in ``blobs``: ``pruned`` when
    retention recorded deleting it there, else ``not-found``: the core is in
    a blob store this reader was not given (``coreepi reanalyze`` has only
    the blob store). ValueError for a malformed key."""
    if blobs.was_pruned(key):
        return "pruned", PRUNED
    return "not-found", (f"not found in the blob store {blobs} (the core is stored in "
                         "another: give it with --blobs or COREEPI_BLOBS)")


def rows_with_blob_state(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Crash summary ``rows`` (``Store.list_crashes``) with ``core_status`` and
    ``core_reason`` replaced (:func:`absent_core`) where the row says stored
    but the blob is gone: one existence check per distinct blob of the page."""
    keys = {r["blob_key"] for r in rows if r.get("core_status") == "stored"}
    gone = {k: absent_core(store, k) for k in keys if k and not store.blobs.has(k)}
    return [r | dict(zip(("core_status", "core_reason"), gone[r["blob_key"]], strict=True))
            if r.get("core_status") == "stored" and r.get("blob_key") in gone else r
            for r in rows]


def with_blob_state(store: Store, report: CrashReport) -> CrashReport:
    """``report`` as it can be served: when it says its core is stored but
    the blob is gone, a copy with ``core.stored`` False and
    ``core.dropped_reason`` saying why (pruned, or in another blob store)
    rather than a promise of a core that is not there."""
    core = report.core
    if core.stored and core.blob_key and not store.blobs.has(core.blob_key):
        _, reason = absent_core(store, core.blob_key)
        gone = core.model_copy(update={"stored": False, "dropped_reason": reason})
        return report.model_copy(update={"core": gone})
    return report
