"""serve: the HTTP ingest and query server and the web UI (``coreepi serve``).

:func:`create_app` builds the FastAPI app over a store; :func:`run` serves it
with uvicorn. The web UI's pages (``/``, ``/groups``, ``/hosts``,
``/crashes/…``, ``/search``; each also as ``.json``) are described in
``docs/ui.md``. API endpoints (all under ``/api/v1`` except the last three):

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
GET      /crashes/{crash_id}/core        read    the stored core (zstd), streamed
GET      /findings                       read    the report (FleetFindings JSON), kept
                                                 fresh in the background; ?fresh=true
GET      /groups, /groups/{group_id}     read    groups of the findings; one group
GET      /hosts, /hosts/{host_id}        read    hosts (attributes, SIR, verdict); one host
POST/GET/DELETE /tokens                  admin   token management
GET      /healthz, /readyz               —       liveness; readiness (store, blob store)
GET      /metrics, /docs                 —       Prometheus, OpenAPI (offline)
=======  ==============================  ======  ==========================================
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coreepi.serve.app import create_app
    from coreepi.serve.config import ServeConfig
    from coreepi.serve.server import run
    from coreepi.serve.tokens import SCOPES, create_token, list_tokens, revoke_token

__all__ = ["SCOPES", "ServeConfig", "create_app", "create_token", "list_tokens", "revoke_token",
           "run"]

# Exported lazily: `coreepi token …` imports coreepi.serve.tokens without
# loading FastAPI (~0.6 s), which only the server needs.
_HOME = {"SCOPES": "tokens", "create_token": "tokens", "list_tokens": "tokens",
         "revoke_token": "tokens", "ServeConfig": "config", "create_app": "app", "run": "server"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"coreepi.serve.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
