"""What the server receives from node agents, into the store: reports, heartbeats, cores.

The intake of the HTTP API (``coreepi serve``; the agent sends through it):
library functions over a :class:`~coreepi.store.Store` (blocking; the app
runs them through its :class:`~coreepi.serve.gateway.StoreGateway`), so a
test or another front end can call them without HTTP. The server's settings
come in as a :class:`CoreLimits`; nothing here imports :mod:`coreepi.serve`.

* :func:`accept_report` — a CrashReport: ``created``, ``duplicate`` (same
  crash_id, same content as received before) or ``conflict`` (same crash_id,
  other content). Check and insert happen under the store's writer lock. A
  crash killed by SIGBUS BUS_MCEERR_* also becomes a ``sigbus_mce``
  telemetry event, as in ``coreepi ingest`` (:func:`coreepi.ingest.crashes.crash_events`).
* :func:`accept_heartbeat` — an exposure interval (+ host attributes from the
  facts, when sent).
* :class:`CoreIntake` — a received core: checked (zstd, ELF magic, size and
  compression ratio after decompression — into a counter, nothing written,
  unless it is to be analysed), kept as a blob (durable), the crash row
  updated and, when the stored report lacks analysis, an analysis job queued
  in the same transaction (the server's analysis workers run it in ingest's
  sandbox, :class:`coreepi.ingest.sandbox.Sandbox`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import tempfile
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from coreepi import __version__
from coreepi.ingest.crashes import crash_events
from coreepi.model.fleet import ExposureInterval, HostRow
from coreepi.model.heartbeat import Heartbeat
from coreepi.model.report import CrashReport, HostFacts, ProcessInfo
from coreepi.parse.open_input import DecompressionError, max_decompressed_bytes, open_input
from coreepi.store import CoreStatus, CrashRecord, Receipt, Store

__all__ = [
    "CoreIntake",
    "CoreLimits",
    "CoreResult",
    "InvalidCore",
    "Outcome",
    "accept_heartbeat",
    "accept_heartbeats",
    "accept_report",
    "accept_reports",
    "content_sha256",
    "decompress_checked",
    "host_attributes",
    "needs_analysis",
]

ARTIFACT = "api"


class Outcome(StrEnum):
    """What became of one received item."""

    CREATED = "created"
    DUPLICATE = "duplicate"
    CONFLICT = "conflict"
    UNKNOWN = "unknown"


def content_sha256(report: CrashReport) -> str:
    """SHA-256 of a report's canonical JSON (pydantic's, key order fixed by the model)."""
    return hashlib.sha256(report.model_dump_json().encode("utf-8")).hexdigest()


def _record(report: CrashReport, status: CoreStatus | None = None,
            reason: str | None = None) -> CrashRecord:
    if status is None:
        if report.core.dropped_reason:
            status, reason = CoreStatus.MISSING, report.core.dropped_reason
        else:
            status = CoreStatus.NOT_STORED
    return CrashRecord(report, dict(report.attributes), status, reason, ARTIFACT)


def accept_reports(store: Store, reports: list[CrashReport]) -> list[Outcome]:
    """Store received reports, each once, in one transaction (group commit);
    one outcome per report, in order. Durable (committed) when this returns.
    Check and insert run under the store's writer lock, and the check reads
    through the writer, so two reports of one crash in a batch are told apart."""
    digests = [content_sha256(r) for r in reports]
    outcomes: list[Outcome] = []
    with store.transaction():
        ids = [r.crash_id for r in reports]
        seen = {k: v.content_sha256 for k, v in store.receipts(ids).items()}
        unreceived = [i for i in ids if i not in seen]
        for crash_id, existing in store.get_reports(unreceived).items():
            seen[crash_id] = content_sha256(existing)  # stored by `coreepi ingest`
        new: list[CrashReport] = []
        for report, digest in zip(reports, digests, strict=True):
            known = seen.get(report.crash_id)
            if known is None:
                seen[report.crash_id] = digest
                new.append(report)
                outcomes.append(Outcome.CREATED)
            else:
                same = hmac.compare_digest(known, digest)
                outcomes.append(Outcome.DUPLICATE if same else Outcome.CONFLICT)
        if new:
            now = datetime.now(UTC)
            records = [_record(r) for r in new]
            store.add_crashes(records)
            store.add_events(crash_events(records))  # as `coreepi ingest` does
            store.add_receipts([Receipt(r.crash_id, seen[r.crash_id], None, now) for r in new])
    return outcomes


def accept_report(store: Store, report: CrashReport) -> Outcome:
    """:func:`accept_reports` of one report."""
    return accept_reports(store, [report])[0]


# --------------------------------------------------------------------------
# heartbeats


def host_attributes(facts: HostFacts) -> dict[str, str | None]:
    """Host facts as flat text attributes (the hosts table's shape): scalar
    facts by name, GPUs as ``gpu_count``/``gpu_model``/``gpu_driver``,
    ``extra`` as given; unknown facts are left out."""
    out: dict[str, str | None] = {}
    for name, value in facts.model_dump(exclude={"gpus", "k8s_labels", "extra"}).items():
        if value is not None:
            out[name] = str(value)
    if facts.gpus:
        out["gpu_count"] = str(len(facts.gpus))
        for key in ("name", "driver"):
            values = sorted({g[key] for g in facts.gpus if g.get(key)})
            if values:
                out["gpu_model" if key == "name" else "gpu_driver"] = ",".join(values)
    for key, value in facts.extra.items():
        out.setdefault(key, value)
    return out


def _interval(hb: Heartbeat) -> ExposureInterval:
    attributes = {k: v for k, v in hb.load.items() if v is not None and not isinstance(v, bool)}
    return ExposureInterval(hb.host_id, hb.start, hb.end, cast(dict[str, str], attributes))


def accept_heartbeats(store: Store, heartbeats: list[Heartbeat]) -> list[Outcome]:
    """Store heartbeats as exposure, in one transaction (group commit); one
    outcome per heartbeat: ``created``, ``duplicate`` (the same interval
    again) or ``conflict`` (it overlaps another interval of the host; then
    nothing of it is written, facts included). The load figures become the
    interval's attributes (numbers stay numbers, so the epidemiology bins
    them into strata); the facts, when sent, the host's attributes."""
    outcomes: list[Outcome | None] = [None] * len(heartbeats)
    intervals: dict[int, ExposureInterval] = {}
    for i, hb in enumerate(heartbeats):
        iv = _interval(hb)
        for other in intervals.values():  # two of one host in this batch
            if other.host_id == iv.host_id and other.start < iv.end and iv.start < other.end:
                same = (other.start, other.end) == (iv.start, iv.end)
                outcomes[i] = Outcome.DUPLICATE if same else Outcome.CONFLICT
                break
        else:
            intervals[i] = iv
    with store.transaction():
        result = store.add_exposure(list(intervals.values()), source="heartbeat")
        conflicts = {id(c[0]) for c in result.conflicts}
        duplicated = {id(d) for d in result.duplicated}
        hosts = []
        for i, iv in intervals.items():
            if id(iv) in conflicts:
                outcomes[i] = Outcome.CONFLICT
                continue
            outcomes[i] = Outcome.DUPLICATE if id(iv) in duplicated else Outcome.CREATED
            facts = heartbeats[i].facts
            if facts is not None:
                hosts.append(HostRow(iv.host_id, host_attributes(facts), 0))
        if hosts:
            store.add_hosts(hosts)
    return [o if o is not None else Outcome.CONFLICT for o in outcomes]


