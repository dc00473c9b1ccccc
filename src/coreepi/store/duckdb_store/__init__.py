"""The embedded store: DuckDB, one data dir (``coreepi.duckdb`` + ``blobs/``).

One part per interface of :mod:`coreepi.store.interfaces`, each a
:class:`~coreepi.store.duckdb_store.gateway.DuckDBGateway` (the single
writer); :class:`DuckDBStore` is all of them on one connection.
"""

from coreepi.store.duckdb_store.gateway import DB_NAME, default_data_dir
from coreepi.store.duckdb_store.store import BLOB_DIR, DuckDBStore

__all__ = ["BLOB_DIR", "DB_NAME", "DuckDBStore", "default_data_dir"]
