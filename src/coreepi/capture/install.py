"""``coreepi agent install`` / ``uninstall``: make ``collect`` the kernel's core handler.

What ``install`` changes (``--apply`` performs it, as root; without it the
plan is only shown):

* ``/proc/sys/kernel/core_pattern`` ← ``|<python> -m coreepi collect
  [--config F] -- %P %i %I %s %t %h %e %u %g %c`` (``--``: a comm such as
  ``-bash`` or ``--help`` must not be taken for an option) (through a small wrapper script
  if that is longer than the kernel's 127 bytes);
* ``/proc/sys/kernel/core_pipe_limit`` ← 16: the kernel keeps
  /proc/<pid> of a crashed process until ``collect`` exits, and runs at most
  16 handlers at once (a crash storm beyond that is not piped: the kernel
  logs it);
* ``/etc/sysctl.d/60-coreepi.conf``: the same two settings at boot (after
  systemd's ``50-coredump.conf``, so ours wins);
* ``/etc/systemd/system.conf.d/60-coreepi-core.conf``: ``DefaultLimitCORE=infinity``
  (RLIMIT_CORE of services). The kernel pipes a core whatever the limit
  (only the limit 1 is refused, against recursion), so this matters for
  ``respect_rlimit_core`` and for what ``%c`` reports; it applies to services
  started after ``systemctl daemon-reexec``;
* ``/etc/systemd/system/coreepi-agent.service``: the agent's unit.

Everything it replaces is saved first in ``/var/lib/coreepi/install-backup.json``
(only by the first install: re-installing keeps the true original), and
``uninstall`` puts it back: the old core_pattern and core_pipe_limit, the old
content of each file (or no file).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from coreepi.capture.collect import SPECIFIERS

__all__ = ["CORE_PIPE_LIMIT", "InstallPlan", "apply_install", "plan_install", "uninstall"]

CORE_PIPE_LIMIT = 16
CORENAME_MAX = 127  # CORENAME_MAX_SIZE (128) less the NUL
SHARED_TMP = (Path("/tmp"), Path("/var/tmp"))
"""What systemd's ``PrivateTmp=yes`` replaces by a service's own empty copy."""

AGENT_UNIT = """\
[Unit]
Description=coreepi agent: ship crash reports and exposure heartbeats
Documentation=man:core(5)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart={exec_start}
Restart=always
RestartSec=5
Nice=10
IOSchedulingClass=idle
MemoryMax=256M
NoNewPrivileges=yes
ProtectSystem=full
ProtectHome=read-only
{private_tmp}
ReadWritePaths={spool_dir}

