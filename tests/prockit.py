"""Processes and litter, for the tests that kill coreepi abruptly: children
of a pid, whether a pid still runs, bytes left under a directory."""

from __future__ import annotations

from pathlib import Path

__all__ = ["alive", "bytes_under", "children"]


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (read from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def bytes_under(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
