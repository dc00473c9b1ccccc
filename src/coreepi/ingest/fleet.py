"""Read a fleet directory: the interchange format between a fleet and coreepi.

Layout (documented in ``docs/fleet-directory.md``)::

    FLEET/
      hosts.csv        host_id + one column per static attribute
      exposure.csv     host_id, start, end (ISO-8601, UTC) [+ attribute overrides]
      telemetry.jsonl  optional: one TelemetryEvent-like object per line
      crashes/         cores (plain or compressed) with sidecars NAME.json,
                       or CrashReport .json files
      symbols/         optional: executables, libraries, debug files (by build-id)

Here: the directory (:class:`Fleet`), the crash files under ``crashes/``
paired with their sidecars (:func:`scan_crashes`), a sidecar read and
checked (:func:`read_sidecar`), and the rule a host id obeys
(:func:`host_id_problem`). The tables are read by
:mod:`coreepi.ingest.fleet_tables`. A bad sidecar is a :class:`SidecarError`
naming its line and category. Nothing here touches the store;
:mod:`coreepi.ingest.run` does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from coreepi.ingest.boundary import NOT_REGULAR, irregular, refusal
from coreepi.model.fleet import parse_utc
from coreepi.model.limits import check_time, trim_attributes
from coreepi.model.report import stable_crash_id

__all__ = [
    "BAD_HOST_ID",
    "COMPRESSION_SUFFIXES",
    "CrashFile",
    "Fleet",
    "RepeatedKeyError",
    "Sidecar",
    "SidecarError",
    "host_id_problem",
    "is_fleet_dir",
    "pair_crash_files",
    "read_sidecar",
    "scan_crashes",
    "sidecar_candidates",
    "sidecar_from_object",
    "unique_keys",
]

#: file name suffixes of compressed cores; a core's sidecar may drop them
COMPRESSION_SUFFIXES = (".zst", ".zstd", ".gz", ".bz2", ".xz")

#: sidecar keys with a meaning of their own; every other key is an attribute
SIDECAR_RESERVED = ("host_id", "captured_at", "core_dropped_reason", "source")

# --------------------------------------------------------------------------
# crashes/


class SidecarError(ValueError):
    """A sidecar that cannot be used; ``line`` is where, ``category`` why."""

    def __init__(self, category: str, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.category = category
        self.line = line


@dataclass(frozen=True, slots=True)
class Sidecar:
    """What the fleet says about one crash beside its artifact.

    ``attributes`` holds every key not in :data:`SIDECAR_RESERVED`
    (``app_version``, ``exe``, ``load_avg`` …); ``core_dropped_reason`` says
    why a crash has no core (rate limit, quota, too big)."""

    path: Path
    host_id: str
    captured_at: datetime
    attributes: dict[str, Any]
    core_dropped_reason: str | None = None
    source: str | None = None
    attributes_note: str | None = None
    """How many attributes were dropped by which limit (None: none)."""

    def crash_id(self) -> str:
        """The id of the crash this sidecar describes (32 hex characters):
        a hash of host, capture time and attributes, so the crash keeps its
        id whether its core arrives before, with or after the sidecar, and
        a crash re-sent with the same sidecar is the same crash (two cores
        with sidecars identical in all three are taken for one crash). A
        kernel log's crashes take ids of their content instead
        (:mod:`coreepi.ingest.crashes`): its sidecar's time is a pickup time."""
        attrs = json.dumps(self.attributes, sort_keys=True, default=str)
        return stable_crash_id("sidecar", self.host_id, self.captured_at.isoformat(), attrs)


