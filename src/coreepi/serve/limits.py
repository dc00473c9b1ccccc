"""Request body size limits.

:class:`BodyLimit` is ASGI middleware for every JSON endpoint: a declared
``Content-Length`` above the limit is answered 413 before a byte is read; a
body without one (chunked) is counted as it arrives and cut off at the limit
(the handler's body read raises :class:`~coreepi.serve.errors.ApiError` 413).
Core uploads are exempt: their handler streams to disk under its own, larger
limit with :func:`check_declared_length` and a running count.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coreepi.serve.errors import ApiError

__all__ = ["BodyLimit", "check_declared_length"]


def check_declared_length(headers: dict[str, str] | object, limit: int, what: str) -> int | None:
    """The request's Content-Length (None when absent); ApiError 413 above ``limit``."""
    raw = headers.get("content-length") if hasattr(headers, "get") else None
    if raw is None:
        return None
    try:
        length = int(raw)
    except ValueError:
        raise ApiError(400, "bad Content-Length header", "invalid-body") from None
    if length > limit:
        raise ApiError(413, f"{what} of {length} bytes is over the limit of {limit} bytes",
                       "too-large")
    return length


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes, except where ``exempt(scope)``.
    ``on_reject(reason)`` is called for each refusal answered here (metrics)."""

    def __init__(self, app: ASGIApp, limit: int, exempt: Callable[[Scope], bool],
                 on_reject: Callable[[str], None]) -> None:
        self.app = app
        self.limit = limit
        self.exempt = exempt
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exempt(scope):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            check_declared_length(headers, self.limit, "a request body")
        except ApiError as exc:
            self.on_reject(exc.reason)
            body = json.dumps({"detail": exc.detail, "reason": exc.reason}).encode()
            await send({"type": "http.response.start", "status": exc.status_code,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()),
                                    (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        seen = 0
        limit = self.limit

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ApiError(413, f"a request body over the limit of {limit} bytes",
                                   "too-large")
            return message

        await self.app(scope, counted, send)
