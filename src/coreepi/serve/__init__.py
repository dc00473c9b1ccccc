"""serve: the HTTP ingest and query server (``coreepi serve``).

:func:`create_app` builds the FastAPI app over a store; :func:`run` serves it
with uvicorn. Endpoints (all under ``/api/v1`` except the last three):

=======  ==============================  ======  ==========================================
method   path                            scope   what
=======  ==============================  ======  ==========================================
POST     /crashes                        ingest  a CrashReport; 201 created, 200 duplicate,
                                                 409 same crash_id with other content
PUT      /crashes/{crash_id}/core        ingest  the core as one zstd stream; blob + central
                                                 analysis when the report lacks it
POST     /heartbeats                     ingest  exposure interval + load + host facts
GET      /crashes                        read    summaries; since, until, host_id,
                                                 signature, limit, cursor
GET      /crashes/{crash_id}             read    the full CrashReport
GET      /groups                         read    counts by signature and by phenotype
GET      /hosts                          read    hosts, exposure, crash counts
POST/GET/DELETE /tokens                  admin   token management
GET      /healthz, /metrics, /docs       —       health, Prometheus, OpenAPI
=======  ==============================  ======  ==========================================
"""

from __future__ import annotations

from coreepi.serve.app import create_app
from coreepi.serve.auth import SCOPES, create_token, list_tokens, revoke_token
from coreepi.serve.config import ServeConfig
from coreepi.serve.server import run

__all__ = ["SCOPES", "ServeConfig", "create_app", "create_token", "list_tokens", "revoke_token",
           "run"]
