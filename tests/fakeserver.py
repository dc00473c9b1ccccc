"""A small fake of ``coreepi serve``'s ingest API on 127.0.0.1, for the agent
tests: idempotent by crash_id (201 created, 200 same content again, 409 other
content), PUT core needs the report first (404), bearer token required,
everything it saw recorded."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "test-ingest-token"


class FakeServer:
    def __init__(self, port: int = 0, *, put_delay_per_mib: float = 0.0) -> None:
        self.reports: dict[str, bytes] = {}
        self.cores: dict[str, bytes] = {}
        self.created: Counter[str] = Counter()
        self.posts: Counter[str] = Counter()
        self.puts_started: Counter[str] = Counter()
        self.heartbeats: list[dict[str, Any]] = []
        self.refuse: dict[str, int] = {}  # crash_id -> status to answer the POST with
        # (status, Retry-After) to answer every request with: an overloaded server
        self.shedding: tuple[int, str] | None = None
        self.put_delay_per_mib = put_delay_per_mib
        self.lock = threading.Lock()
        self.put_started = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, status: int, body: dict[str, Any] | None = None,
                       retry_after: str | None = None) -> None:
                data = json.dumps(body or {}).encode()
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self, delay_per_mib: float = 0.0) -> bytes:
                length = int(self.headers.get("Content-Length", "0"))
                parts, left = [], length
                while left:
                    chunk = self.rfile.read(min(left, 1 << 20))
                    if not chunk:
                        raise ConnectionError("client went away")
                    parts.append(chunk)
                    left -= len(chunk)
                    if delay_per_mib:
                        time.sleep(delay_per_mib)
                return b"".join(parts)

            def _authorized(self) -> bool:
                if server.shedding is not None:
                    self._body()
                    self._reply(server.shedding[0], {"detail": "overloaded"}, server.shedding[1])
                    return False
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._body()
                    self._reply(401, {"detail": "bad token"})
                    return False
                return True

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                body = self._body()
                if self.path == "/api/v1/heartbeats":
                    with server.lock:
                        server.heartbeats.append(json.loads(body))
                    self._reply(201, {})
                    return
                if self.path != "/api/v1/crashes":
                    self._reply(404, {"detail": "no such path"})
                    return
                crash_id = json.loads(body)["crash_id"]
                with server.lock:
                    server.posts[crash_id] += 1
                    if crash_id in server.refuse:
                        self._reply(server.refuse[crash_id], {"detail": "refused by test"})
                        return
                    known = server.reports.get(crash_id)
                    if known is None:
                        server.reports[crash_id] = body
                        server.created[crash_id] += 1
                        status = 201
                    else:
                        status = 200 if known == body else 409
                self._reply(status, {"crash_id": crash_id})

            def do_PUT(self) -> None:
                if not self._authorized():
                    return
                parts = self.path.strip("/").split("/")
                if len(parts) != 5 or parts[:3] != ["api", "v1", "crashes"] or parts[4] != "core":
                    self._body()
                    self._reply(404, {"detail": "no such path"})
                    return
                crash_id = parts[3]
                with server.lock:
                    server.puts_started[crash_id] += 1
                    known = crash_id in server.reports
                server.put_started.set()
                if not known:
                    self._body()
                    self._reply(404, {"detail": "report first"})
                    return
                assert self.headers.get("Content-Type") == "application/zstd"
                data = self._body(server.put_delay_per_mib)
                with server.lock:
                    server.cores[crash_id] = data
                self._reply(201, {"stored": len(data)})

        return Handler