[Install]
WantedBy=multi-user.target
"""


@dataclass
class InstallPlan:
    core_pattern: str
    core_pipe_limit: int
    files: dict[Path, str]  # path -> content to write
    proc_sys: Path
    backup: Path
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        lines = [f"{self.proc_sys / 'core_pattern'} <- {self.core_pattern}",
                 f"{self.proc_sys / 'core_pipe_limit'} <- {self.core_pipe_limit}"]
        for path, text in self.files.items():
            lines.append(f"write {path}:")
            lines.extend(f"    {line}" for line in text.rstrip("\n").splitlines())
        lines.append(f"previous state saved in {self.backup}; `coreepi agent uninstall` restores it")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines) + "\n"


def plan_install(
    config_path: Path | None,
    spool_dir: Path,
    *,
    python: str = sys.executable,
    root: Path = Path("/"),
    proc_sys: Path = Path("/proc/sys/kernel"),
) -> InstallPlan:
    """What ``install`` would do. ``root``: prefix for /etc and /var (tests)."""
    config_args = ["--config", str(config_path)] if config_path else []
    pattern = "|" + " ".join([python, "-m", "coreepi", "collect", *config_args, "--",
                              *SPECIFIERS])
    files: dict[Path, str] = {}
    notes = []
    if len(pattern.encode()) > CORENAME_MAX:
        wrapper = root / "usr/local/libexec/coreepi-collect"
        files[wrapper] = ("#!/bin/sh\n# coreepi's core_pattern handler (see docs/capture.md)\n"
                          f"exec {shlex.join([python, '-m', 'coreepi', 'collect', *config_args])}"
                          ' "$@"\n')
        pattern = "|" + " ".join(["/usr/local/libexec/coreepi-collect", "--", *SPECIFIERS])
        notes.append("the full command is longer than core_pattern's 127 bytes: via a wrapper")
    files[root / "etc/sysctl.d/60-coreepi.conf"] = (
        "# coreepi: collect is the kernel's core dump handler (coreepi agent install)\n"
        f"kernel.core_pattern = {pattern}\nkernel.core_pipe_limit = {CORE_PIPE_LIMIT}\n")
    files[root / "etc/systemd/system.conf.d/60-coreepi-core.conf"] = (
        "# coreepi: let services dump core (RLIMIT_CORE); see docs/capture.md\n"
        "[Manager]\nDefaultLimitCORE=infinity\n")
    exec_start = shlex.join([python, "-m", "coreepi", "agent", *config_args])
    files[root / "etc/systemd/system/coreepi-agent.service"] = AGENT_UNIT.format(
        exec_start=exec_start, spool_dir=spool_dir,
        private_tmp=_private_tmp(spool_dir, notes))
    notes.append("then: systemctl daemon-reload && systemctl enable --now coreepi-agent.service")
    return InstallPlan(pattern, CORE_PIPE_LIMIT, files, proc_sys,
                       root / "var/lib/coreepi/install-backup.json", notes)


def _private_tmp(spool_dir: Path, notes: list[str]) -> str:
    """The unit's PrivateTmp line. ``yes`` unless the spool lies under /tmp
    or /var/tmp (as given or through a symlink): a private /tmp would hide
    from the agent the spool that the kernel-spawned ``collect`` writes in
    the real one, and nothing would be shipped. Then it is dropped, with a
    note added to ``notes``: such a spool is also emptied by reboots and
    systemd-tmpfiles."""
    absolute = Path(os.path.abspath(spool_dir))
    under = next((tmp for tmp in SHARED_TMP for path in (absolute, absolute.resolve())
                  if path.is_relative_to(tmp)), None)
    if under is None:
        return "PrivateTmp=yes"
    notes.append(f"spool {spool_dir} is under {under}: the unit has no PrivateTmp (the agent "
                 "must see the spool collect writes); reboots and systemd-tmpfiles clean "
                 f"{under}: use a spool under /var/spool in production")
    return f"# no PrivateTmp: the spool {spool_dir} is under {under} (docs/capture.md)"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.coreepi-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def apply_install(plan: InstallPlan) -> None:
    """Perform ``plan`` (root needed for the real paths). Saves the previous
    state first, unless a backup from an earlier install exists."""
    if not plan.backup.exists():
        backup = {
            "core_pattern": _read(plan.proc_sys / "core_pattern"),
            "core_pipe_limit": _read(plan.proc_sys / "core_pipe_limit"),
            "files": {str(p): _read(p) for p in plan.files},
        }
        _write(plan.backup, json.dumps(backup, indent=2), 0o600)
    for path, text in plan.files.items():
        _write(path, text, 0o755 if path.name == "coreepi-collect" else 0o644)
    (plan.proc_sys / "core_pipe_limit").write_text(f"{plan.core_pipe_limit}\n")
    (plan.proc_sys / "core_pattern").write_text(plan.core_pattern + "\n")


def uninstall(
    root: Path = Path("/"), proc_sys: Path = Path("/proc/sys/kernel")
) -> list[str]:
    """Restore what the first install saved. Returns what was done."""
    backup_path = root / "var/lib/coreepi/install-backup.json"
    try:
        backup = json.loads(backup_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"nothing to restore: no {backup_path} (coreepi agent install --apply never ran)"]
    done = []
    for path_text, old in backup.get("files", {}).items():
        path = Path(path_text)
        if old is None:
            path.unlink(missing_ok=True)
            done.append(f"removed {path}")
        else:
            _write(path, old)
            done.append(f"restored {path}")
    for name in ("core_pipe_limit", "core_pattern"):
        old = backup.get(name)
        if old is not None:
            (proc_sys / name).write_text(old if old.endswith("\n") else old + "\n")
            done.append(f"{proc_sys / name} <- {old.strip()}")
    backup_path.unlink()
    return done
