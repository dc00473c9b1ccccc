"""A small client of ``coreepi serve``'s HTTP API for the CLI (httpx).

Every failure becomes an :class:`coreepi.errors.InputError` naming the URL
and saying what to do (an unreachable server, a missing or refused token, an
unknown crash), so the commands print one line and exit 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

import httpx

from coreepi.errors import InputError

__all__ = ["ApiClient"]

PAGE = 1000
TIMEOUT_SECONDS = 60.0


class ApiClient:
    """``base_url`` (``http://host:port``, with or without ``/api/v1``) and a
    bearer ``token`` (None: send none). Use as a context manager."""

    def __init__(self, base_url: str, token: str | None) -> None:
        root = base_url.rstrip("/")
        root = root.removesuffix("/api/v1")
        if not root.startswith(("http://", "https://")):
            raise InputError(f"--server {base_url}", "not an http:// or https:// URL")
        self.root = root
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=root + "/api/v1", headers=headers,
                                  timeout=TIMEOUT_SECONDS)
        self._has_token = token is not None

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    # -- requests

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise InputError(self.root, f"cannot reach the server: {exc}") from None
        self._check(response, path)
        return response

    def _check(self, response: httpx.Response, path: str) -> None:
        if response.is_success:
            return
        detail = _detail(response)
        where = f"{self.root}/api/v1{path}"
        if response.status_code == 401:
            hint = ("" if self._has_token else
                    "; give a token with $COREEPI_TOKEN or --token-file")
            raise InputError(where, f"401 unauthorized: {detail}{hint}")
        if response.status_code == 403:
            # the server's detail names the missing scope; older servers' did not
            hint = "" if "scope" in detail else " (this token lacks the scope)"
            raise InputError(where, f"403 forbidden: {detail}{hint}")
        raise InputError(where, f"{response.status_code}: {detail}")

    def get_json(self, path: str, **params: Any) -> Any:
        """GET ``/api/v1`` + ``path`` with ``params`` (None values left out) as JSON."""
        query = {k: v for k, v in params.items() if v is not None}
        return self._json(self._request("GET", path, params=query), path)

    def post_json(self, path: str, body: bytes) -> tuple[int, Any]:
        """POST a JSON body; (status code, decoded answer). An answer that is
        not JSON (a proxy's page in front of the server) is an InputError."""
        response = self._request("POST", path, content=body,
                                 headers={"Content-Type": "application/json"})
        return response.status_code, self._json(response, path)

    def _json(self, response: httpx.Response, path: str) -> Any:
        """The decoded body of a successful answer; InputError naming the URL
        and quoting the body's start when it is not JSON."""
        try:
            return response.json()
        except ValueError:
            start = response.text.strip()[:80]
            quoted = f": {start!r}" if start else " (an empty body)"
            raise InputError(f"{self.root}/api/v1{path}",
                             f"{response.status_code}, but the answer is not JSON{quoted}; "
                             "is --server a coreepi serve?") from None

    def delete_json(self, path: str) -> tuple[int, Any]:
        """DELETE ``path``; (status code, decoded answer)."""
        response = self._request("DELETE", path)
        return response.status_code, self._json(response, path)

    def crashes(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every crash summary of ``GET /crashes`` with ``params``, page after page."""
        cursor = None
        while True:
            page = self.get_json("/crashes", limit=PAGE, cursor=cursor, **params)
            yield from page.get("crashes", [])
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def download(self, path: str, out: IO[bytes]) -> int:
        """Stream ``GET path`` into ``out``; bytes written."""
        written = 0
        try:
            with self._http.stream("GET", path) as response:
                if not response.is_success:
                    response.read()
                    self._check(response, path)
                for chunk in response.iter_bytes(1 << 20):
                    out.write(chunk)
                    written += len(chunk)
        except httpx.HTTPError as exc:
            raise InputError(self.root, f"download of {path} failed: {exc}") from None
        return written


def _detail(response: httpx.Response) -> str:
    """The server's message (``{"detail": message, "reason": key}``), else the body's start."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(body, dict) and body.get("detail"):
        return str(body["detail"])
    return str(body)[:200]
