"""ApiError: every refusal of the HTTP API, with the reason it is counted under.

::

    HTTPException (starlette/fastapi)
     └── ApiError            status + message + reason (metrics label)

Handlers raise ``ApiError(status, message, reason)``; the app turns it into
``{"detail": message, "reason": reason}`` and counts it in
``coreepi_requests_rejected_total{reason}``. Reasons are short stable keys:
``unauthorized``, ``forbidden``, ``too-large``, ``invalid-body``,
``invalid-crash-id``, ``conflict``, ``unknown-crash``, ``unsupported-media-type``,
``invalid-core``, ``not-found``, ``overloaded`` (503: too many writes wait,
see :class:`~coreepi.serve.gateway.Backlogged`).
"""

from __future__ import annotations

from fastapi import HTTPException

__all__ = ["ApiError"]


class ApiError(HTTPException):
    """A 4xx (or 503) answer: ``status`` (HTTP), ``message`` (for the client), ``reason``
    (a short stable key, the metrics label)."""

    def __init__(self, status: int, message: str, reason: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, detail=message, headers=headers)
        self.reason = reason
