"""Host facts: what the epidemiology needs to know about the node.

The costly part (cpuinfo, DMI, hypervisor detection, ``nvidia-smi``) cannot
change without a reboot, so it is cached in the spool's ``state/`` per boot id
(``hostfacts-<boot_id>.json``). EDAC error counters and labels are read on
every call.

Sources: ``/etc/machine-id``; ``/proc/sys/kernel/random/boot_id``; uname;
``/proc/cpuinfo`` (vendor, model name, family/model/stepping, microcode, the
``hypervisor`` flag); ``/sys/class/dmi/id`` (bios_vendor, bios_version,
bios_date, board_name, product_name, sys_vendor); ``systemd-detect-virt --vm``
when installed; ``nvidia-smi`` when installed; EDAC
``/sys/devices/system/edac/mc/mc*/{ce,ue}_count``; cloud and Kubernetes labels
from the ``[host]`` config table, the ``COREEPI_CLOUD_INSTANCE_TYPE``,
``COREEPI_CLOUD_ZONE``, ``COREEPI_K8S_NODE`` and ``COREEPI_K8S_LABELS``
(``k=v,k=v``) environment variables, and ``state/labels.json``, which the
agent writes from its own environment (the kernel starts ``collect`` with an
empty one, so a DaemonSet's downward-API variables reach it only that way).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from coreepi.capture.config import CaptureConfig
from coreepi.capture.spool import Spool, atomic_write
from coreepi.model.report import HostFacts

__all__ = ["HostIdentity", "host_facts", "host_ids", "read_boot_id", "static_facts", "write_agent_labels"]

_DMI = ("bios_vendor", "bios_version", "bios_date", "board_name", "board_vendor",
        "product_name", "sys_vendor")  # fmt: skip
_VM_VENDORS = {
    "qemu": "qemu", "kvm": "kvm", "vmware": "vmware", "innotek gmbh": "oracle",
    "virtualbox": "oracle", "xen": "xen", "amazon ec2": "amazon", "google": "google",
    "microsoft corporation": "microsoft", "bochs": "bochs", "parallels": "parallels",
}  # fmt: skip


class HostIdentity:
    """host_id (machine-id unless configured), boot_id and the facts."""

    def __init__(self, host_id: str | None, boot_id: str | None, facts: HostFacts) -> None:
        self.host_id = host_id
        self.boot_id = boot_id
        self.facts = facts


def _text(path: Path, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def read_boot_id(root: Path = Path("/")) -> str | None:
    text = _text(root / "proc/sys/kernel/random/boot_id")
    return text.replace("-", "") if text else None


def _cpuinfo(root: Path) -> dict[str, str]:
    """The first processor's ``key: value`` block of /proc/cpuinfo."""
    out: dict[str, str] = {}
    for line in (_text(root / "proc/cpuinfo", 4 << 20) or "").splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def _os_name(root: Path) -> str | None:
    for line in (_text(root / "etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.partition("=")[2].strip().strip('"')
    return None


def _hypervisor(cpu: dict[str, str], dmi: dict[str, str], root: Path) -> str:
    tool = shutil.which("systemd-detect-virt")
    if tool and root == Path("/"):
        try:
            done = subprocess.run([tool, "--vm"], capture_output=True, text=True, timeout=5)
            name = done.stdout.strip()
            if name:
                return name
        except (OSError, subprocess.SubprocessError):
            pass
    text = f"{dmi.get('sys_vendor', '')} {dmi.get('product_name', '')}".lower()
    for needle, name in _VM_VENDORS.items():
        if needle in text:
            return name
    xen = _text(root / "sys/hypervisor/type")
    if xen:
        return xen
    return "unknown" if "hypervisor" in cpu.get("flags", "").split() else "none"


def _gpus() -> list[dict[str, str]]:
    tool = shutil.which("nvidia-smi")
    if not tool:
        return []
    keys = ["name", "driver_version", "vbios_version", "serial", "uuid", "pci.bus_id"]
    try:
        done = subprocess.run(
            [tool, f"--query-gpu={','.join(keys)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=15,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in done.stdout.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(keys):
            gpus.append({k.replace("pci.", ""): v for k, v in zip(keys, values, strict=True)})
    return gpus


def _int(text: str | None) -> int | None:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def static_facts(root: Path = Path("/")) -> dict[str, Any]:
    """Facts that only change across a reboot, as a JSON-able dict of HostFacts fields."""
    cpu = _cpuinfo(root)
    dmi = {k: v for k in _DMI if (v := _text(root / "sys/class/dmi/id" / k))}
    uname = platform.uname()
    extra = {
        "machine_id": _text(root / "etc/machine-id") or "",
        "arch": uname.machine,
        "kernel_version": uname.version,
        "cpu_vendor": cpu.get("vendor_id") or cpu.get("CPU implementer", ""),
        "cpu_count": str(os.cpu_count() or ""),
        "bios_date": dmi.get("bios_date", ""),
        "product_name": dmi.get("product_name", ""),
        "sys_vendor": dmi.get("sys_vendor", ""),
        "board_vendor": dmi.get("board_vendor", ""),
    }
    if "CPU part" in cpu:
        extra["cpu_part"] = cpu["CPU part"]
    return {
        "kernel": uname.release,
        "os": _os_name(root),
        "cpu_model": cpu.get("model name"),
        "cpu_family": _int(cpu.get("cpu family")),
        "cpu_model_number": _int(cpu.get("model")),
        "cpu_stepping": _int(cpu.get("stepping")),
        "microcode": cpu.get("microcode"),
        "bios_vendor": dmi.get("bios_vendor"),
        "bios_version": dmi.get("bios_version"),
        "board": dmi.get("board_name"),
        "hypervisor": _hypervisor(cpu, dmi, root),
        "gpus": _gpus() if root == Path("/") else [],
        "extra": {k: v for k, v in extra.items() if v},
    }


def _edac(root: Path) -> tuple[int | None, int | None]:
    base = root / "sys/devices/system/edac/mc"
    try:
        controllers = sorted(base.glob("mc*"))
    except OSError:
        return None, None
    if not controllers:
        return None, None
    ce = sum(_int(_text(mc / "ce_count")) or 0 for mc in controllers)
    ue = sum(_int(_text(mc / "ue_count")) or 0 for mc in controllers)
    return ce, ue


def _env_labels(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in (("COREEPI_CLOUD_INSTANCE_TYPE", "cloud_instance_type"),
                       ("COREEPI_CLOUD_ZONE", "cloud_zone"), ("COREEPI_K8S_NODE", "k8s_node")):
        if env.get(key):
            out[field] = env[key]
    labels = {}
    for item in env.get("COREEPI_K8S_LABELS", "").split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip():
            labels[key.strip()] = value.strip()
    if labels:
        out["k8s_labels"] = labels
    return out


def write_agent_labels(spool: Spool, env: dict[str, str] | None = None) -> None:
    """Record the agent's environment-given labels for ``collect`` to read."""
    labels = _env_labels(dict(os.environ) if env is None else env)
    atomic_write(spool.state / "labels.json", json.dumps(labels, sort_keys=True).encode())


def _labels(config: CaptureConfig, spool: Spool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        saved = json.loads((spool.state / "labels.json").read_text(encoding="utf-8"))
        if isinstance(saved, dict):
            out.update(saved)
    except (OSError, ValueError):
        pass
    out.update(_env_labels(dict(os.environ)))
    host = config.host
    for field in ("cloud_instance_type", "cloud_zone", "k8s_node"):
        if getattr(host, field):
            out[field] = getattr(host, field)
    if host.labels:
        out["k8s_labels"] = {**out.get("k8s_labels", {}), **host.labels}
    return out


def host_facts(config: CaptureConfig, spool: Spool, root: Path = Path("/")) -> HostIdentity:
    """Host facts for a crash or a heartbeat (static part cached per boot)."""
    boot_id = read_boot_id(root)
    cache = spool.state / f"hostfacts-{boot_id or 'unknown'}.json"
    static: dict[str, Any] | None = None
    try:
        static = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    if not isinstance(static, dict):
        static = static_facts(root)
        try:
            for old in spool.state.glob("hostfacts-*.json"):
                old.unlink(missing_ok=True)
            atomic_write(cache, json.dumps(static, sort_keys=True).encode())
        except OSError:
            pass
    ce, ue = _edac(root)
    facts = HostFacts.model_validate({
        **static, **_labels(config, spool),
        "hostname": platform.node() or None, "edac_ce_count": ce, "edac_ue_count": ue,
    })
    host_id = config.host_id or facts.extra.get("machine_id") or facts.hostname
    return HostIdentity(host_id, boot_id, facts)


def host_ids(config: CaptureConfig, root: Path = Path("/")) -> tuple[str | None, str | None]:
    """(host_id, boot_id) cheaply, without the facts: machine-id, else hostname."""
    host_id = config.host_id or _text(root / "etc/machine-id") or platform.node() or None
    return host_id, read_boot_id(root)
