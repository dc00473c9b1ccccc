"""The server's queue worker (``AnalysisWorker``, run by ``coreepi worker``) on
the warm path: cores forked from one zygote give the cold path's results; an
analysis child that dies (a real SIGSEGV) costs that job only — the worker
and its zygote go on with the next; a core that hits the memory limit is
retried, not filed unreadable. Real cores, a real embedded store."""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401
from servekit import edge_report, zstd_bytes
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.ingest.artifacts import inspect_file
from coreepi.ingest.intake import CoreIntake, CoreLimits, accept_report
from coreepi.reanalysis.warm import WarmChild, WarmLauncher
from coreepi.serve import ServeConfig
from coreepi.serve.analysis import AnalysisWorker
from coreepi.store import CoreStatus, DuckDBStore

CENTRAL = "analysed centrally by coreepi"


@pytest.fixture
def launcher() -> Iterator[WarmLauncher]:
    warm = WarmLauncher()
    yield warm
    warm.close()


def _queue(store: DuckDBStore, coreset: CoreSet, tmp: Path, n: int) -> list[str]:  # noqa: F811
    """``n`` crashes as a node agent sends them, each with its core uploaded: queued."""
    intake = CoreIntake(store, CoreLimits(None, 1 << 20), tmp)
    ids = []
    for i, core in enumerate(coreset.cores[:n]):
        sent = edge_report(inspect_file(core)[0], minutes=i)
        accept_report(store, sent)
        body = zstd_bytes(core)
        upload = tmp / f"up{i}.zst"
        upload.write_bytes(body)
        result = intake.accept(sent.crash_id, upload, hashlib.sha256(body).hexdigest(), len(body))
        assert result.queued, result
        ids.append(sent.crash_id)
    return ids


def test_warm_worker_results_and_a_crashing_child(tmp_path: Path, coreset: CoreSet,  # noqa: F811
                                                  launcher: WarmLauncher) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    killed: list[int] = []

    def segv_first(argv: list[str], env: dict[str, str]) -> WarmChild:
        """The warm launcher, whose first child dies of a real SIGSEGV as it starts."""
        child = launcher(argv, env)
        if not killed:
            os.kill(child.pid, signal.SIGSEGV)
            killed.append(child.pid)
        return child

    config = ServeConfig(analysis_timeout_seconds=120, analysis_memory_limit_mb=4096)
    with DuckDBStore(tmp_path / "data") as store:
        ids = _queue(store, coreset, tmp, 3)
        worker = AnalysisWorker(store, config, tmp, launcher=segv_first, backoff_seconds=0)
        assert [worker.run_once() for _ in range(4)] == [1, 1, 1, 0]
        zygote = launcher._proc
        assert zygote is not None and zygote.poll() is None  # the same zygote served all three
        reports = {i: store.get_report(i) for i in ids}
        statuses = dict(store._query("SELECT crash_id, core_status FROM crashes").fetchall())
    first, *rest = ids
    # the first job's child died: that core is filed (worker-crashed), nothing else
    assert statuses[first] == str(CoreStatus.UNREADABLE)
    assert any("worker-crashed" in w and "SIGSEGV" in w
               for w in reports[first].analysis.warnings), reports[first].analysis.warnings
    for crash_id, core in zip(rest, coreset.cores[1:3], strict=True):
        cold = inspect_file(core)[0]
        got = reports[crash_id]
        assert statuses[crash_id] == str(CoreStatus.STORED)
        assert got.signature is not None and cold.signature is not None
        assert got.signature.signature == cold.signature.signature
        assert [p.name for p in got.phenotypes] == [p.name for p in cold.phenotypes]
        assert sum(w.startswith(CENTRAL) for w in got.analysis.warnings) == 1


def test_a_memory_limit_is_retried_not_unreadable(tmp_path: Path, coreset: CoreSet,  # noqa: F811
                                                  launcher: WarmLauncher) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # 64 MiB: below what the forked child already maps, so it cannot map the core
    config = ServeConfig(analysis_timeout_seconds=120, analysis_memory_limit_mb=64)
    with DuckDBStore(tmp_path / "data") as store:
        (crash_id,) = _queue(store, coreset, tmp, 1)
        worker = AnalysisWorker(store, config, tmp, launcher=launcher, backoff_seconds=0)
        assert worker.run_once() == 1
        status = store._query("SELECT core_status FROM crashes").fetchone()[0]
        jobs = store.job_counts()
        report = store.get_report(crash_id)
    assert status == str(CoreStatus.STORED)  # not unreadable: not judged
    assert not any(w.startswith(CENTRAL) for w in report.analysis.warnings)
    assert jobs["queued"] == 1 and jobs["done"] == 0, jobs  # to be taken again


def test_cli_worker_runs_warm_and_says_its_sandbox(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    data = tmp_path / "data"
    with DuckDBStore(data) as store:
        (crash_id,) = _queue(store, coreset, tmp, 1)
    r = CliRunner().invoke(app, ["worker", "--data-dir", str(data), "--tmp-dir", str(tmp),
                                 "--once"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "ran 1 jobs; queued 0, running 0, done 1, dead 0\n"
    assert r.stderr.startswith("coreepi: worker: analysis sandbox: address space 4096 MiB, "
                               "wall 300 s, CPU 301 s, no core file, dies with its parent, ")
    assert r.stderr.rstrip().endswith("; forked from a warm zygote per thread")
    with DuckDBStore(data, read_only=True) as store:
        report = store.get_report(crash_id)
    assert report.signature is not None and report.signature.signature == "main"
