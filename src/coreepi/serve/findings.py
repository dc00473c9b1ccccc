"""FindingsCache: the report (FleetFindings) computed in the background, so
pages and scripts read it without waiting and without blocking ingest.

One daemon thread runs :func:`coreepi.reporting.build_findings` over the
store (DuckDB reads go through their own cursors: MVCC snapshots that never
take the writer's lock) and publishes an immutable :class:`Snapshot`.
Ingest calls :meth:`FindingsCache.notify` after each committed write; the
thread waits until writes have been quiet for ``debounce_seconds`` (at most
``max_delay_seconds`` after the first unseen write) and recomputes, so a
burst of 10,000 uploads costs one refresh, not 10,000.

Generations: every ``notify`` bumps ``wanted``; a refresh that starts at
``wanted = n`` publishes a snapshot that ``covers`` n. :meth:`wait_covering`
lets a caller (``GET /api/v1/findings?fresh=true``) wait until the writes it
saw are in the findings.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from coreepi.epi import FleetFindings, GroupFinding, HostFinding
from coreepi.epi.models import group_id
from coreepi.store import Store

__all__ = ["FindingsCache", "SignatureCount", "Snapshot", "TelemetryPoint", "group_id"]


@dataclass(frozen=True, slots=True)
class SignatureCount:
    """One signature of the window, analysed as a group or not: its crashes,
    distinct hosts and first / last crash (UTC; None when no crash has a time)."""

    signature: str
    crashes: int
    hosts: int
    first_seen: datetime | None
    last_seen: datetime | None


@dataclass(frozen=True, slots=True)
class TelemetryPoint:
    """One telemetry event of a host (``ts`` UTC)."""

    ts: datetime
    kind: str
    summary: str
    hardware: bool


@dataclass(frozen=True)
class Snapshot:
    """What one refresh computed. ``findings`` is None before the first
    refresh finished or when it failed (``error`` says why)."""

    findings: FleetFindings | None
    covers: int = 0
    computed_at: datetime | None = None
    seconds: float = 0.0
    error: str | None = None
    findings_json: bytes = b"null"
    groups: dict[str, GroupFinding] = field(default_factory=dict)
    hosts: dict[str, HostFinding] = field(default_factory=dict)
    phenotypes_by_signature: dict[str, dict[str, int]] = field(default_factory=dict)
    host_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    telemetry: dict[str, list[TelemetryPoint]] = field(default_factory=dict)
    fleet_curve: list[dict[str, Any]] = field(default_factory=list)
    signature_hosts: pd.DataFrame | None = None
    """Distinct (``signature``, ``host_id``) pairs of the window's crashes with
    their ``crashes``: what the per-group metrics need to count the hosts of the
    groups outside the top N, and what counts a group's crashes on some hosts."""
    signatures: dict[str, SignatureCount] = field(default_factory=dict)
    """Every signature of the window by its group id (``group_id("signature", s)``),
    the ``max_groups`` analysed ones and the others: what gives every crash's
    signature a page and makes it findable."""

    def gid(self, group: GroupFinding) -> str:
        return group_id(group.kind, group.key)


def _phenotypes_by_signature(crashes: pd.DataFrame) -> dict[str, dict[str, int]]:
    """{signature: {phenotype: crashes}} — what makes phenotypes filters of
    signature groups (the findings count each kind of group on its own)."""
    if crashes.empty:
        return {}
    pairs = crashes[["signature", "phenotypes"]].explode("phenotypes").dropna()
    counts = pairs.groupby(["signature", "phenotypes"], observed=True).size()
    out: dict[str, dict[str, int]] = {}
    for (sig, phen), n in counts.items():
        out.setdefault(str(sig), {})[str(phen)] = int(n)
    return out


def _fleet_curve(crashes: pd.DataFrame) -> list[dict[str, Any]]:
    """All crashes per UTC day, ``[{"day": "YYYY-MM-DD", "crashes": n}]``
    (days without a crash left out, as in a group's epidemic curve)."""
    if crashes.empty:
        return []
    days = crashes["captured_at"].dropna().dt.strftime("%Y-%m-%d").value_counts().sort_index()
    return [{"day": str(d), "crashes": int(n)} for d, n in days.items()]


def _signatures(crashes: pd.DataFrame) -> dict[str, SignatureCount]:
    """{group id: SignatureCount} for every signature of ``crashes``."""
    if crashes.empty:
        return {}
    by = crashes.dropna(subset=["signature"]).groupby("signature", observed=True)
    agg = by.agg(crashes=("host_id", "size"), hosts=("host_id", "nunique"),
                 first=("captured_at", "min"), last=("captured_at", "max"))
    return {group_id("signature", str(sig)): SignatureCount(
        str(sig), int(r.crashes), int(r.hosts),
        None if pd.isna(r.first) else r.first.to_pydatetime(),
        None if pd.isna(r.last) else r.last.to_pydatetime())
        for sig, r in zip(agg.index, agg.itertuples(index=False), strict=True)}


def _clean(value: Any) -> Any:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value


