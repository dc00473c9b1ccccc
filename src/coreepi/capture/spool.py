"""The node's spool: crash entries waiting to be shipped, and capture state.

Layout (all under ``spool_dir``)::

    tmp/<crash_id>.<pid>/   an entry being written; never shipped
    queue/<crash_id>/       complete entries: report.json, core.zst (optional)
        .analysis-pending   edge analysis still running (agent waits, or ships
                            as-is once the marker is older than the stale limit)
        .reported           the server acknowledged report.json (agent's progress)
    quarantine/<crash_id>/  refused by the server with a 4xx, or unshippable (no
                            report.json); REFUSED says why; kept for a human
    shipped/<crash_id>/     delivered entries, only with spool.keep_shipped
    state/                  rate-limit buckets, host-facts cache, heartbeat and
                            import cursors, their lock files
    collect.log             errors of the pipe handler (it never writes to a tty)

An entry becomes visible only by ``rename(tmp/X, queue/<crash_id>)`` after
every file in it and the directory itself were fsync'd: a collector killed at
any point leaves at most a directory in ``tmp/``, which the agent removes once
its writer is dead. Updates inside a queued entry (the analysed report) are
write-to-temp + fsync + rename too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["Entry", "Spool", "atomic_write", "fsync_dir"]

PENDING = ".analysis-pending"
REPORTED = ".reported"
RESERVED = ".reserved"
REPORT = "report.json"
CORE = "core.zst"
LOG_MAX_BYTES = 1 << 20


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, whole."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class Entry:
    """One queued crash entry (a directory in ``queue/``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def crash_id(self) -> str:
        return self.path.name

    @property
    def report_path(self) -> Path:
        return self.path / REPORT

    @property
    def core_path(self) -> Path | None:
        core = self.path / CORE
        return core if core.exists() else None

    @property
    def reported(self) -> bool:
        return (self.path / REPORTED).exists()

    def mark_reported(self, reported: bool = True) -> None:
        marker = self.path / REPORTED
        if reported:
            atomic_write(marker, b"")
        else:
            marker.unlink(missing_ok=True)
            fsync_dir(self.path)

    def pending_age(self) -> float | None:
        """Seconds since edge analysis started, None if it is not pending."""
        try:
            return time.time() - (self.path / PENDING).stat().st_mtime
        except FileNotFoundError:
            return None

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())


