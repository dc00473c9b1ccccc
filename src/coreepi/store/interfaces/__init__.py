"""The store's interfaces, one per concern; :class:`coreepi.store.Store` composes them."""

from coreepi.store.interfaces.alerts import AlertStore
from coreepi.store.interfaces.blobs import BlobStore
from coreepi.store.interfaces.crashes import CRASH_SUMMARY_COLUMNS, CrashStore
from coreepi.store.interfaces.hosts import HostStore
from coreepi.store.interfaces.ledger import REJECTION_COLUMNS, LedgerStore
from coreepi.store.interfaces.queue import Job, JobQueue, JobState
from coreepi.store.interfaces.regroup import RegroupStore
from coreepi.store.interfaces.session import Transactional
from coreepi.store.interfaces.telemetry import TelemetryStore
from coreepi.store.interfaces.tokens import TokenStore

__all__ = [
    "CRASH_SUMMARY_COLUMNS",
    "REJECTION_COLUMNS",
    "AlertStore",
    "BlobStore",
    "CrashStore",
    "HostStore",
    "Job",
    "JobQueue",
    "JobState",
    "LedgerStore",
    "RegroupStore",
    "TelemetryStore",
    "TokenStore",
    "Transactional",
]
