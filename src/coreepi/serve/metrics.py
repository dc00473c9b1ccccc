"""Prometheus metrics of the server, in a registry of their own per app
(so two apps in one process, e.g. in tests, count separately).

``coreepi_crashes_ingested_total{source}``: new crash reports stored, by
source kind (elf-core, hs_err, …). ``coreepi_crashes_duplicate_total``:
retried reports (same crash, same content). ``coreepi_requests_rejected_total{reason}``:
4xx answers by reason (see :mod:`coreepi.serve.errors`).
``coreepi_cores_received_total{outcome}`` and ``coreepi_core_bytes_received_total``:
core uploads (outcome: stored, duplicate) and their compressed bytes.
``coreepi_core_analyses_total{outcome}``: central analyses done in this
process (ok, unreadable). ``coreepi_analysis_jobs{state}``: jobs of the
analysis queue by state (queued, running, done, dead), read from the store's
jobs table at each scrape, so it counts the analyses of every worker,
``coreepi worker`` processes included (a table shared by replicas: every
replica reports the same numbers; do not sum them across replicas).
``coreepi_heartbeats_total{outcome}``: heartbeats (created, duplicate).
``coreepi_request_duration_seconds{route}``: latency histogram per route.
Per-group gauges and alerts firing: :mod:`coreepi.serve.groupmetrics`
(registered on this registry by the app).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]


class Metrics:
    """The app's counters; :meth:`render` gives the Prometheus text format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.crashes_ingested = Counter(
            "coreepi_crashes_ingested", "New crash reports stored, by source kind.",
            ["source"], registry=r)
        self.crashes_duplicate = Counter(
            "coreepi_crashes_duplicate", "Crash reports received again with the same content.",
            registry=r)
        self.rejected = Counter(
            "coreepi_requests_rejected", "Requests refused with a 4xx, by reason.",
            ["reason"], registry=r)
        self.cores_received = Counter(
            "coreepi_cores_received", "Core uploads accepted, by outcome.", ["outcome"],
            registry=r)
        self.core_bytes = Counter(
            "coreepi_core_bytes_received", "Bytes of accepted core uploads (compressed).",
            registry=r)
        self.analyses = Counter(
            "coreepi_core_analyses", "Central analyses of uploaded cores, by outcome.",
            ["outcome"], registry=r)
        self.jobs = Gauge(
            "coreepi_analysis_jobs", "Analysis jobs by state, from the store's jobs table "
            "(every worker's; the same on every replica).", ["state"], registry=r)
        self.heartbeats = Counter(
            "coreepi_heartbeats", "Heartbeats accepted, by outcome.", ["outcome"], registry=r)
        self.latency = Histogram(
            "coreepi_request_duration_seconds", "Request latency by route, seconds.",
            ["route"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                     60, 300))

    def render(self, job_counts: Mapping[str, int] | None = None) -> bytes:
        """The text format; ``job_counts`` ({state: jobs}, the store's
        ``job_counts()``) sets ``coreepi_analysis_jobs`` first."""
        for state, n in (job_counts or {}).items():
            self.jobs.labels(state).set(n)
        return generate_latest(self.registry)