def accept_heartbeat(store: Store, hb: Heartbeat) -> Outcome:
    """:func:`accept_heartbeats` of one heartbeat."""
    return accept_heartbeats(store, [hb])[0]


# --------------------------------------------------------------------------
# cores


class InvalidCore(ValueError):
    """The upload is not a usable core: ``reason`` is a metrics key
    (``invalid-core`` or ``too-large``); ``status`` the HTTP status to answer
    (413 for ``too-large``, else 400 unless given, e.g. 422 for not-ELF).
    The message starts "core refused by the server: ", the one wording of
    the agent's quarantine note and of the crash's ``core_reason``."""

    def __init__(self, reason: str, message: str, status: int | None = None) -> None:
        super().__init__(f"core refused by the server: {message}")
        self.reason = reason
        self.status = status if status is not None else (413 if reason == "too-large" else 400)


@dataclass
class CoreResult:
    crash_id: str
    outcome: Outcome
    blob_key: str
    core_status: str
    queued: bool = False
    signature: str | None = None
    warning: str | None = None


def needs_analysis(report: CrashReport) -> bool:
    """A report needs central analysis when no thread has frames, or when it
    has neither a signature nor phenotypes (the node did not analyse it)."""
    has_frames = any(t.frames for t in report.threads)
    return not has_frames or (report.signature is None and not report.phenotypes)


