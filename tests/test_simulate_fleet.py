"""The small reference scenario end to end: ``simulate`` writes a fleet
directory that ``coreepi.ingest.fleet`` reads with zero rejections, whose
truth.json matches the crash files, whose plan is the seed's, and whose
cores show the phenotypes truth.json expects. The full reference scenario
(about 300 cores, under 2 minutes on 2 idle cores) is marked slow."""

from __future__ import annotations

import json
import platform
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import zstandard
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.ingest.artifacts import inspect_core
from coreepi.ingest.fleet import Fleet, read_sidecar, scan_crashes
from coreepi.ingest.fleet_tables import read_exposure, read_hosts, read_telemetry
from coreepi.model.fleet import Rejections
from coreepi.simulate import build_plan, bundled_scenario, load_scenario, simulate
from coreepi.simulate.simulation import SimulationResult

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 workloads"),
    pytest.mark.skipif(
        shutil.which("gdb") is None or shutil.which("g++") is None, reason="needs gdb, gcc and g++"
    ),
]

SEED = 1


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationResult]:
    root = tmp_path_factory.mktemp("sim")
    result = simulate(
        bundled_scenario("reference-small"),
        root / "fleet",
        seed=SEED,
        jobs=2,
        cache_dir=root / "cache",
    )
    return root / "fleet", result


def read_fleet(root: Path) -> dict[str, Any]:
    """Everything coreepi.ingest.fleet(_tables) reads from ``root``, and its rejections."""
    rej = Rejections()
    fleet = Fleet.open(root)
    assert fleet.hosts and fleet.exposure and fleet.telemetry and fleet.crashes and fleet.symbols
    hosts = {h.host_id: h for h in read_hosts(fleet.hosts, rej)}
    exposure = list(read_exposure(fleet.exposure, rej, hosts))
    events = list(read_telemetry(fleet.telemetry, rej, hosts))
    crashes = list(scan_crashes(fleet.crashes))
    sidecars = {}
    for item in crashes:
        if item.kind != "artifact" or item.sidecar is None:
            rej.add(
                item.path,
                None,
                "no-sidecar" if item.kind == "artifact" else "core-missing",
                "unpaired",
            )
            continue
        sc = read_sidecar(item.sidecar)
        if sc.host_id not in hosts:
            rej.add(item.sidecar, None, "unknown-host", sc.host_id)
        covered = any(
            iv.host_id == sc.host_id and iv.start <= sc.captured_at < iv.end for iv in exposure
        )
        if not covered:
            rej.add(item.sidecar, None, "outside-exposure", sc.host_id, "kept")
        sidecars[item.path.relative_to(root).as_posix()] = sc
    return {
        "hosts": hosts,
        "exposure": exposure,
        "events": events,
        "sidecars": sidecars,
        "rejections": rej,
    }


def test_fleet_reads_with_zero_rejections(small: tuple[Path, SimulationResult]) -> None:
    root, result = small
    fleet = read_fleet(root)
    assert list(fleet["rejections"]) == []
    assert len(fleet["hosts"]) == 40
    assert len(fleet["sidecars"]) == result.crashes_produced
    assert result.crashes_produced == result.crashes_planned  # every planned crash was made
    assert {"app_version"} <= set().union(*(iv.attributes for iv in fleet["exposure"]))
    kinds = Counter(e.kind.value for e in fleet["events"])
    assert kinds["mce"] >= 1


def test_truth_matches_the_crash_files(small: tuple[Path, SimulationResult]) -> None:
    root, _ = small
    truth = json.loads((root / "truth.json").read_text())
    fleet = read_fleet(root)
    assert truth["format"] == "coreepi-truth/1" and truth["seed"] == SEED
    files = {c["file"] for c in truth["crashes"]}
    assert files == set(fleet["sidecars"])  # one to one
    for c in truth["crashes"]:
        sc = fleet["sidecars"][c["file"]]
        assert (root / c["sidecar"]).is_file()
        assert sc.host_id == c["host_id"]
        assert sc.captured_at.strftime("%Y-%m-%dT%H:%M:%SZ") == c["captured_at"]
        assert sc.attributes["app_version"] == c["app_version"]
        head = (root / c["file"]).read_bytes()[:4]
        assert head == b"\x28\xb5\x2f\xfd"  # zstd frame
    by_disease = Counter(c["disease"] for c in truth["crashes"])
    kinds = set()
    for d in truth["diseases"]:
        kinds.add(d["kind"])
        assert len(d["crash_files"]) == d["produced_crashes"] == by_disease.get(d["name"], 0)
        assert set(d["crash_files"]) <= files
        assert d["expected_verdict"] in {
            "hardware-suspect",
            "software",
            "environment-triggered",
            None,
        }
        if d["kind"] == "hardware":
            (bad,) = d["cause"]["host_ids"]
            assert set(d["hosts_with_crashes"]) == {bad}
            assert d["cause"]["faults"] == ["rsp-8"]
            assert fleet["hosts"][bad].attributes["workload"] == "kvstore"
            mce = [e for e in fleet["events"] if e.kind.value == "mce"]
            assert mce and {e.host_id for e in mce} == {bad}
        if d["name"] == "v2-null-deref":
            assert d["cause"]["attributes"] == {"app_version": "2.0.0"}
            assert all(
                fleet["sidecars"][f].attributes["app_version"] == "2.0.0" for f in d["crash_files"]
            )
        if d["name"] == "kernel-ring":
            assert d["kind"] == "environment"
            for f in d["crash_files"]:
                host = fleet["hosts"][fleet["sidecars"][f].host_id]
                assert host.attributes["kernel"] == "6.1.0-13-amd64"
    assert {"hardware", "software", "environment", "noise"} == kinds


