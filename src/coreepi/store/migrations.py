"""The store's schema, as an ordered list of migrations.

Each :class:`Migration` moves the schema from ``version - 1`` to ``version``;
the store applies the pending ones in order, each in its own transaction, and
records it in ``schema_version``. Never edit a released migration: add one.

The SQL is kept portable between DuckDB and PostgreSQL (the second store):
``VARCHAR``, ``TEXT``, ``BIGINT``, ``INTEGER``, ``BOOLEAN``, ``DOUBLE
PRECISION``, ``TIMESTAMPTZ``, ``VARCHAR[]``; JSON is kept as ``TEXT`` (both
engines can parse it; neither's JSON type is the other's). No secondary
indexes: DuckDB scans with zone maps and its ART indexes slow bulk inserts;
the PostgreSQL store will add its own in its own migrations.

Column names avoid reserved words (``start_ts``/``end_ts``, not
``start``/``end``); the DataFrames the store returns use the short names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MIGRATIONS", "SCHEMA_VERSION_TABLE", "Migration", "latest_version", "schema_tables"]


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


SCHEMA_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    description VARCHAR NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL
)
"""

_V1 = (
    # one row per host of hosts.csv; attributes: JSON object of static attributes
    """
    CREATE TABLE hosts (
        host_id    VARCHAR PRIMARY KEY,
        attributes TEXT NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    )
    """,
    # observed node-time: [start_ts, end_ts), never overlapping for one host;
    # attributes: JSON object overriding the host's for this interval
    """
    CREATE TABLE exposure (
        host_id    VARCHAR NOT NULL,
        start_ts   TIMESTAMPTZ NOT NULL,
        end_ts     TIMESTAMPTZ NOT NULL,
        attributes TEXT NOT NULL,
        source     VARCHAR,
        PRIMARY KEY (host_id, start_ts)
    )
    """,
    # one row per crash, counted even when its core is missing or unreadable
    # (core_status: stored | not-stored | missing | unreadable, core_reason: why);
    # attributes: JSON object of the sidecar's attributes; report: the CrashReport JSON
    """
    CREATE TABLE crashes (
        crash_id            VARCHAR PRIMARY KEY,
        host_id             VARCHAR,
        captured_at         TIMESTAMPTZ,
        source              VARCHAR NOT NULL,
        signature           VARCHAR,
        phenotypes          VARCHAR[] NOT NULL,
        hardware_phenotypes VARCHAR[] NOT NULL,
        signal              VARCHAR,
        signal_number       INTEGER,
        si_code_name        VARCHAR,
        exe                 VARCHAR,
        app_version         VARCHAR,
        attributes          TEXT NOT NULL,
        core_status         VARCHAR NOT NULL,
        core_reason         VARCHAR,
        core_sha256         VARCHAR,
        blob_key            VARCHAR,
        artifact            VARCHAR,
        report              TEXT NOT NULL,
        ingested_at         TIMESTAMPTZ NOT NULL
    )
    """,
    # TelemetryEvent rows; detail: JSON object
    """
    CREATE TABLE telemetry (
        event_id            VARCHAR PRIMARY KEY,
        host_id             VARCHAR,
        ts                  TIMESTAMPTZ,
        uptime_seconds      DOUBLE PRECISION,
        kind                VARCHAR NOT NULL,
        severity            VARCHAR,
        component           VARCHAR,
        hardware_indicative BOOLEAN NOT NULL,
        summary             VARCHAR NOT NULL,
        detail              TEXT NOT NULL,
        source              VARCHAR,
        raw                 TEXT
    )
    """,
    # every input row that was rejected (action 'rejected') or kept with a
    # problem (action 'kept'); replaced per file when the file is read again
    """
    CREATE TABLE ingest_rejections (
        file        VARCHAR NOT NULL,
        line        INTEGER,
        category    VARCHAR NOT NULL,
        reason      VARCHAR NOT NULL,
        action      VARCHAR NOT NULL,
        recorded_at TIMESTAMPTZ NOT NULL
    )
    """,
    # files already ingested: skipped when (path, size, mtime_ns) or sha256 match
    """
    CREATE TABLE ingest_ledger (
        path        VARCHAR PRIMARY KEY,
        size        BIGINT NOT NULL,
        mtime_ns    BIGINT NOT NULL,
        sha256      VARCHAR NOT NULL,
        kind        VARCHAR NOT NULL,
        outcome     VARCHAR NOT NULL,
        ingested_at TIMESTAMPTZ NOT NULL
    )
    """,
)

_V2 = (
    # bearer tokens of the HTTP API (coreepi serve): only the SHA-256 of a
    # token is kept; scopes: JSON array of ingest | read | admin
    """
    CREATE TABLE api_tokens (
        token_id     VARCHAR PRIMARY KEY,
        name         VARCHAR NOT NULL,
        scopes       TEXT NOT NULL,
        token_sha256 VARCHAR NOT NULL UNIQUE,
        created_at   TIMESTAMPTZ NOT NULL,
        revoked_at   TIMESTAMPTZ
    )
    """,
    # crash reports received over the API: content_sha256 is the SHA-256 of
    # the report as received (canonical JSON), so a retried POST is told from
    # a different report reusing a crash_id even after central analysis has
    # rewritten the stored report; core_key: blob key of the core uploaded
    """
    CREATE TABLE crash_receipts (
        crash_id       VARCHAR PRIMARY KEY,
        content_sha256 VARCHAR NOT NULL,
        core_key       VARCHAR,
        received_at    TIMESTAMPTZ NOT NULL
    )
    """,
)

