"""ingest: one path from artifacts, reports and heartbeats into the store.

Entry points: :func:`coreepi.ingest.run.ingest` (``coreepi ingest``: fleet
directories, crash files, host logs) and :mod:`coreepi.ingest.intake` (the
HTTP API, through which node agents send). Both analyse artifacts in the one
sandbox runner, :mod:`coreepi.ingest.sandbox` (which runs
:mod:`coreepi.ingest.worker`), as does the node's edge analysis.

Parts: fleet directory reader (:mod:`~coreepi.ingest.fleet`: the directory,
crash files and sidecars), its tables read (:mod:`~coreepi.ingest.fleet_tables`)
and loaded (:mod:`~coreepi.ingest.tables`), a host's log read once
(:mod:`~coreepi.ingest.hostlog`), crash files into crash rows
(:mod:`~coreepi.ingest.crashes`), pairing of an hs_err log with its core
(:mod:`~coreepi.ingest.pairing`), the build-id index of a symbol tree
(:mod:`~coreepi.ingest.buildid`), one artifact -> CrashReport
(:mod:`~coreepi.ingest.artifacts`), what an ingest did
(:mod:`~coreepi.ingest.summary`).
"""
