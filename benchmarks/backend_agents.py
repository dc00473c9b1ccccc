"""Simulated agents of ``bench_backend.py``: what each sent, what it was told.

An :class:`Agent` keeps every item the servers did not accept (refused with
503/429, a 5xx, a broken connection) and sends it again, after Retry-After
when one was given (plus jitter), to the next replica, as the real agent
(:mod:`coreepi.capture.agent`) does; what was accepted is remembered by key,
so the fault run can check the store against it.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

__all__ = ["Agent", "Fleet", "make_cores"]

KINDS = ("heartbeat", "crash", "core")
Item = tuple[str, str, object]  # (kind, key, body)


def make_cores(directory: Path, n: int) -> list[bytes]:
    """``n`` distinct real cores (a tiny C crasher under gdb's gcore), zstd-compressed."""
    import zstandard
    from fleetfactory import build_crasher, make_core

    binary = build_crasher(directory / "bin")
    cctx = zstandard.ZstdCompressor(level=3)
    return [cctx.compress(make_core(binary, k, directory / f"core.{k}").read_bytes())
            for k in range(1, n + 1)]


def _report(crash_id: str, host: str, at: datetime) -> dict[str, object]:
    """What an agent posts before any analysis: identity, signal, attributes."""
    return {"crash_id": crash_id, "host_id": host, "captured_at": at.isoformat(),
            "source": "elf-core", "analysis": {"analyzer_version": "bench"},
            "signal": {"number": 11, "name": "SIGSEGV"},
            "attributes": {"app_version": "1.0"}}


class Agent:
    """One simulated node (see the module docstring). ``accepted[kind]``: keys
    the servers answered 2xx for (crash and core: crash_id; heartbeat:
    ``host@start``); ``sent[kind]``: every key sent at least once."""

    def __init__(self, i: int, token: str, cores: list[bytes], args: argparse.Namespace) -> None:
        self.i = i
        self.host = f"node-{i:05d}"
        self.cores = cores
        self.args = args
        self.client = httpx.Client(timeout=120, headers={"authorization": f"Bearer {token}"})
        self.fleet: Fleet | None = None
        self.replica = i
        self.t = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=i % 7)
        self.seq = 0
        self.crashes = 0
        self.pending: list[Item] = []
        self.wait_until = 0.0
        self.rng = random.Random(i)
        self.lat: dict[str, list[float]] = {k: [] for k in KINDS}
        self.shed = dict.fromkeys(KINDS, 0)
        self.failed = dict.fromkeys(KINDS, 0)
        self.rejected: list[str] = []  # 4xx other than 429: a bug of the bench or the server
        self.accepted: dict[str, set[str]] = {k: set() for k in KINDS}
        self.sent: dict[str, set[str]] = {k: set() for k in KINDS}

    def run(self, keep_going: Callable[[], bool]) -> None:
        while keep_going():
            self.step()
            if self.args.pause > 0:
                time.sleep(self.args.pause * (0.5 + self.rng.random()))

    def step(self, new: bool = True) -> bool:
        """Send one item (a kept one first); False when there was nothing to send."""
        now = time.monotonic()
        if now < self.wait_until:
            time.sleep(min(self.wait_until - now, 0.25))
            return True
        if self.pending:
            item = self.pending.pop(0)
        elif new:
            item = self._new_item()
        else:
            return False
        self._send(item)
        return True

    def _new_item(self) -> Item:
        self.seq += 1
        if self.rng.random() < self.args.crash_share:
            self.crashes += 1
            crash_id = f"{self.i:08x}{self.seq:08x}{self.rng.getrandbits(64):016x}"
            return "crash", crash_id, _report(crash_id, self.host, self.t)
        start, self.t = self.t, self.t + timedelta(seconds=60)
        body = {"host_id": self.host, "start": start.isoformat(), "end": self.t.isoformat(),
                "load": {"cpu": 0.5}}
        return "heartbeat", f"{self.host}@{start.isoformat()}", body

    def _url(self) -> str:
        assert self.fleet is not None
        return self.fleet.url(self.replica)

    def _send(self, item: Item) -> None:
        kind, key, body = item
        self.sent[kind].add(key)
        started = time.perf_counter()
        try:
            if kind == "core":
                r = self.client.put(f"{self._url()}/api/v1/crashes/{key}/core", content=body,
                                    headers={"content-type": "application/zstd"})
            else:
                path = "crashes" if kind == "crash" else "heartbeats"
                r = self.client.post(f"{self._url()}/api/v1/{path}", json=body)
        except httpx.TransportError:
            self.failed[kind] += 1
            self._keep(item, 0.5)
            return
        if r.status_code in (200, 201):
            self.lat[kind].append(time.perf_counter() - started)
            self.accepted[kind].add(key)
            if kind == "crash" and self.crashes % self.args.core_every == 0:
                self.pending.append(("core", key, self.cores[self.crashes % len(self.cores)]))
        elif r.status_code in (429, 503):
            self.shed[kind] += 1
            self._keep(item, float(r.headers.get("retry-after", "1")))
        elif r.status_code >= 500:
            self.failed[kind] += 1
            self._keep(item, 0.5)
        else:
            self.rejected.append(f"{kind} {key}: {r.status_code} {r.text[:200]}")

    def _keep(self, item: Item, delay: float) -> None:
        """Send ``item`` again first, after ``delay`` s plus jitter, to the next replica."""
        self.pending.insert(0, item)
        self.wait_until = time.monotonic() + delay * (1 + 0.5 * self.rng.random())
        self.replica += 1


class Fleet:
    """The agents and the replicas' URLs they share (changed when a replica dies)."""

    def __init__(self, agents: list[Agent], urls: list[str]) -> None:
        self.agents = agents
        self._urls = list(urls)
        self._lock = threading.Lock()
        for a in agents:
            a.fleet = self

    def url(self, k: int) -> str:
        with self._lock:
            return self._urls[k % len(self._urls)]

    def set_urls(self, urls: list[str]) -> None:
        with self._lock:
            self._urls = list(urls)

    def drain(self, seconds: float) -> int:
        """Send every kept item until accepted, for at most ``seconds``; returns
        how many are still unsent."""
        deadline = time.monotonic() + seconds

        def finish(agent: Agent) -> None:
            while time.monotonic() < deadline and agent.step(new=False):
                pass

        with ThreadPoolExecutor(max_workers=len(self.agents)) as pool:
            list(pool.map(finish, self.agents))
        return sum(len(a.pending) for a in self.agents)

    def close(self) -> None:
        for a in self.agents:
            a.client.close()
