"""``coreepi agent``: ship the spool to ``coreepi serve`` and send heartbeats.

Delivery of one entry (``queue/<crash_id>/``), each step retried until the
server answers 2xx; all progress is on disk, so a restarted agent resumes
where the last one stopped:

1. ``POST /api/v1/crashes`` with report.json. 201 (created) or 200 (already
   there: a retry after a lost answer) → write ``.reported``.
2. if the entry has core.zst: ``PUT /api/v1/crashes/<crash_id>/core``, a
   streamed zstd body (``Content-Type: application/zstd``). 2xx → done;
   404 (server lost the report) → remove ``.reported`` and start again.
3. done → delete the entry (or move it to ``shipped/``).

The server is idempotent by crash_id, so a step repeated after a crash of the
agent (the server stored it, the agent never heard) is harmless: each crash is
counted once. 409 (same crash_id, other content) and other 4xx answers move
the entry to ``quarantine/`` with the server's message. 401/403 is "token
refused", not an outage: said on stderr, in agent.log and in ``agent
status`` (``<spool>/token-refused``), and not retried until ``token_file``
holds another token (a missing or empty token_file stops the agent at start,
a config error). 408, 429, 5xx and network errors are retried with
exponential backoff and full jitter (``backoff_initial_seconds`` doubling up
to ``backoff_max_seconds``). A ``Retry-After`` on the refusal (429, 503: an
overloaded server shedding load) is honoured instead: the agent waits that
long (seconds or an HTTP date, at most :data:`RETRY_AFTER_CAP_SECONDS`) plus
up to 20 % jitter, so a fleet told to come back in 30 s does not return in
one burst. The spool
keeps its quota meanwhile (collect drops what does not fit, counted).
Entries still under edge analysis wait (up to the analysis budget + 120 s).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from coreepi import __version__
from coreepi.capture.config import CaptureConfig
from coreepi.capture.heartbeat import acknowledge, build_heartbeat
from coreepi.capture.hostfacts import write_agent_labels
from coreepi.capture.spool import Entry, Spool
from coreepi.errors import InputError

__all__ = ["Agent", "AgentStats", "ServerUnavailable", "TokenRefused", "retry_after_seconds",
           "spool_status"]

RETRYABLE = {408, 425, 429}
REFUSED = {401, 403}
TOKEN_REFUSED_FILE = "token-refused"  # in the spool root: the last refusal, for `agent status`
RETRY_AFTER_CAP_SECONDS = 3600.0
RETRY_AFTER_JITTER = 0.2
CHUNK = 1 << 20
PENDING_GRACE_SECONDS = 120.0
CLEAN_TMP_EVERY_SECONDS = 600.0


class ServerUnavailable(Exception):
    """The server could not take the request now; try again later
    (``retry_after``: seconds the server asked to wait, or None)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TokenRefused(ServerUnavailable):
    """The server refused the agent's token (HTTP 401/403): retrying with the
    same token cannot help."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header (RFC 9110 §10.2.3: delay-seconds or an
    HTTP-date) as seconds from ``now`` (epoch seconds; default the clock),
    at least 0; None when absent or malformed."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class AgentStats:
    delivered: int = 0
    quarantined: int = 0
    heartbeats: int = 0
    failures: int = 0
    errors: list[str] = field(default_factory=list)


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


class Agent:
    """The node daemon. ``transport`` is for tests (httpx's MockTransport)."""

    def __init__(self, config: CaptureConfig, *, transport: httpx.BaseTransport | None = None,
                 token: str | None = None) -> None:
        if not config.server_url:
            raise ValueError("no server_url in the capture config")
        self.config = config
        self.spool = Spool(config.spool_dir)
        self.stats = AgentStats()
        self.stop = threading.Event()
        self.started = time.time()
        self._failures = 0
        self._next_try = 0.0
        self._next_heartbeat = self.started + config.agent.heartbeat_seconds
        self._next_clean = 0.0
        self.token = token if token is not None else config.token()
        self.refused = False  # the server refused self.token: wait for token_file to change
        self._refusal_on_disk = (self.spool.root / TOKEN_REFUSED_FILE).exists()
        headers = {"User-Agent": f"coreepi-agent/{__version__}"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        verify: str | bool = config.agent.ca_file or True
        self.client = httpx.Client(
            base_url=config.server_url.rstrip("/"), headers=headers, verify=verify,
            timeout=config.agent.request_timeout_seconds, transport=transport,
        )

    # -- one request -------------------------------------------------------

    def _request(self, method: str, url: str, **kwargs: object) -> httpx.Response:
        try:
            response = self.client.request(method, url, **kwargs)  # type: ignore[arg-type]
        except httpx.HTTPError as exc:
            raise ServerUnavailable(f"{method} {url}: {type(exc).__name__}: {exc}") from None
        if response.status_code in REFUSED:
            raise TokenRefused(f"{method} {url}: HTTP {response.status_code} "
                               f"{response.text[:200]}")
        if self._refusal_on_disk:  # the token works again
            (self.spool.root / TOKEN_REFUSED_FILE).unlink(missing_ok=True)
            self._refusal_on_disk = False
        if response.status_code >= 500 or response.status_code in RETRYABLE:
            raise ServerUnavailable(f"{method} {url}: HTTP {response.status_code} "
                                    f"{response.text[:200]}",
                                    retry_after_seconds(response.headers.get("retry-after")))
        return response

    # -- one entry ---------------------------------------------------------

    def ship(self, entry: Entry) -> str:
        """Deliver one entry: "delivered", "quarantined" or "waiting" (edge
        analysis pending). Raises ServerUnavailable to retry later."""
        age = entry.pending_age()
        grace = self.config.collect.edge_analysis_seconds + PENDING_GRACE_SECONDS
        if age is not None and age < grace:
            return "waiting"
        crash_id = entry.crash_id
        for _attempt in range(2):  # a second round after a 404 on the core
            if not entry.reported:
                body = entry.report_path.read_bytes()
                r = self._request("POST", "/api/v1/crashes", content=body,
                                  headers={"Content-Type": "application/json"})
                if r.status_code not in (200, 201):
                    return self._refused(entry, f"POST report: HTTP {r.status_code} {r.text[:500]}")
                entry.mark_reported()
            core = entry.core_path
            if core is None:
                break
            r = self._request(
                "PUT", f"/api/v1/crashes/{crash_id}/core", content=_file_chunks(core),
                headers={"Content-Type": "application/zstd",
                         "Content-Length": str(core.stat().st_size)})
            if r.status_code == 404:
                entry.mark_reported(False)
                continue
            if not 200 <= r.status_code < 300:
                return self._refused(entry, f"PUT core: HTTP {r.status_code} {r.text[:500]}")
            break
        else:
            raise ServerUnavailable(f"{crash_id}: server keeps forgetting the report (404)")
        self.spool.finish(entry, keep=self.config.spool.keep_shipped)
        self.stats.delivered += 1
        self.spool.log(f"delivered {crash_id}", name="agent.log")
        return "delivered"

    def _refused(self, entry: Entry, why: str) -> str:
        self.spool.quarantine(entry, why)
        self.stats.quarantined += 1
        self.spool.log(f"quarantined {entry.crash_id}: {why}", name="agent.log")
        return "quarantined"

    # -- rounds ------------------------------------------------------------

    def ship_all(self) -> bool:
        """Try every ready entry once, oldest first. False if the server was
        unavailable (the rest waits for the backoff)."""
        for path in self.spool.unshippable():
            what = "a directory without report.json" if path.is_dir() else "not a directory"
            self._refused(Entry(path), f"unshippable: {what} in the queue")
        for entry in self.spool.entries():
            if self.stop.is_set():
                return True
            try:
                self.ship(entry)
            except FileNotFoundError:
                continue  # removed under us (a second agent?)
            except ServerUnavailable as exc:
                self._setback(exc)
                return False
        return True

    def heartbeat(self) -> bool:
        beat = build_heartbeat(self.config, self.spool, self.started)
        try:
            r = self._request("POST", "/api/v1/heartbeats", json=beat.body)
        except ServerUnavailable as exc:
            self._setback(exc)
            return False
        if not 200 <= r.status_code < 300:  # a 4xx will not get better by retrying
            self.spool.log(f"heartbeat refused: HTTP {r.status_code} {r.text[:300]}",
                           name="agent.log")
            return True
        acknowledge(self.spool, beat)
        self.stats.heartbeats += 1
        return True

    def _setback(self, exc: ServerUnavailable) -> None:
        if isinstance(exc, TokenRefused):
            self._token_refused(str(exc))
        else:
            self._failed(str(exc), exc.retry_after)

    def _token_refused(self, why: str) -> None:
        """Stop trying with this token: say why on stderr (the journal under
        systemd) once, in agent.log and in the spool for ``agent status``."""
        self.stats.failures += 1
        message = f"token refused (token_file {self.config.token_file}): {why}"
        self.stats.errors = [*self.stats.errors[-19:], message]
        if self.refused:
            return
        self.refused = True
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (self.spool.root / TOKEN_REFUSED_FILE).write_text(f"{stamp} {message}\n")
        self._refusal_on_disk = True
        self.spool.log(f"{message}; not retried until token_file changes", name="agent.log")
        sys.stderr.write(f"coreepi agent: {message}; not retried until token_file changes\n")

    def _token_replaced(self) -> bool:
        """After a refusal: True (and the new token in use) once token_file
        holds another token; False while it holds the refused one."""
        try:
            token = self.config.token()
        except InputError:
            return False
        if token == self.token:
            return False
        self.token, self.refused = token, False
        if token:
            self.client.headers["Authorization"] = f"Bearer {token}"
        else:
            self.client.headers.pop("Authorization", None)
        return True

    def _failed(self, why: str, retry_after: float | None = None) -> None:
        """Back off: the server's Retry-After plus jitter, else exponential
        backoff with full jitter."""
        self._failures += 1
        self.stats.failures += 1
        self.stats.errors = [*self.stats.errors[-19:], why]
        if retry_after is not None:
            wait = min(retry_after, RETRY_AFTER_CAP_SECONDS)
            ceiling = wait * (1 + RETRY_AFTER_JITTER)
            delay = random.uniform(wait, ceiling)
        else:
            ceiling = min(self.config.agent.backoff_max_seconds, self.config.agent
                          .backoff_initial_seconds * 2 ** min(self._failures - 1, 30))
            delay = random.uniform(0, ceiling)  # full jitter
        self._next_try = time.monotonic() + delay
        self.spool.log(f"server unavailable (retry in <= {ceiling:.0f} s): {why}",
                       name="agent.log")

    def run_once(self) -> AgentStats:
        """Ship what is ready and send one heartbeat (for cron and tests)."""
        write_agent_labels(self.spool)
        self.spool.clean_tmp()
        if self.ship_all():
            self._failures = 0
        self.heartbeat()
        return self.stats

    def run(self) -> AgentStats:
        """Until :attr:`stop` is set (SIGTERM, SIGINT)."""
        write_agent_labels(self.spool)
        self.spool.log(f"agent started (pid {os.getpid()}) -> {self.config.server_url}",
                       name="agent.log")
        while not self.stop.is_set():
            now = time.monotonic()
            if self.refused and not self._token_replaced():
                self.stop.wait(self.config.agent.poll_seconds)
                continue
            if now >= self._next_try:
                if time.time() >= self._next_clean:
                    self.spool.clean_tmp()
                    self._next_clean = time.time() + CLEAN_TMP_EVERY_SECONDS
                ok = self.ship_all()
                if ok and time.time() >= self._next_heartbeat:
                    ok = self.heartbeat()
                    if ok:
                        self._next_heartbeat = time.time() + self.config.agent.heartbeat_seconds
                if ok:
                    self._failures = 0
            backoff = self._next_try - time.monotonic()
            self.stop.wait(max(backoff if backoff > 0 else self.config.agent.poll_seconds, 0.05))
        self.client.close()
        return self.stats



def spool_status(config: CaptureConfig) -> dict[str, object]:
    """Counts of the spool (for ``coreepi agent status``). Reads only: a
    spool that does not exist yet counts as empty (``exists``: false)."""
    spool = Spool(config.spool_dir, create=False)
    entries = spool.entries()
    grace = config.collect.edge_analysis_seconds + PENDING_GRACE_SECONDS
    ages = [e.pending_age() for e in entries]
    quarantine = spool.root / "quarantine"
    return {"spool_dir": str(spool.root), "exists": spool.queue.is_dir(),
            "queued": len(entries),
            "pending_analysis": sum(a is not None for a in ages),
            # held by the quota but not shipped by the agent's next round as they are:
            # the agent quarantines these (unshippable) or ships them as-is (stale analysis)
            "stuck": [p.name for p in spool.unshippable()]
            + [e.crash_id for e, a in zip(entries, ages, strict=True) if a is not None and a >= grace],
            "reported_awaiting_core": sum(e.reported for e in entries),
            "spool_bytes": spool.usage_bytes(), "quota_bytes": config.spool.max_bytes,
            "quarantined": sum(not p.name.endswith(".REFUSED") for p in quarantine.iterdir())
            if quarantine.is_dir() else 0,
            "token_refused": _token_refusal(spool.root)}


def _token_refusal(root: Path) -> str | None:
    """The agent's last token refusal ("<UTC time> token refused ..."), None
    when the token was accepted since (or never refused)."""
    try:
        return (root / TOKEN_REFUSED_FILE).read_text(errors="replace").strip() or None
    except OSError:
        return None