_V3 = (
    # the analysis queue (coreepi.store.interfaces.queue): one job per crash
    # whose core awaits central analysis; job_id = 'core:' + crash_id
    """
    CREATE TABLE analysis_jobs (
        job_id       VARCHAR PRIMARY KEY,
        crash_id     VARCHAR NOT NULL,
        blob_key     VARCHAR NOT NULL,
        state        VARCHAR NOT NULL
                     CHECK (state IN ('queued', 'running', 'done', 'dead')),
        attempts     INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        run_after    TIMESTAMPTZ NOT NULL,
        worker       VARCHAR,
        heartbeat_at TIMESTAMPTZ,
        last_error   VARCHAR,
        created_at   TIMESTAMPTZ NOT NULL,
        finished_at  TIMESTAMPTZ
    )
    """,
)

_V4 = (
    # one row per alert dedup key (kind + subject labels); labels, evidence: JSON objects
    """
    CREATE TABLE alerts (
        alert_key  VARCHAR PRIMARY KEY,
        kind       VARCHAR NOT NULL,
        labels     TEXT NOT NULL,
        summary    TEXT NOT NULL,
        evidence   TEXT NOT NULL,
        state      VARCHAR NOT NULL CHECK (state IN ('firing', 'resolved')),
        starts_at  TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        ends_at    TIMESTAMPTZ
    )
    """,
    # matchers: JSON object of label = value
    """
    CREATE TABLE alert_silences (
        silence_id VARCHAR PRIMARY KEY,
        matchers   TEXT NOT NULL,
        starts_at  TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        created_by VARCHAR NOT NULL,
        comment    TEXT NOT NULL
    )
    """,
    # the delivery log: one row per attempt
    """
    CREATE TABLE alert_deliveries (
        alert_key VARCHAR NOT NULL,
        receiver  VARCHAR NOT NULL,
        state     VARCHAR NOT NULL,
        attempt   INTEGER NOT NULL,
        attempted_at TIMESTAMPTZ NOT NULL,
        status    INTEGER NOT NULL,
        ok        BOOLEAN NOT NULL,
        error     TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE drained_hosts (
        host_id    VARCHAR PRIMARY KEY,
        drained_at TIMESTAMPTZ NOT NULL,
        drained_by VARCHAR NOT NULL,
        reason     TEXT NOT NULL,
        extra      TEXT NOT NULL
    )
    """,
)

_V5 = (
    # what each `coreepi reanalyze` did to the groups: one row per (run, old
    # signature, new signature) pair with the crashes that went from one to
    # the other ('' for no signature: a key column holds no NULL); change:
    # split, merge, split+merge (both), rename or same (coreepi.reanalysis.regroup)
    """
    CREATE TABLE regroup_history (
        run_id           VARCHAR NOT NULL,
        old_signature    VARCHAR NOT NULL,
        new_signature    VARCHAR NOT NULL,
        crashes          BIGINT NOT NULL,
        change           VARCHAR NOT NULL
                         CHECK (change IN ('split', 'merge', 'split+merge', 'rename', 'same')),
        analyzer_version VARCHAR NOT NULL,
        rules_version    VARCHAR NOT NULL,
        recorded_at      TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (run_id, old_signature, new_signature)
    )
    """,
)

_V6 = (
    # the drains that ended: a host put back in service (`coreepi host undrain`)
    # leaves drained_hosts for this table, so its node-time counts again from
    # the undrain while the drained span stays cut (coreepi.epi.surveillance.clip_drained)
    """
    CREATE TABLE drain_history (
        host_id      VARCHAR NOT NULL,
        drained_at   TIMESTAMPTZ NOT NULL,
        drained_by   VARCHAR NOT NULL,
        reason       TEXT NOT NULL,
        extra        TEXT NOT NULL,
        undrained_at TIMESTAMPTZ NOT NULL,
        undrained_by VARCHAR NOT NULL,
        PRIMARY KEY (host_id, drained_at)
    )
    """,
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "hosts, exposure, crashes, telemetry, ingest_rejections, ingest_ledger", _V1),
    Migration(2, "api_tokens, crash_receipts (coreepi serve)", _V2),
    Migration(3, "analysis_jobs (the analysis queue)", _V3),
    Migration(4, "alerts, alert_silences, alert_deliveries, drained_hosts (surveillance)", _V4),
    Migration(5, "regroup_history (coreepi reanalyze)", _V5),
    Migration(6, "drain_history (undrained hosts)", _V6),
)


def latest_version() -> int:
    return MIGRATIONS[-1].version


def schema_tables() -> tuple[str, ...]:
    """Every table the migrations create, in creation order (``schema_version``
    aside): derived from the SQL so a new table is never forgotten by whoever
    walks them all (``coreepi store copy``)."""
    return tuple(match.group(1) for migration in MIGRATIONS for stmt in migration.statements
                 if (match := re.match(r"\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+)", stmt)))
