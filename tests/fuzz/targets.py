"""The fuzz targets: one per parser of untrusted bytes, with its property.

Each target is ``run(data: bytes) -> None``: it feeds ``data`` to one parser
the way coreepi does and lets through only the parser's documented clear
error (:data:`Target.allowed`); anything else — another exception, a
traceback-worthy bug — propagates, and the fuzzer (:mod:`run_fuzz`, atheris)
or the corpus replay (``test_fuzz_corpus.py``) reports it. Memory and time
per input are bounded by the fuzzer (``-rss_limit_mb``, ``-timeout``).

Targets and what they feed:

- ``elf_notes``: the bytes as the PT_NOTE segment of a minimal x86-64 ELF
  core (or, when they start with ``\\x7fELF``, as the whole file) through
  ``CoreFile`` + ``read_notes``;
- ``hs_err``: ``looks_like_hs_err`` and ``parse_hs_err`` of the bytes;
- ``kernel_log``: ``parse_kernel_log`` of the bytes (at most 20 reports);
- ``telemetry``: ``looks_like_telemetry`` and every ``parse_telemetry`` event;
- ``sidecar``: ``read_sidecar`` of the bytes as a file;
- ``fleet_csv``: the bytes as ``hosts.csv``, ``exposure.csv`` and
  ``telemetry.csv`` (``read_hosts``, ``read_exposure``, ``read_telemetry``);
- ``api_body``: the bytes as the body of ``POST /api/v1/crashes`` and of
  ``POST /api/v1/heartbeats``: validated as the routes do, then the routes'
  own checks (crash id, time range, attribute limits: ApiError, a 4xx).
"""

from __future__ import annotations

import atexit
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from coreepi.errors import InputError

__all__ = ["TARGETS", "Target"]

def _scratch() -> Path:
    """Where inputs are written as files: ``$COREEPI_FUZZ_SCRATCH`` (the
    caller removes it), else a temporary directory removed at exit."""
    given = os.environ.get("COREEPI_FUZZ_SCRATCH")
    if given:
        return Path(given)
    made = Path(tempfile.mkdtemp(prefix="coreepi-fuzz-"))
    atexit.register(shutil.rmtree, made, True)
    return made


_SCRATCH = _scratch()


@dataclass(frozen=True)
class Target:
    """``run(data)``; ``allowed``: the exceptions that are the parser's clear error."""

    name: str
    run: Callable[[bytes], None]
    allowed: tuple[type[BaseException], ...]


def _file(data: bytes, name: str) -> Path:
    path = _SCRATCH / name
    path.write_bytes(data)
    return path


def _core_with_notes(notes: bytes) -> bytes:
    """An ELF64 x86-64 ET_CORE whose only program header is PT_NOTE over ``notes``."""
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 4, 62, 1, 0,
                       64, 0, 0, 64, 56, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 4, 0, 120, 0, 0, len(notes), 0, 4)
    return ehdr + phdr + notes


def _elf_notes(data: bytes) -> None:
    from coreepi.parse.elf.corefile import CoreFile
    from coreepi.parse.elf.notes import read_notes

    raw = data if data.startswith(b"\x7fELF") else _core_with_notes(data)
    with CoreFile(_file(raw, "core")) as core:
        read_notes(core)


def _hs_err(data: bytes) -> None:
    from coreepi.parse.jvm.hs_err import looks_like_hs_err, parse_hs_err

    looks_like_hs_err(data)
    report = parse_hs_err(data, name="fuzz")
    if report is not None:
        report.model_dump_json()


def _kernel_log(data: bytes) -> None:
    from coreepi.parse.kernel.oops import parse_kernel_log

    for report in parse_kernel_log(data, name="fuzz", max_reports=20):
        report.model_dump_json()


def _telemetry(data: bytes) -> None:
    from coreepi.parse.telemetry.logs import looks_like_telemetry, parse_telemetry

    looks_like_telemetry(data)
    for event in parse_telemetry(_file(data, "telemetry.log"), host_id="h", name="fuzz"):
        event.model_dump_json()


def _sidecar(data: bytes) -> None:
    from coreepi.ingest.fleet import read_sidecar

    read_sidecar(_file(data, "core.1.json"))


def _fleet_csv(data: bytes) -> None:
    from coreepi.ingest.fleet_tables import read_exposure, read_hosts, read_telemetry
    from coreepi.model.fleet import Rejections

    for name, reader in (("hosts.csv", read_hosts), ("exposure.csv", read_exposure),
                         ("telemetry.csv", read_telemetry)):
        rejections = Rejections()
        for _ in reader(_file(data, name), rejections):  # type: ignore[operator]
            pass


def _api_body(data: bytes) -> None:
    from coreepi.model.heartbeat import Heartbeat
    from coreepi.model.report import CrashReport
    from coreepi.serve.routes.ingest import (
        check_accepted_time,
        check_attribute_limits,
        checked_crash_id,
    )

    skew = 86400.0
    try:
        report = CrashReport.model_validate_json(data)
    except ValidationError as exc:  # the route's 422 reads the first error
        exc.errors(include_url=False, include_input=False)[0]["loc"]
    else:
        checked_crash_id(report.crash_id)
        check_accepted_time(report.captured_at, skew, "captured_at")
        check_attribute_limits(report.attributes, "attributes")
        report.model_dump_json()
    try:
        hb = Heartbeat.model_validate_json(data)
    except ValidationError as exc:  # FastAPI's 422 lists the errors
        exc.errors(include_url=False)
        return
    check_accepted_time(hb.start, skew, "start")
    check_accepted_time(hb.end, skew, "end")
    check_attribute_limits(hb.load, "load")
    if hb.facts is not None:
        check_attribute_limits(hb.facts.extra, "facts.extra")
        check_attribute_limits(hb.facts.k8s_labels, "facts.k8s_labels")
    hb.model_dump_json()


def _targets() -> dict[str, Target]:
    from coreepi.ingest.fleet import SidecarError
    from coreepi.serve.errors import ApiError

    return {t.name: t for t in (
        Target("elf_notes", _elf_notes, (InputError,)),
        Target("hs_err", _hs_err, ()),
        Target("kernel_log", _kernel_log, ()),
        Target("telemetry", _telemetry, (InputError,)),
        Target("sidecar", _sidecar, (SidecarError,)),
        Target("fleet_csv", _fleet_csv, (InputError,)),
        Target("api_body", _api_body, (ApiError,)),
    )}


TARGETS = _targets()
"""Every target by name."""

CORPUS = Path(__file__).resolve().parent / "corpus"
"""``corpus/<target>/``: the seed corpus (and what fuzzing added worth keeping)."""
CRASHES = Path(__file__).resolve().parent / "crashes"
"""``crashes/<target>/``: inputs that once broke a parser (regression tests)."""

os.environ.setdefault("COREEPI_MAX_CORE_BYTES", str(64 << 20))  # a fuzzed bomb stays small
