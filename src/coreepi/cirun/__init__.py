"""coreepi.cirun: ``coreepi ci run`` as a library.

::

    from coreepi.cirun.run import ci_run
    from coreepi.cirun.match import match_run

    run = ci_run(["make", "check"], mode="auto", cores_dir=Path("cores"))
    match_run(run, "https://coreepi.example", token)   # optional: production lookup
    run.failed("any")                                  # gate the job

:mod:`~coreepi.cirun.run` picks a capture mode (:mod:`coreepi.capture.supervise`),
runs the command, analyses each core into a CrashReport;
:mod:`~coreepi.cirun.match` looks each signature up in the fleet through the
server's read API. Renderings are in :mod:`coreepi.reporting.ci` and
:mod:`coreepi.reporting.ci_machine`. The submodules are imported one by one
(no re-exports here): ``ci run`` without ``--server`` never loads httpx.
"""
