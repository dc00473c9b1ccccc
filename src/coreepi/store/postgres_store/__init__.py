"""The server store: PostgreSQL (psycopg 3 and its connection pool).

One part per interface of :mod:`coreepi.store.interfaces`, each a
:class:`~coreepi.store.postgres_store.gateway.PostgresGateway`;
:class:`PostgresStore` is all of them on one pool. Its own migrations are
the numbered files of ``sql/``.
"""

from coreepi.store.postgres_store.gateway import is_postgres_url, redact
from coreepi.store.postgres_store.store import PostgresStore

__all__ = ["PostgresStore", "is_postgres_url", "redact"]
