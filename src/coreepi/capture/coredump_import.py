"""``coreepi collect --from-systemd-coredump``: import systemd-coredump's crashes.

On machines where systemd-coredump stays the core_pattern handler, its
journal entries (``MESSAGE_ID=fc2e22bc6ee647b6b90729ab34a250b1``, read with
``journalctl -o json``) and the cores it stored
(``/var/lib/systemd/coredump/core.*.zst``) are turned into spool entries,
through the same capture policy, host facts and edge analysis as ``collect``.

Fields used (systemd-coredump(8)): COREDUMP_PID, COREDUMP_UID, COREDUMP_GID,
COREDUMP_SIGNAL, COREDUMP_TIMESTAMP (µs since the epoch), COREDUMP_RLIMIT,
COREDUMP_HOSTNAME, COREDUMP_COMM, COREDUMP_EXE, COREDUMP_CMDLINE,
COREDUMP_CGROUP, COREDUMP_UNIT, COREDUMP_SLICE, COREDUMP_CONTAINER_CMDLINE,
COREDUMP_PROC_STATUS, COREDUMP_PROC_MAPS, COREDUMP_ENVIRON,
COREDUMP_PACKAGE_NAME/VERSION, COREDUMP_FILENAME, COREDUMP_TRUNCATED,
COREDUMP (the core itself, with Storage=journal), _BOOT_ID, _MACHINE_ID,
__CURSOR. Binary fields come as arrays of byte values in journalctl's JSON.

Progress (the last cursor and the crash ids already imported) is kept in
``state/systemd-coredump.json``, so re-running imports only new crashes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from coreepi.capture.collect import capture
from coreepi.capture.config import CaptureConfig
from coreepi.capture.hostfacts import host_ids
from coreepi.capture.policy import CrashContext
from coreepi.capture.procinfo import (
    ProcContext,
    apply_status,
    container_from_cgroup,
    filter_environ,
    parse_maps,
    parse_status,
)
from coreepi.capture.spool import Spool, atomic_write
from coreepi.capture.stream import StreamResult, compress_stream
from coreepi.model.report import Source
from coreepi.parse.open_input import open_input

__all__ = [
    "COREDUMP_MESSAGE_ID",
    "ImportSummary",
    "entry_core",
    "entry_field",
    "import_coredumps",
    "journal_entries",
]

COREDUMP_MESSAGE_ID = "fc2e22bc6ee647b6b90729ab34a250b1"
REMEMBERED_IDS = 10000


@dataclasses.dataclass
class ImportSummary:
    imported: int = 0
    skipped: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)


def entry_field(entry: dict[str, Any], name: str) -> str | None:
    """A journal field as text (binary arrays decoded; repeated: the first)."""
    value = entry.get(name)
    if isinstance(value, list) and value and not isinstance(value[0], int):
        value = value[0]
    if isinstance(value, list):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _bytes(entry: dict[str, Any], name: str) -> bytes | None:
    value = entry.get(name)
    if isinstance(value, list) and value and isinstance(value[0], int):
        return bytes(value)
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def journal_entries(json_file: Path | None = None, after_cursor: str | None = None,
                    since: float | None = None) -> Iterator[dict[str, Any]]:
    """systemd-coredump's entries: from a ``journalctl -o json`` file, or from
    ``journalctl`` itself (after ``after_cursor``; logged at or after
    ``since``, seconds since the epoch)."""
    if json_file is not None:
        lines: Iterable[str] = json_file.read_text(encoding="utf-8").splitlines()
    else:
        tool = shutil.which("journalctl")
        if tool is None:
            return
        argv = [tool, "-o", "json", "--all", "--no-pager", f"MESSAGE_ID={COREDUMP_MESSAGE_ID}"]
        if after_cursor:
            argv.append(f"--after-cursor={after_cursor}")
        if since is not None:
            argv.append(f"--since=@{int(since)}")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        lines = done.stdout.splitlines()
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("MESSAGE_ID", COREDUMP_MESSAGE_ID) == \
                COREDUMP_MESSAGE_ID and "COREDUMP_PID" in entry:
            yield entry


def context_from_journal(entry: dict[str, Any], config: CaptureConfig) -> CrashContext:
    host_id, boot_id = host_ids(config)
    stamp = _int(entry_field(entry, "COREDUMP_TIMESTAMP"))
    proc = ProcContext(exe=entry_field(entry, "COREDUMP_EXE"),
                       comm=entry_field(entry, "COREDUMP_COMM"))
    cmdline = entry_field(entry, "COREDUMP_CMDLINE")
    proc.cmdline = cmdline.split(" ") if cmdline else []  # systemd joined argv with spaces
    proc.cgroup = entry_field(entry, "COREDUMP_CGROUP")
    proc.container_id, proc.pod_uid = container_from_cgroup(proc.cgroup)
    if status := entry_field(entry, "COREDUMP_PROC_STATUS"):
        apply_status(proc, parse_status(status))
    proc.maps = parse_maps(entry_field(entry, "COREDUMP_PROC_MAPS") or "")
    if environ := _bytes(entry, "COREDUMP_ENVIRON"):
        proc.environ = filter_environ(environ, config.collect.environ_allowlist)
    ctx = CrashContext(
        source=Source.SYSTEMD_COREDUMP,
        pid=_int(entry_field(entry, "COREDUMP_PID")),
        tid=_int(entry_field(entry, "COREDUMP_TID")),
        signal=_int(entry_field(entry, "COREDUMP_SIGNAL")),
        time=stamp / 1e6 if stamp is not None else None,
        hostname=entry_field(entry, "COREDUMP_HOSTNAME"),
        comm=proc.comm,
        uid=_int(entry_field(entry, "COREDUMP_UID")),
        gid=_int(entry_field(entry, "COREDUMP_GID")),
        rlimit_core=_int(entry_field(entry, "COREDUMP_RLIMIT")),
        host_id=config.host_id or entry_field(entry, "_MACHINE_ID") or host_id,
        boot_id=(entry_field(entry, "_BOOT_ID") or boot_id or "").replace("-", "") or None,
        proc=proc,
    )
    for name in ("COREDUMP_UNIT", "COREDUMP_SLICE", "COREDUMP_PACKAGE_NAME",
                 "COREDUMP_PACKAGE_VERSION"):
        if value := entry_field(entry, name):
            proc.environ[f"systemd.{name.removeprefix('COREDUMP_').lower()}"] = value
    return ctx


def entry_core(entry: dict[str, Any]) -> tuple[BinaryIO | None, str | None]:
    """A readable plain stream of a journal entry's core, or (None, why not)."""
    inline = _bytes(entry, "COREDUMP")
    if inline:
        return io.BytesIO(inline), None
    name = entry_field(entry, "COREDUMP_FILENAME")
    if not name:
        return None, "systemd-coredump stored no core (Storage=none, too big, or RLIMIT_CORE=0)"
    try:
        # the decompressor is chosen by the content's magic (zstd, xz, gzip,
        # bzip2), never by the name; decompression is bounded by max_core_bytes
        stream = open_input(name)
    except OSError as exc:
        return None, f"systemd-coredump's core {name} is gone: {exc.strerror}"
    if stream.compression is None and name.endswith(".lz4"):
        stream.close()  # lz4 is the one compression of systemd we cannot decode
        return None, f"cannot read lz4-compressed core {name} (no lz4 decoder)"
    return stream, None


