"""A webhook receiver on 127.0.0.1 for the alert delivery tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookReceiver:
    """A webhook receiver: answers each POST with the next status of ``script``
    (then 200) and records the JSON body."""

    def __init__(self, script: list[int] | None = None) -> None:
        self.bodies: list[Any] = []
        self.paths: list[str] = []
        self.script = list(script or [])
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append(json.loads(body))
                outer.paths.append(self.path)
                self.send_response(outer.script.pop(0) if outer.script else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
