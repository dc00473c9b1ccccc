"""ingest: one path from artifacts, reports and heartbeats into the store.

Fleet directories (:mod:`~coreepi.ingest.fleet`), pairing of an hs_err log
with its core (:mod:`~coreepi.ingest.pairing`), the build-id index of a
symbol tree (:mod:`~coreepi.ingest.buildid`), one artifact -> CrashReport
(:mod:`~coreepi.ingest.artifacts`), the sandboxed analysis worker
(:mod:`~coreepi.ingest.worker`) and the batch driver (:mod:`~coreepi.ingest.run`).
"""
