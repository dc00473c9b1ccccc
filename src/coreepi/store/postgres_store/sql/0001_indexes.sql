-- Indexes the server's queries use (DuckDB scans with zone maps instead;
-- see coreepi/store/migrations.py).
-- list_crashes: keyset pagination in ingestion order
CREATE INDEX crashes_ingested ON crashes (ingested_at, crash_id);
-- crash_frame / count_crashes windows; crash_records of one host
CREATE INDEX crashes_captured ON crashes (captured_at);
CREATE INDEX crashes_host_captured ON crashes (host_id, captured_at);
CREATE INDEX crashes_signature ON crashes (signature);
-- telemetry_frame windows
CREATE INDEX telemetry_ts ON telemetry (ts);
-- ledger_has_sha256; rejections replaced per file and per category
CREATE INDEX ingest_ledger_sha256 ON ingest_ledger (sha256);
CREATE INDEX ingest_rejections_file ON ingest_rejections (file);
CREATE INDEX ingest_rejections_category ON ingest_rejections (category);