def check_zstd_frames(path: Path) -> int:
    """Walk the zstd frames of the file at ``path`` (RFC 8878: frame and
    block headers only, nothing decompressed) and return how many there are.
    Raises InvalidCore when it is not zstd, has trailing bytes, or is cut
    short inside a frame — which a decompressing reader does not report."""
    size = path.stat().st_size
    frames = 0
    with open(path, "rb") as fh:
        def take(n: int) -> bytes:
            data = fh.read(n)
            if len(data) != n:
                raise InvalidCore("invalid-core", "the zstd stream is cut short")
            return data

        while fh.tell() < size:
            magic = int.from_bytes(take(4), "little")
            if 0x184D2A50 <= magic <= 0x184D2A5F:  # skippable frame
                fh.seek(int.from_bytes(take(4), "little"), os.SEEK_CUR)
                if fh.tell() > size:
                    raise InvalidCore("invalid-core", "the zstd stream is cut short")
                continue
            if magic != 0xFD2FB528:
                what = "not a zstd stream" if frames == 0 else "bytes after the last zstd frame"
                raise InvalidCore("invalid-core", f"{what} (bad magic at offset {fh.tell() - 4})")
            fhd = take(1)[0]
            fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
            header = (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
            header += (1 if single else 0, 2, 4, 8)[fcs_flag]
            take(header)
            while True:
                block = int.from_bytes(take(3), "little")
                kind, block_size = (block >> 1) & 3, block >> 3
                if kind == 3:
                    raise InvalidCore("invalid-core", "a reserved zstd block type")
                fh.seek(1 if kind == 1 else block_size, os.SEEK_CUR)
                if fh.tell() > size:
                    raise InvalidCore("invalid-core", "the zstd stream is cut short")
                if block & 1:
                    break
            if checksum:
                take(4)
            frames += 1
    if frames == 0:
        raise InvalidCore("invalid-core", "not a zstd stream (no frame)")
    return frames


ELF_MAGIC = b"\x7fELF"


def decompress_checked(src: Path, dst: Path | None, limit: int, *, max_ratio: int | None = None,
                       ratio_min_bytes: int = 0) -> int:
    """Decompress the zstd stream at ``src`` (one or more frames) in bounded
    memory, into ``dst`` — or, when ``dst`` is None, into a byte counter
    (nothing written) — and return its size in bytes. Raises InvalidCore when
    it is not a complete zstd stream (:func:`check_zstd_frames`), does not
    decompress, does not start with the ELF magic (status 422), grows beyond
    ``limit`` bytes, or — a zstd bomb — grows beyond both ``ratio_min_bytes``
    and ``max_ratio`` times the compressed size. On error ``dst`` is removed."""
    check_zstd_frames(src)
    compressed = src.stat().st_size
    ratio_cap = None if max_ratio is None else max(ratio_min_bytes, max_ratio * compressed)
    cap = limit if ratio_cap is None else min(limit, ratio_cap)
    total, head = 0, b""
    out = open(dst, "wb") if dst is not None else None  # noqa: SIM115
    try:
        try:
            with open_input(src, limit=cap) as reader:
                if reader.compression != "zstd":
                    raise InvalidCore("invalid-core", "not a zstd stream")
                while chunk := reader.read(1 << 20):
                    if len(head) < len(ELF_MAGIC):
                        head += chunk[:len(ELF_MAGIC) - len(head)]
                        if len(head) == len(ELF_MAGIC) and head != ELF_MAGIC:
                            raise InvalidCore("invalid-core", "not an ELF core: the "
                                              f"decompressed data starts with {head!r}, not "
                                              f"{ELF_MAGIC!r}", status=422)
                    total += len(chunk)
                    if out is not None:
                        out.write(chunk)
        except DecompressionError as exc:
            if not exc.too_large:
                raise InvalidCore("invalid-core", f"broken zstd stream: {exc.detail}") from None
            if cap == limit:
                raise InvalidCore("too-large", f"the core is larger than {limit} bytes "
                                  "once decompressed (limit max_core_bytes, "
                                  "COREEPI_MAX_CORE_BYTES)") from None
            raise InvalidCore("too-large", f"the core expands more than {max_ratio}:1 beyond "
                              f"{ratio_min_bytes} bytes once decompressed ({compressed} bytes "
                              "sent): a zstd bomb?") from None
        if total == 0:
            raise InvalidCore("invalid-core", "the zstd stream holds no data")
        if head != ELF_MAGIC:
            raise InvalidCore("invalid-core", f"not an ELF core: only {total} bytes", status=422)
    except BaseException:
        if out is not None and dst is not None:
            out.close()
            dst.unlink(missing_ok=True)
        raise
    if out is not None:
        out.close()
    return total


def merge_analysis(received: CrashReport, analysed: CrashReport) -> CrashReport:
    """The analysed report, keeping what only the node knew: identity, host
    facts, attributes, /proc context, the core's fate."""
    merged = analysed.model_copy(deep=True)
    merged.crash_id = received.crash_id
    merged.captured_at = received.captured_at or analysed.captured_at
    merged.host_id = received.host_id
    merged.boot_id = received.boot_id or analysed.boot_id
    merged.source = received.source
    merged.attributes = dict(received.attributes)
    merged.host = received.host.model_copy(deep=True)
    known = {k: v for k, v in received.process.model_dump().items()
             if v not in (None, [], {}, False)}
    merged.process = ProcessInfo.model_validate({**analysed.process.model_dump(), **known})
    if merged.signal is None:
        merged.signal = received.signal
    merged.core = received.core.model_copy(deep=True)
    merged.analysis.warnings = [*received.analysis.warnings, *analysed.analysis.warnings,
                                f"analysed centrally by coreepi {__version__}"]
    return merged


@dataclass(frozen=True)
class CoreLimits:
    """What :class:`CoreIntake` accepts besides the one decompressed-size
    limit ``max_core_bytes`` (docs/limits.md: ``COREEPI_MAX_CORE_BYTES``, else
    what fits the scratch dir; :func:`~coreepi.parse.open_input.max_decompressed_bytes`).
    The server's settings (:class:`coreepi.serve.config.ServeConfig`) give
    them: ``max_core_ratio`` / ``core_ratio_min_bytes``, the zstd-bomb rule
    (refused beyond both ``core_ratio_min_bytes`` and ``max_core_ratio``
    times the upload's size; None: no ratio rule)."""

    max_core_ratio: int | None
    core_ratio_min_bytes: int


class CoreIntake:
    """Receives cores for known crashes (one instance per app). A core that
    needs central analysis is queued (:meth:`~coreepi.store.JobQueue.enqueue_analysis`)
    in the transaction that records it, and ``wake`` is set for in-process
    workers; :class:`~coreepi.serve.analysis.AnalysisWorker` does the rest."""

    def __init__(self, store: Store, limits: CoreLimits, tmp_dir: Path,
                 wake: threading.Event | None = None) -> None:
        self.store = store
        self.limits = limits
        self.tmp_dir = tmp_dir
        self.wake = wake
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, crash_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(crash_id, threading.Lock())

    def accept(self, crash_id: str, upload: Path, sha256: str, size: int) -> CoreResult:
        """Handle the complete upload at ``upload`` (zstd, ``size`` bytes,
        SHA-256 ``sha256``), which this call deletes. Raises InvalidCore."""
        try:
            with self._lock(crash_id):
                return self._accept(crash_id, upload, sha256, size)
        finally:
            upload.unlink(missing_ok=True)
            with self._locks_guard:
                lock = self._locks.get(crash_id)
                if lock is not None and not lock.locked():
                    del self._locks[crash_id]

    def _accept(self, crash_id: str, upload: Path, sha256: str, size: int) -> CoreResult:
        report = self.store.get_report(crash_id)
        if report is None:
            return CoreResult(crash_id, Outcome.UNKNOWN, sha256, "")
        receipt = self.store.receipt(crash_id)
        if receipt is not None and receipt.core_key is not None:
            same = hmac.compare_digest(receipt.core_key, sha256)
            return CoreResult(crash_id, Outcome.DUPLICATE if same else Outcome.CONFLICT,
                              receipt.core_key, "stored",
                              signature=report.signature.signature if report.signature else None)
        config = self.limits
        # validate (zstd, ELF, size, ratio) into a counter: no disk written
        # the limit of the directory the analysis decompresses it into
        try:
            plain_size = decompress_checked(upload, None, max_decompressed_bytes(self.tmp_dir),
                                            max_ratio=config.max_core_ratio,
                                            ratio_min_bytes=config.core_ratio_min_bytes)
        except InvalidCore as exc:
            if exc.status != 400:  # a verdict on the core; a broken upload (400) writes nothing
                self._refused(report, exc)
            raise
        key = self.store.put_blob(upload, sha256)  # durable before anything names it
        queued = needs_analysis(report)
        report.core.stored = True
        report.core.blob_key = key
        report.core.compressed_size_bytes = size
        if report.core.size_bytes is None:
            report.core.size_bytes = plain_size
        if report.core.sha256 is None:
            report.core.sha256 = key
        report.core.dropped_reason = None
        digest = receipt.content_sha256 if receipt is not None else content_sha256(report)
        with self.store.transaction():
            self.store.update_crash(_record(report, CoreStatus.STORED))
            self.store.add_receipt(Receipt(crash_id, digest, key,
                                           receipt.received_at if receipt else datetime.now(UTC)))
            if queued:
                self.store.enqueue_analysis(crash_id, key)
        if queued and self.wake is not None:
            self.wake.set()
        return CoreResult(crash_id, Outcome.CREATED, key, str(CoreStatus.STORED), queued=queued,
                          signature=report.signature.signature if report.signature else None)

    def _refused(self, report: CrashReport, exc: InvalidCore) -> None:
        """Record on the crash (no core stored yet) why its core was refused,
        in the words the uploader gets: ``list`` says unreadable (not a core)
        or missing (too large), ``info`` and ``dump`` the reason, instead of
        the node's "stored" that the server never made true. Only for a
        verdict on the core itself (422 not ELF, 413 too large once
        decompressed): a broken upload (not zstd, cut short) may be sent
        again and leaves the crash as it was. A core accepted later replaces
        the record."""
        reason = f"{exc} ({exc.reason})"
        report.core.stored = False
        report.core.blob_key = None
        report.core.dropped_reason = reason
        status = CoreStatus.MISSING if exc.reason == "too-large" else CoreStatus.UNREADABLE
        with self.store.transaction():
            self.store.update_crash(_record(report, status, reason))


def spool_file(tmp_dir: Path) -> tuple[Any, Path]:
    """A new temporary file for an upload in ``tmp_dir``: (binary file object, path)."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".zst", dir=tmp_dir)
    return os.fdopen(fd, "wb"), Path(name)
