"""End to end: `coreepi ingest` of a small fleet of real cores (gcc + gdb gcore),
then `coreepi report --format json` in a subprocess; the findings count every
crash and name the crasher's signature group."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleetfactory import CoreSet, coreset  # noqa: F401

from coreepi.epi import FleetFindings


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COREEPI_DEBUG="1")
    return subprocess.run([sys.executable, "-m", "coreepi", *args], capture_output=True,
                          text=True, timeout=600, env=env, check=False)


def test_ingest_then_report_json(tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    fleet = tmp_path / "fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id,cpu_model,kernel\nh1,EPYC,6.1\nh2,Xeon,6.1\n"
                                     "h3,Xeon,6.5\n")
    (fleet / "exposure.csv").write_text(
        "host_id,start,end\n"
        + "".join(f"h{i},2024-01-01T00:00:00Z,2024-01-11T00:00:00Z\n" for i in (1, 2, 3))
    )
    for n, core in enumerate(coreset.cores[:6]):
        shutil.copy(core, crashes / f"core.{n}")
        (crashes / f"core.{n}.json").write_text(json.dumps(
            {"host_id": f"h{1 + n % 3}", "captured_at": f"2024-01-0{2 + n}T10:00:00Z"}))
    data = tmp_path / "data"
    ing = run("ingest", str(fleet), "--data-dir", str(data), "--symbol-dir",
              str(coreset.binary.parent))
    assert ing.returncode == 0, ing.stderr
    rep = run("report", "--data-dir", str(data), "--format", "json")
    assert rep.returncode == 0, rep.stderr
    f = FleetFindings.model_validate_json(rep.stdout)
    assert f.window.crashes == 6 and f.window.crashes_outside_exposure == 0
    assert f.window.node_days == 30 and f.window.hosts == 3
    sig_groups = [g for g in f.groups if g.kind == "signature"]
    assert sum(g.crashes for g in sig_groups) + f.window.crashes_without_signature == 6
    assert any("main" in g.key for g in sig_groups), [g.key for g in sig_groups]
    assert any(g.kind == "phenotype" and g.key == "null-deref" for g in f.groups)
    assert {a.name for a in f.attributes} == {"cpu_model", "kernel"}
    html = run("report", "--data-dir", str(data), "--format", "html")
    assert html.returncode == 0 and "<svg" in html.stdout