def test_truth_is_the_seeds_plan(small: tuple[Path, SimulationResult]) -> None:
    """The plan (hosts, exposure, which crash where and when) is a function
    of the scenario and the seed alone."""
    root, _ = small
    truth = json.loads((root / "truth.json").read_text())
    fp = build_plan(load_scenario(bundled_scenario("reference-small")), SEED)
    planned = [(c.name, c.disease, c.host_id, c.argv) for c in fp.plan.crashes]
    written = [
        (c["name"], c["disease"], c["host_id"], tuple(c["argv"]))
        for c in truth["crashes"] + truth["not_produced"]
    ]
    assert sorted(written) == planned
    assert truth["exposure_intervals"] == len(fp.intervals)
    run = json.loads((root / "run.json").read_text())
    assert [c["name"] for c in run["crashes"]] == [c.name for c in fp.plan.crashes]
    for c in run["crashes"]:
        if c["disease"] == "bad-cpu-rsp":  # where the injected fault landed, and the crash
            applied = c["attempts"][-1]["faults_applied"]
            assert applied and applied[0]["target"] == "rsp"


def _core_report(root: Path, entry: dict[str, Any], tmp: Path) -> Any:
    raw = tmp / (entry["name"] + ".core")
    with open(root / entry["file"], "rb") as src, open(raw, "wb") as dst:
        zstandard.ZstdDecompressor().copy_stream(src, dst)
    symbols = root / "symbols" / f"{entry['workload']}-{entry['app_version']}" / entry["workload"]
    return inspect_core(raw, exe=symbols)


@pytest.mark.parametrize("disease", ["bad-cpu-rsp", "unwind-race", "v2-null-deref", "kernel-ring"])
def test_cores_show_the_expected_phenotype(
    small: tuple[Path, SimulationResult], tmp_path: Path, disease: str
) -> None:
    root, _ = small
    truth = json.loads((root / "truth.json").read_text())
    (d,) = [d for d in truth["diseases"] if d["name"] == disease]
    entry = next(c for c in truth["crashes"] if c["disease"] == disease)
    report = _core_report(root, entry, tmp_path)
    assert d["expected_phenotype"] in {p.name for p in report.phenotypes}
    assert report.signature is not None
    assert report.signature.signature == d["expected_signature"]


def test_cli_simulate_and_errors(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    text = bundled_scenario("reference-small").read_text()
    head, _, _ = text.partition("\n[[disease]]\n")
    scenario.write_text(
        head.replace("hosts = 40", "hosts = 4")
        + """
[[disease]]
name = "v1-assert"
kind = "software"
workload = "kvstore"
bug = "assert"
rate_per_node_day = 0.1
"""
    )
    runner = CliRunner()
    out = tmp_path / "fleet"
    res = runner.invoke(
        app, ["simulate", str(scenario), "--out", str(out), "--seed", "3", "--jobs", "1"]
    )
    assert res.exit_code == 0, res.output
    truth = json.loads((out / "truth.json").read_text())
    assert len(truth["crashes"]) == truth["diseases"][0]["produced_crashes"]
    assert f"{len(truth['crashes'])} of" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('bug = "kernel-ring"', 'bug = "kernel-panic"'))
    res = runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2
    assert "bad.toml: disease[3].bug: 'kernel-panic' is not a bug of kvstore" in res.output
    not_fleet = tmp_path / "notes"
    not_fleet.mkdir()
    (not_fleet / "todo.txt").write_text("keep me")
    res = runner.invoke(app, ["simulate", str(scenario), "--out", str(not_fleet)])
    assert res.exit_code == 2 and "refusing to replace it" in res.output
    assert (not_fleet / "todo.txt").read_text() == "keep me"


@pytest.mark.slow
def test_reference_scenario_full(tmp_path: Path) -> None:
    """The reference scenario: about 300 real cores; every one of them shows
    its disease's expected phenotype. (Wall time depends on the machine:
    run.json records it, with the CPU seconds.)"""
    result = simulate(None, tmp_path / "fleet", seed=1, jobs=2, cache_dir=tmp_path / "cache")
    root = tmp_path / "fleet"
    assert result.crashes_produced >= 250
    fleet = read_fleet(root)
    assert list(fleet["rejections"]) == []
    truth = json.loads((root / "truth.json").read_text())
    expected = {d["name"]: d["expected_phenotype"] for d in truth["diseases"]}
    misses = []
    for entry in truth["crashes"]:
        report = _core_report(root, entry, tmp_path)
        if expected[entry["disease"]] not in {p.name for p in report.phenotypes}:
            misses.append((entry["name"], entry["disease"], [p.name for p in report.phenotypes]))
    assert not misses
