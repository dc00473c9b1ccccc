"""deploy/: the systemd units pass `systemd-analyze verify`; the DaemonSet
manifest validates against the Kubernetes schema (kubernetes-validate, which
ships the schemas: works offline). `coreepi agent install`/`uninstall` on a
scratch root and scratch /proc/sys: what was there before comes back."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coreepi.capture.install import apply_install, plan_install, uninstall

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COREEPI = Path(sys.executable).parent / "coreepi"


@pytest.mark.parametrize("unit", ["coreepi-agent.service", "coreepi-serve.service",
                                  "coreepi-replica@.service", "coreepi-worker@.service"])
def test_systemd_unit_verifies(tmp_path: Path, unit: str) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # the unit names /opt/coreepi/bin/coreepi; verify checks the file exists
    text = (DEPLOY / "systemd" / unit).read_text().replace("/opt/coreepi/bin/coreepi",
                                                           str(COREEPI))
    # a template is verified as an instance; its EnvironmentFile as a scratch file
    env = tmp_path / "server.env"
    env.write_text("COREEPI_STORE=postgresql://coreepi@127.0.0.1/coreepi\n")
    text = text.replace("/etc/coreepi/server.env", str(env))
    name = unit.replace("@.", "@8080.")
    (tmp_path / name).write_text(text)
    done = subprocess.run([tool, "verify", str(tmp_path / name)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert unit not in done.stderr, done.stderr  # no warnings about our unit


def test_installed_unit_verifies(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    plan = plan_install(tmp_path / "c.toml", Path("/var/spool/coreepi"), root=tmp_path)
    [unit] = [p for p in plan.files if p.suffix == ".service"]
    unit.parent.mkdir(parents=True)
    unit.write_text(plan.files[unit])
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("spool", ["/tmp/node/spool", "/var/tmp/coreepi"])
def test_spool_under_tmp_drops_private_tmp_with_a_note(tmp_path: Path, spool: str) -> None:
    """breaker4 #30: with PrivateTmp the agent would see its own empty /tmp,
    not the spool collect (spawned by the kernel) writes into."""
    plan = plan_install(None, Path(spool), root=tmp_path)
    unit = plan.files[tmp_path / "etc/systemd/system/coreepi-agent.service"]
    assert "PrivateTmp=yes" not in unit
    under = "/var/tmp" if spool.startswith("/var/tmp") else "/tmp"
    assert f"# no PrivateTmp: the spool {spool} is under {under} (docs/capture.md)\n" in unit
    assert f"ReadWritePaths={spool}\n" in unit
    assert [n for n in plan.notes if "PrivateTmp" in n] == [
        f"spool {spool} is under {under}: the unit has no PrivateTmp (the agent must see the "
        f"spool collect writes); reboots and systemd-tmpfiles clean {under}: use a spool under "
        "/var/spool in production"]
    kept = plan_install(None, Path("/var/spool/coreepi"), root=tmp_path)
    assert "PrivateTmp=yes\n" in kept.files[tmp_path / "etc/systemd/system/coreepi-agent.service"]
    assert not [n for n in kept.notes if "PrivateTmp" in n]


def test_daemonset_validates_against_kubernetes_schema() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    manifest = DEPLOY / "kubernetes" / "coreepi-agent.yaml"
    exe = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run([str(exe), "--strict", str(manifest)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "daemonset/coreepi-agent" in done.stdout + done.stderr
    # and the validator does reject a bad field (so the pass above means something)
    import yaml

    docs = list(yaml.safe_load_all(manifest.read_text()))
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["spec"]["template"]["spec"]["hostPID"] is True
    ds["spec"]["template"]["spec"]["containers"][0]["bogus"] = 1
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, "1.37.0", strict=True)


def test_install_then_uninstall_restores(tmp_path: Path) -> None:
    root = tmp_path / "root"
    proc_sys = tmp_path / "proc_sys"
    proc_sys.mkdir()
    (proc_sys / "core_pattern").write_text("|/usr/lib/systemd/systemd-coredump %P %u\n")
    (proc_sys / "core_pipe_limit").write_text("0\n")
    existing = root / "etc/sysctl.d/60-coreepi.conf"
    existing.parent.mkdir(parents=True)
    existing.write_text("# someone's file\n")
    plan = plan_install(Path("/etc/coreepi/capture.toml"), Path("/var/spool/coreepi"),
                        python="/usr/bin/python3", root=root, proc_sys=proc_sys)
    assert plan.core_pattern == ("|/usr/bin/python3 -m coreepi collect --config "
                                 "/etc/coreepi/capture.toml -- %P %i %I %s %t %h %e %u %g %c")
    assert "core_pattern" in plan.describe()
    apply_install(plan)
    assert (proc_sys / "core_pattern").read_text().strip() == plan.core_pattern
    assert (proc_sys / "core_pipe_limit").read_text().strip() == "16"
    assert "kernel.core_pattern = |/usr/bin/python3" in existing.read_text()
    assert "DefaultLimitCORE=infinity" in (
        root / "etc/systemd/system.conf.d/60-coreepi-core.conf").read_text()
    unit = root / "etc/systemd/system/coreepi-agent.service"
    assert "coreepi agent --config /etc/coreepi/capture.toml" in unit.read_text()
    apply_install(plan)  # a second install keeps the first backup (the true original)
    done = uninstall(root=root, proc_sys=proc_sys)
    assert any("restored" in d for d in done)
    assert (proc_sys / "core_pattern").read_text() == "|/usr/lib/systemd/systemd-coredump %P %u\n"
    assert (proc_sys / "core_pipe_limit").read_text() == "0\n"
    assert existing.read_text() == "# someone's file\n"
    assert not unit.exists()
    assert "nothing to restore" in uninstall(root=root, proc_sys=proc_sys)[0]


def test_install_uses_wrapper_when_pattern_too_long(tmp_path: Path) -> None:
    long_python = "/opt/" + "x" * 100 + "/bin/python3"
    plan = plan_install(Path("/etc/coreepi/capture.toml"), Path("/var/spool/coreepi"),
                        python=long_python, root=tmp_path)
    assert len(plan.core_pattern) <= 127
    assert plan.core_pattern.startswith("|/usr/local/libexec/coreepi-collect -- %P")
    wrapper = tmp_path / "usr/local/libexec/coreepi-collect"
    assert long_python in plan.files[wrapper]


def test_server_manifests_validate_against_kubernetes_schema() -> None:
    """Replicas, their Service and the workers: valid objects, and the
    commands they run are ones this coreepi has."""
    pytest.importorskip("kubernetes_validate")
    import yaml

    manifest = DEPLOY / "kubernetes" / "coreepi-server.yaml"
    exe = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run([str(exe), "--strict", str(manifest)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("deployment/coreepi-serve", "deployment/coreepi-worker", "service/coreepi"):
        assert name in done.stdout + done.stderr
    docs = {d["metadata"]["name"] + "/" + d["kind"]: d
            for d in yaml.safe_load_all(manifest.read_text())}
    for deployment in ("coreepi-serve/Deployment", "coreepi-worker/Deployment"):
        args = docs[deployment]["spec"]["template"]["spec"]["containers"][0]["args"]
        helped = subprocess.run([str(COREEPI), args[0], "--help"], capture_output=True,
                                text=True, timeout=120)
        assert helped.returncode == 0, helped.stderr
        flags = [a for a in args if a.startswith("--")]
        assert all(f in helped.stdout for f in flags), (args, helped.stdout)
    secret = docs["coreepi-server/Secret"]["stringData"]
    assert secret["COREEPI_STORE"].startswith("postgresql://")
    assert secret["COREEPI_BLOBS"].startswith("s3://")