def import_coredumps(
    config: CaptureConfig, json_file: Path | None = None
) -> ImportSummary:
    """Import systemd-coredump's crashes not imported before into the spool."""
    spool = Spool(config.spool_dir)
    inline = dataclasses.replace(config, collect=dataclasses.replace(
        config.collect, edge_analysis_detach=False))  # no kernel waits on us: analyse inline
    summary = ImportSummary()
    with spool.locked("systemd-coredump.json") as state_path:
        try:
            state = json.loads(state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {}
        seen: list[str] = list(state.get("imported", []))
        seen_set = set(seen)
        cursor = state.get("cursor") if json_file is None else None
        for entry in journal_entries(json_file, cursor):
            ctx = context_from_journal(entry, config)
            crash_id = ctx.crash_id()
            if crash_id in seen_set or spool.entry(crash_id) is not None:
                summary.skipped += 1
                continue
            stream, why = entry_core(entry)
            if why:
                ctx.warnings.append(why)
            if entry_field(entry, "COREDUMP_TRUNCATED") in ("1", "yes", "true"):
                ctx.warnings.append("systemd-coredump truncated this core (ProcessSizeMax)")

            def feed(dest: Path | None, max_bytes: int, left: int,
                     stream: BinaryIO | None = stream, why: str | None = why) -> StreamResult:
                c = inline.collect
                if stream is None:
                    return StreamResult(dropped_reason=why)
                with stream:
                    return compress_stream(stream, dest, level=c.zstd_level,
                                           threads=c.zstd_threads, max_bytes=max_bytes,
                                           max_compressed_bytes=left, sha256=c.hash_core)

            try:
                capture(inline, spool, ctx, feed)
            except Exception as exc:  # noqa: BLE001 (one bad entry must not stop the import)
                summary.errors.append(f"{crash_id}: {type(exc).__name__}: {exc}")
                spool.log(f"systemd-coredump import of {crash_id} failed: {exc}")
                continue
            summary.imported += 1
            seen.append(crash_id)
            seen_set.add(crash_id)
            if entry.get("__CURSOR"):
                state["cursor"] = entry["__CURSOR"]
        state["imported"] = seen[-REMEMBERED_IDS:]
        atomic_write(state_path, json.dumps(state).encode())
    return summary