class RepeatedKeyError(ValueError):
    """A JSON object that names one key twice (JSON leaves the meaning open;
    Python's decoder would silently keep the last value)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object as a dict;
    :class:`RepeatedKeyError` naming the first repeated key."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise RepeatedKeyError(f"the key {key!r} appears twice in one object: "
                                   "not a JSON object with unique keys")
        obj[key] = value
    return obj


def host_id_problem(host_id: str) -> str | None:
    """Why ``host_id`` cannot name a host, or None. A host id becomes a URL
    path segment (``/hosts/ID``, ``/api/v1/hosts/ID/drain``: a ``/`` there
    is a path separator to proxies and the router, ``.``/``..`` are
    resolved away) and is printed in terminal tables and log lines (a
    control character would rewrite them)."""
    if any(ch < " " or ch == "\x7f" for ch in host_id):
        return "contains a control character"
    if "/" in host_id:
        return "contains '/' (a host id is one URL path segment)"
    if host_id in (".", ".."):
        return "is a relative path part"
    return None


BAD_HOST_ID = "bad-host-id"
"""The rejection category of a host id that cannot name a host
(:func:`host_id_problem`): ``coreepi ingest`` exits 2 after the rest is in."""


def _json_error(exc: json.JSONDecodeError, what: str) -> SidecarError:
    return SidecarError("not-json", f"{what} is not JSON: {exc.msg} (column {exc.colno})",
                        exc.lineno)


def sidecar_from_object(path: Path, obj: object) -> Sidecar:
    """Validate a decoded sidecar. Raises :class:`SidecarError`."""
    if not isinstance(obj, dict):
        raise SidecarError("not-json", "sidecar is not a JSON object", 1)
    host_id = obj.get("host_id")
    if isinstance(host_id, int) and not isinstance(host_id, bool):
        host_id = str(host_id)  # hosts.csv's host_id 42 is the text "42"
    if host_id is not None and not isinstance(host_id, str):
        raise SidecarError("bad-value", f"sidecar host_id is a {type(host_id).__name__}, "
                           "not text or an integer")
    if host_id is None or not host_id.strip():
        raise SidecarError("missing-value", "sidecar has no host_id")
    problem = host_id_problem(host_id.strip())
    if problem is not None:
        raise SidecarError(BAD_HOST_ID, f"sidecar host_id {host_id.strip()!r} {problem}")
    raw_time = obj.get("captured_at")
    if raw_time is None:
        raise SidecarError("missing-value", "sidecar has no captured_at (ISO-8601 UTC)")
    if not isinstance(raw_time, str):
        raise SidecarError("bad-timestamp",
                           f"sidecar captured_at {raw_time!r} is not ISO-8601 UTC text")
    try:
        captured_at = check_time(parse_utc(raw_time), "captured_at")
    except ValueError as exc:
        raise SidecarError("bad-timestamp", f"sidecar captured_at: {exc}") from None
    dropped = obj.get("core_dropped_reason")
    source = obj.get("source")
    given = {k: v for k, v in obj.items() if k not in SIDECAR_RESERVED}
    attrs, n_dropped, limit = trim_attributes(given)
    return Sidecar(
        path, host_id.strip(), captured_at, attrs,
        str(dropped) if dropped is not None else None,
        str(source) if source is not None else None,
        f"{n_dropped} of {len(given)} attributes dropped (limit {limit}, see docs/limits.md); "
        "crash kept"
        if n_dropped else None,
    )


def read_sidecar(path: str | os.PathLike[str]) -> Sidecar:
    """Read and validate the sidecar at ``path``. Raises :class:`SidecarError`."""
    path = Path(path)
    if irregular(path):
        raise SidecarError("not-a-file", f"sidecar is {NOT_REGULAR}")
    try:
        # utf-8-sig: Notepad and PowerShell's Out-File start with a byte-order mark
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SidecarError("unreadable-file", f"cannot read sidecar: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SidecarError("not-json", "sidecar is not UTF-8 text, so not JSON", 1) from None
    try:
        obj = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise _json_error(exc, "sidecar") from None
    except RepeatedKeyError as exc:
        raise SidecarError("not-json", f"sidecar: {exc}", 1) from None
    except RecursionError:
        raise SidecarError("not-json", "sidecar is not usable JSON: nested too deeply", 1) from None
    return sidecar_from_object(path, obj)


@dataclass(frozen=True, slots=True)
class CrashFile:
    """One thing found under ``crashes/``.

    ``kind`` is ``artifact`` (a core or kernel log; ``sidecar`` is its
    NAME.json if present), ``json`` (a .json file with no artifact beside
    it: a CrashReport, or the sidecar of a crash whose core is missing; which
    one is decided when it is read) or ``refused`` (not to be read: ``refused``
    says why, see :mod:`coreepi.ingest.boundary`)."""

    path: Path
    kind: str
    sidecar: Path | None = None
    refused: str | None = None


def sidecar_candidates(artifact: Path) -> list[Path]:
    """Where the sidecar of ``artifact`` may be, most specific first:
    ``NAME.json`` beside it; for a compressed core the name without its
    compression suffix (``core.1.zst`` -> ``core.1.zst.json``,
    ``core.1.json``); then the name without its last suffix unless that is a
    number, as users name pairs (``X.core`` -> ``X.json``, ``X.core.zst`` ->
    ``X.core.json``, ``X.json``)."""
    name = artifact.name
    out = [name + ".json"]
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            out.append(name + ".json")
            break
    stem, dot, suffix = name.rpartition(".")
    # Not for a number: core.1234 is the kernel's core.PID, and core.json
    # beside core.1 … core.9 would describe none of them in particular.
    if dot and stem and not suffix.isdigit():
        out.append(stem + ".json")
    return [artifact.with_name(n) for n in dict.fromkeys(out)]


def pair_crash_files(files: list[Path]) -> Iterator[CrashFile]:
    """Pair artifacts with their sidecars among ``files`` (in the given order).

    A sidecar goes to the artifact for which it is the most specific
    candidate (:func:`sidecar_candidates`): ``X.json`` is the sidecar of an
    artifact named ``X`` before it is ``X.core``'s. Two artifacts that
    claim one sidecar equally (``X.core`` and ``X.dump`` for ``X.json``) get
    none: which crash it describes is unknowable. An artifact with several
    sidecars takes the most specific; the others stay sidecars of their own
    (crashes whose core is missing)."""
    present = set(files)
    artifacts = [f for f in files if f.suffix != ".json"]
    claims: dict[Path, list[tuple[int, Path]]] = {}  # sidecar -> (specificity, artifact)
    for a in artifacts:
        for rank, c in enumerate(sidecar_candidates(a)):
            if c in present:
                claims.setdefault(c, []).append((rank, a))
    owner: dict[Path, Path] = {}  # sidecar -> the artifact it pairs with
    for sidecar, by in claims.items():
        best = min(rank for rank, _ in by)
        winners = [a for rank, a in by if rank == best]
        if len(winners) == 1:
            owner[sidecar] = winners[0]
    paired: dict[Path, Path] = {}
    for a in artifacts:
        mine = [c for c in sidecar_candidates(a) if owner.get(c) == a]
        if mine:
            paired[a] = mine[0]
    claimed = set(paired.values())
    for f in files:
        if f.suffix != ".json":
            yield CrashFile(f, "artifact", paired.get(f))
        elif f not in claimed:
            yield CrashFile(f, "json")


def scan_crashes(directory: str | os.PathLike[str],
                 root: str | os.PathLike[str] | None = None) -> Iterator[CrashFile]:
    """Every crash file under ``directory`` (recursively, sorted by path;
    dot files are skipped), artifacts paired with their sidecars. A file or
    directory that resolves outside ``root`` (default: ``directory``; a fleet
    directory's root for its ``crashes/``) and a symlinked directory come as
    ``refused`` items, never read nor paired (:func:`coreepi.ingest.boundary.refusal`)."""
    files: list[Path] = []
    refused: dict[Path, str] = {}
    top = Path(root if root is not None else directory)
    for at, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in [*dirs, *names]:
            path = Path(at, name)
            why = None if name.startswith(".") else refusal(path, top)
            if why is not None:
                refused[path] = why
            if name in names and not name.startswith(".") and (why is None or
                                                                path.suffix != ".json"):
                files.append(path)  # a refused artifact still pairs: its sidecar is not a crash
    yield from (CrashFile(p, "refused", refused=why) for p, why in sorted(refused.items())
                if p not in files)
    for item in pair_crash_files(sorted(files)):
        why = refused.get(item.path)
        yield item if why is None else CrashFile(item.path, "refused", item.sidecar, why)


# --------------------------------------------------------------------------
# the directory


@dataclass(frozen=True, slots=True)
class Fleet:
    """The files of a fleet directory (each None when absent)."""

    root: Path
    hosts: Path | None
    exposure: Path | None
    telemetry: Path | None
    crashes: Path | None
    symbols: Path | None

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> Fleet:
        root = Path(root)

        def f(name: str) -> Path | None:
            # a FIFO or device is given too: the loader says it is not read
            p = root / name
            return p if p.is_file() or irregular(p) else None

        def d(name: str) -> Path | None:
            p = root / name
            return p if p.is_dir() else None

        return cls(root, f("hosts.csv"), f("exposure.csv"), f("telemetry.jsonl"),
                   d("crashes"), d("symbols"))


def is_fleet_dir(path: str | os.PathLike[str]) -> bool:
    """A directory holding any of hosts.csv, exposure.csv, telemetry.jsonl or crashes/."""
    p = Path(path)
    return p.is_dir() and any(
        (p / n).exists() for n in ("hosts.csv", "exposure.csv", "telemetry.jsonl", "crashes")
    )