class Spool:
    """A spool directory. Creating the object creates the directories, unless
    ``create`` is False (a reader, such as ``coreepi agent status``)."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True) -> None:
        self.root = Path(root)
        for sub in ("tmp", "queue", "quarantine", "state"):
            if create:
                (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def queue(self) -> Path:
        return self.root / "queue"

    @property
    def state(self) -> Path:
        return self.root / "state"

    # -- writing -----------------------------------------------------------

    def new_entry_dir(self, crash_id: str) -> Path:
        path = self.tmp / f"{crash_id}.{os.getpid()}"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir()
        return path

    def commit(self, tmp_dir: Path, crash_id: str) -> Entry | None:
        """fsync ``tmp_dir`` and everything in it, then rename it into the
        queue. Returns None (and removes ``tmp_dir``) when an entry with this
        crash id is already queued (the same crash collected twice)."""
        for child in tmp_dir.iterdir():
            if child.is_file():
                fd = os.open(child, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(tmp_dir)
        target = self.queue / crash_id
        try:
            os.rename(tmp_dir, target)
        except OSError:
            if target.exists():
                shutil.rmtree(tmp_dir, ignore_errors=True)
                return None
            raise
        fsync_dir(self.queue)
        fsync_dir(self.tmp)
        return Entry(target)

    # -- reading -----------------------------------------------------------

    def entries(self) -> list[Entry]:
        """Queued entries, oldest first."""
        items = []
        if not self.queue.is_dir():  # a reader's spool that was never created
            return []
        for path in self.queue.iterdir():
            if path.is_dir() and (path / REPORT).exists():
                try:
                    items.append((path.stat().st_mtime, Entry(path)))
                except FileNotFoundError:
                    continue
        return [e for _, e in sorted(items, key=lambda t: (t[0], t[1].crash_id))]

    def unshippable(self) -> list[Path]:
        """What is in ``queue/`` but cannot be shipped: a directory without
        report.json (deleted or lost by a disk fault), or a stray file.
        Entries appear by one rename of a complete directory, so nothing
        here is work in progress; the agent quarantines each with a reason."""
        if not self.queue.is_dir():  # a reader's spool that was never created
            return []
        return sorted(p for p in self.queue.iterdir()
                      if not (p.is_dir() and (p / REPORT).exists()))

    def entry(self, crash_id: str) -> Entry | None:
        path = self.queue / crash_id
        return Entry(path) if (path / REPORT).exists() else None

    def usage_bytes(self) -> int:
        """Bytes held by queued and in-progress entries (what the quota
        counts); a directory holding a reservation (:meth:`reserve`) counts
        at least the bytes reserved, before they are written."""
        total = 0
        for top in (self.queue, self.tmp):
            for dirpath, _dirs, files in os.walk(top):
                held = 0
                for name in files:
                    with contextlib.suppress(FileNotFoundError):
                        held += os.lstat(os.path.join(dirpath, name)).st_size
                if RESERVED in files:
                    held = max(held, _reserved_bytes(Path(dirpath)))
                total += held
        return total

    @contextlib.contextmanager
    def reserve(self, name: str, nbytes: int, quota: int) -> Iterator[Path | None]:
        """A scratch directory ``tmp/<name>.<pid>`` counted as ``nbytes`` by
        :meth:`usage_bytes` from the moment it exists (before anything is
        written in it), or None when ``nbytes`` more would pass ``quota``.
        The check and the reservation hold the spool's quota lock, so two
        collectors cannot both take the last bytes. Removed on exit."""
        with self.locked("quota"):
            if self.usage_bytes() + nbytes > quota:
                path = None
            else:
                path = self.tmp / f"{name}.{os.getpid()}"
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir()
                (path / RESERVED).write_text(str(nbytes), encoding="ascii")
        try:
            yield path
        finally:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)

    # -- after shipping ----------------------------------------------------

    def finish(self, entry: Entry, keep: bool) -> None:
        """Remove a delivered entry (or move it to ``shipped/``)."""
        if keep:
            shipped = self.root / "shipped"
            shipped.mkdir(exist_ok=True)
            os.replace(entry.path, shipped / entry.crash_id)
            fsync_dir(shipped)
        else:
            # rename first so that a crash mid-delete never leaves a
            # half-deleted entry in the queue
            doomed = self.tmp / f"{entry.crash_id}.shipped"
            os.replace(entry.path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        fsync_dir(self.queue)

    def quarantine(self, entry: Entry, why: str) -> None:
        """Move ``entry`` (or a stray file of ``queue/``) to ``quarantine/``
        with its reason in ``REFUSED`` (``<name>.REFUSED`` beside a file)."""
        target = self.root / "quarantine" / entry.crash_id
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        if entry.path.is_dir():
            (entry.path / "REFUSED").write_text(why + "\n", encoding="utf-8")
        else:
            target.with_name(target.name + ".REFUSED").write_text(why + "\n", encoding="utf-8")
        os.replace(entry.path, target)
        fsync_dir(self.queue)

    def clean_tmp(self, min_age_seconds: float = 3600.0) -> list[str]:
        """Remove ``tmp/`` leftovers whose writer is gone (collectors that were
        killed), and half-deleted shipped entries. Returns the names removed."""
        removed = []
        now = time.time()
        for path in self.tmp.iterdir():
            name = path.name
            stem, _, suffix = name.rpartition(".")
            alive = False
            if suffix.isdigit():
                alive = _pid_alive(int(suffix))
            elif suffix != "shipped":
                with contextlib.suppress(FileNotFoundError):
                    alive = now - path.stat().st_mtime < min_age_seconds
            if not alive and stem:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(True)
                removed.append(name)
        return removed

    # -- state and log -----------------------------------------------------

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[Path]:
        """Hold an exclusive flock on ``state/<name>.lock``; yields ``state/<name>``."""
        with open(self.state / f"{name}.lock", "a+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield self.state / name
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def log(self, message: str, *, name: str = "collect.log") -> None:
        """Append one line to the spool's log (rotated at 1 MiB). Never raises."""
        try:
            path = self.root / name
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_size > LOG_MAX_BYTES:
                    os.replace(path, path.with_name(name + ".1"))
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{stamp} [{os.getpid()}] {message.rstrip()}\n")
        except OSError:
            pass


def _reserved_bytes(directory: Path) -> int:
    try:
        return int((directory / RESERVED).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
