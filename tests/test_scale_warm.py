"""The warm sandbox (coreepi.reanalysis.warm): analyses forked from a
pre-imported zygote through ingest's own Sandbox runner give the same
reports as cold children, keep the sandbox's limits (address space, wall
time: the child is killed by pid, the zygote serves the next core), and
leave no process behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401

from coreepi.ingest.sandbox import Sandbox, SandboxLimits
from coreepi.reanalysis.warm import WarmLauncher


@pytest.fixture
def launcher() -> Iterator[WarmLauncher]:
    warm = WarmLauncher()
    yield warm
    warm.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_warm_reports_are_the_cold_ones(coreset: CoreSet, launcher: WarmLauncher) -> None:  # noqa: F811
    limits = SandboxLimits(120, 4096)
    cold, warm = Sandbox(limits), Sandbox(limits, launcher=launcher)
    for core in coreset.cores[:3]:
        a, b = cold.run(core), warm.run(core)
        assert a.ok and b.ok, (a.error, b.error)
        assert [r.model_dump(exclude={"analysis"}) for r in b.reports] == \
            [r.model_dump(exclude={"analysis"}) for r in a.reports]
        assert b.reports[0].signature is not None and b.reports[0].signature.signature == "main"
    zygote = launcher._proc
    assert zygote is not None and _alive(zygote.pid)  # one zygote served every core
    launcher.close()
    assert zygote.poll() is not None


def test_warm_child_keeps_the_limits(coreset: CoreSet, launcher: WarmLauncher,  # noqa: F811
                                     tmp_path: Path) -> None:
    core = coreset.cores[0]
    # the forked child sets RLIMIT_AS itself, below what the zygote already
    # maps: mapping the core fails with ENOMEM, a (retryable) memory limit
    small = Sandbox(SandboxLimits(120, 64), launcher=launcher).run(core)
    assert (small.ok, small.category, small.retryable) == (False, "memory-limit", True)
    assert "cannot map the core" in small.error and "Cannot allocate memory" in small.error
    # the wall-time limit: the child is killed by pid; the zygote lives on
    late = Sandbox(SandboxLimits(0.01, 4096), launcher=launcher).run(core)
    assert (late.ok, late.category) == (False, "worker-timeout")
    again = Sandbox(SandboxLimits(120, 4096), scratch_dir=tmp_path, launcher=launcher).run(core)
    assert again.ok, again.error
    assert list(tmp_path.iterdir()) == []  # the child's scratch folder is gone with it


def test_a_killed_zygote_is_replaced(coreset: CoreSet, launcher: WarmLauncher) -> None:  # noqa: F811
    sandbox = Sandbox(SandboxLimits(120, 4096), launcher=launcher)
    assert sandbox.run(coreset.cores[0]).ok
    first = launcher._proc
    assert first is not None
    first.kill()
    first.wait()
    result = sandbox.run(coreset.cores[1])
    assert result.ok, result.error
    assert launcher._proc is not None and launcher._proc.pid != first.pid
