"""The crashing process's context from /proc/<pid>, read while it still exists.

The kernel keeps /proc/<pid> of a dumping process while it writes the core
into the pipe (and, with ``core_pipe_limit`` > 0, until the handler exits), so
``collect`` reads it *before* draining stdin. The same parsers read
systemd-coredump's COREDUMP_PROC_* journal fields.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

__all__ = [
    "ProcContext",
    "container_from_cgroup",
    "filter_environ",
    "parse_maps",
    "parse_status",
    "read_proc",
]

_CONTAINER = re.compile(
    r"(?:docker|cri-containerd|crio|libpod|containerd)[-/:]([0-9a-f]{64})(?:\.scope)?"
    r"|/([0-9a-f]{64})(?:/|$)"
)
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
MAX_MAPS = 65536


@dataclass
class MapLine:
    start: int
    end: int
    perms: str  # r/w/x only (private/shared column dropped)
    offset: int
    path: str | None


@dataclass
class ProcContext:
    """What /proc said about the process; every field may be missing."""

    exe: str | None = None
    comm: str | None = None
    cmdline: list[str] = field(default_factory=list)
    cgroup: str | None = None
    container_id: str | None = None
    pod_uid: str | None = None
    ppid: int | None = None
    uid: int | None = None
    gid: int | None = None
    threads: int | None = None
    environ: dict[str, str] = field(default_factory=dict)
    maps: list[MapLine] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_maps(text: str) -> list[MapLine]:
    """Lines of /proc/PID/maps (``start-end perms offset dev inode [path]``)."""
    out = []
    for line in text.splitlines()[:MAX_MAPS]:
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        try:
            start, end = (int(x, 16) for x in parts[0].split("-", 1))
            offset = int(parts[2], 16)
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) == 6 else None
        out.append(MapLine(start, end, parts[1][:3], offset, path or None))
    return out


def parse_status(text: str) -> dict[str, str]:
    """``Key:\\tvalue`` lines of /proc/PID/status."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _cgroup_path(text: str) -> str | None:
    """The unified (v2) path, else the v1 systemd or first controller's path."""
    best = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if best is None or parts[1] == "name=systemd":
            best = parts[2]
    return best


def container_from_cgroup(path: str | None) -> tuple[str | None, str | None]:
    """(container id, Kubernetes pod uid) named by a cgroup path, if any.

    Handles Docker (``/docker/<id>``, ``docker-<id>.scope``), containerd
    (``cri-containerd-<id>.scope``), CRI-O (``crio-<id>.scope``), Podman
    (``libpod-<id>.scope``) and the kubelet's ``pod<uid>`` directories, with
    the systemd cgroup driver's ``_`` in place of ``-``.
    """
    if not path:
        return None, None
    container = None
    for m in _CONTAINER.finditer(path):
        container = m.group(1) or m.group(2)  # the innermost one wins
    pod = _POD.search(path)
    return container, pod.group(1).replace("_", "-") if pod else None


def filter_environ(raw: bytes, allow: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The allow-listed variables of a NUL- (or newline-) separated environ."""
    allowed = set(allow)
    out = {}
    sep = b"\0" if b"\0" in raw else b"\n"
    for item in raw.split(sep):
        key, eq, value = item.partition(b"=")
        name = key.decode("utf-8", "replace")
        if eq and name in allowed:
            out[name] = value.decode("utf-8", "replace")[:1024]
    return out


def _read(path: str, limit: int = 4 << 20) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(limit)


def read_proc(pid: int, environ_allowlist: list[str], proc: str = "/proc") -> ProcContext:
    """Read /proc/<pid>; what cannot be read is noted in ``errors``, never raised."""
    ctx = ProcContext()
    base = f"{proc}/{pid}"
    try:
        ctx.exe = os.readlink(f"{base}/exe").removesuffix(" (deleted)")
    except OSError as exc:
        ctx.errors.append(f"exe: {exc.strerror}")
    try:
        ctx.cmdline = [a.decode("utf-8", "replace") for a in _read(f"{base}/cmdline").split(b"\0")]
        if ctx.cmdline and ctx.cmdline[-1] == "":
            ctx.cmdline.pop()
    except OSError as exc:
        ctx.errors.append(f"cmdline: {exc.strerror}")
    try:
        ctx.cgroup = _cgroup_path(_read(f"{base}/cgroup").decode("utf-8", "replace"))
        ctx.container_id, ctx.pod_uid = container_from_cgroup(ctx.cgroup)
    except OSError as exc:
        ctx.errors.append(f"cgroup: {exc.strerror}")
    try:
        apply_status(ctx, parse_status(_read(f"{base}/status").decode("utf-8", "replace")))
    except OSError as exc:
        ctx.errors.append(f"status: {exc.strerror}")
    try:
        ctx.environ = filter_environ(_read(f"{base}/environ"), environ_allowlist)
    except OSError as exc:
        ctx.errors.append(f"environ: {exc.strerror}")
    try:
        ctx.maps = parse_maps(_read(f"{base}/maps", 64 << 20).decode("utf-8", "replace"))
    except OSError as exc:
        ctx.errors.append(f"maps: {exc.strerror}")
    return ctx


def apply_status(ctx: ProcContext, status: dict[str, str]) -> None:
    def first_int(key: str) -> int | None:
        value = status.get(key, "").split()
        return int(value[0]) if value and value[0].lstrip("-").isdigit() else None

    ctx.comm = ctx.comm or status.get("Name")
    ctx.ppid = first_int("PPid")
    ctx.uid = first_int("Uid")
    ctx.gid = first_int("Gid")
    ctx.threads = first_int("Threads")
