"""The CLI's HTTP client against a real HTTP server on 127.0.0.1 that is not
a coreepi serve: a 2xx answer whose body is not JSON (a proxy's or another
service's page) is one line naming the URL, exit 2 — before, ``post_json``
raised and ``coreepi submit`` ended in "internal error" (exit 1)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from coreepi.model.report import AnalysisInfo, CrashReport, Source


class _HtmlPage(BaseHTTPRequestHandler):
    """Answers every POST with 200 and an HTML page."""

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"<html><body>Welcome to nginx!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def html_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_submit_to_a_server_answering_html_is_one_line(html_server: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(CrashReport(
        crash_id="ab" * 8, host_id="h1", source=Source.ELF_CORE,
        captured_at=datetime(2024, 5, 1, tzinfo=UTC),
        analysis=AnalysisInfo(analyzer_version="test")).model_dump_json())
    done = subprocess.run([sys.executable, "-m", "coreepi", "submit", str(report), "--server",
                           html_server], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COREEPI_TOKEN": "cep_x"})
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        f"coreepi: error: {html_server}/api/v1/crashes: 200, but the answer is not JSON: "
        "'<html><body>Welcome to nginx!</body></html>'; is --server a coreepi serve?\n")