def compute(store: Store, covers: int) -> Snapshot:
    """One refresh (blocking): the findings, and the few per-group and
    per-host facts the pages need that the findings do not carry. When the
    findings cannot be computed, the snapshot still has the host facts,
    telemetry and fleet curve (over all time), and ``error`` says why."""
    from coreepi.reporting import build_findings

    started = time.perf_counter()
    findings: FleetFindings | None = None
    error = None
    try:
        findings = build_findings(store)
    except Exception as exc:  # noqa: BLE001 - shown on every page; the server stays up
        error = f"the findings could not be computed: {type(exc).__name__}: {exc}"
    since, until = (findings.window.since, findings.window.until) if findings else (None, None)
    crashes = store.crash_frame(since, until)
    tel = store.telemetry_frame(since, until)
    telemetry: dict[str, list[TelemetryPoint]] = {}
    for r in tel.itertuples(index=False):
        telemetry.setdefault(str(r.host_id), []).append(TelemetryPoint(
            r.ts.to_pydatetime(), str(r.kind), str(r.summary or ""), bool(r.hardware_indicative)))
    facts = {str(r.pop("host_id")): {k: _clean(v) for k, v in r.items() if _clean(v) is not None}
             for r in store.hosts_frame().to_dict("records")}
    return Snapshot(
        findings=findings, covers=covers, computed_at=datetime.now(UTC),
        seconds=time.perf_counter() - started, error=error,
        findings_json=findings.model_dump_json().encode() if findings else b"null",
        groups={group_id(g.kind, g.key): g for g in findings.groups} if findings else {},
        hosts={h.host_id: h for h in findings.hosts} if findings else {},
        phenotypes_by_signature=_phenotypes_by_signature(crashes),
        host_facts=facts, telemetry=telemetry, fleet_curve=_fleet_curve(crashes),
        signature_hosts=crashes.dropna(subset=["signature", "host_id"])
        .groupby(["signature", "host_id"], observed=True).size().rename("crashes")
        .reset_index(),
        signatures=_signatures(crashes),
    )


class FindingsCache:
    """The latest :class:`Snapshot` of ``store``, refreshed by one daemon
    thread after writes (debounced). The thread starts with the first read
    (:meth:`current`), so a server nobody reads from computes nothing;
    ``close()`` at shutdown."""

    def __init__(self, store: Store, debounce_seconds: float = 2.0,
                 max_delay_seconds: float = 30.0) -> None:
        self.store = store
        self.debounce_seconds = debounce_seconds
        self.max_delay_seconds = max_delay_seconds
        self.snapshot = Snapshot(findings=None)
        self.refreshes = 0
        self._wanted = 1  # the store's data as found at start is not covered yet
        self._last_notify = 0.0
        self._first_unseen: float | None = time.monotonic()
        self._running = 0  # the generation the refresh under way covers (0: none)
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the refresh thread (idempotent)."""
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run, name="coreepi-findings",
                                            daemon=True)
            self._thread.start()

    def current(self, wait_first: float = 0.0) -> Snapshot:
        """The latest snapshot; before the first refresh finished, wait up to
        ``wait_first`` seconds for it (blocking: call from a worker thread)."""
        self.start()
        if self.snapshot.computed_at is None and wait_first > 0:
            return self.wait_covering(1, wait_first)
        return self.snapshot

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)

    @property
    def wanted(self) -> int:
        return self._wanted

    def notify(self) -> None:
        """New data was committed: refresh once writes have been quiet."""
        with self._cond:
            self._wanted += 1
            self._last_notify = time.monotonic()
            if self._first_unseen is None:
                self._first_unseen = self._last_notify
            self._cond.notify_all()

    def refresh_now(self) -> Snapshot:
        """Recompute at once in the calling thread (tests, benchmarks)."""
        with self._cond:
            covers = self._wanted
        return self._publish(covers)

    def wait_covering(self, generation: int, timeout: float) -> Snapshot:
        """The snapshot once it covers ``generation`` (or the latest after
        ``timeout`` seconds). Blocking: call from a worker thread."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.snapshot.covers < generation and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if self._running < generation:
                    # no refresh under way covers it: ask for one, without the quiet
                    # period (asking while one that covers it runs would start a
                    # second, needless, refresh as soon as the first ends)
                    self._first_unseen = self._first_unseen or time.monotonic()
                    self._last_notify = 0.0
                    self._cond.notify_all()
                self._cond.wait(left)
            return self.snapshot

    def _due_in(self) -> float | None:
        """Seconds until the next refresh is due (0: now), None: nothing to do."""
        if self._first_unseen is None:
            return None
        now = time.monotonic()
        quiet = self._last_notify + self.debounce_seconds - now
        cap = self._first_unseen + self.max_delay_seconds - now
        return max(0.0, min(quiet, cap))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (due := self._due_in()) != 0.0:
                    self._cond.wait(due)
                if self._closed:
                    return
                covers = self._running = self._wanted
                self._first_unseen = None
            self._publish(covers)

    def _publish(self, covers: int) -> Snapshot:
        """Compute and publish a snapshot covering ``covers``; clears
        ``_running`` in the same critical section, so a waiter never sees a
        refresh that ended as one still under way."""
        try:
            snap = compute(self.store, covers)
        except Exception as exc:  # noqa: BLE001 - shown on every page, the server stays up
            # a store read failed: keep the last snapshot, with the error beside it
            snap = replace(self.snapshot, covers=covers, computed_at=datetime.now(UTC),
                           error=f"{type(exc).__name__}: {exc}")
        with self._cond:
            if snap.covers >= self.snapshot.covers:
                self.snapshot = snap
            if self._running <= covers:
                self._running = 0
            self.refreshes += 1
            self._cond.notify_all()
        return snap
