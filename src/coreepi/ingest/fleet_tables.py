"""Read a fleet directory's tables: ``hosts.csv``, ``exposure.csv``,
``telemetry.jsonl`` (layout in ``docs/fleet-directory.md``;
:mod:`coreepi.ingest.tables` loads what is read into the store).

Every reader streams its file and never stops at a bad row: a malformed row
becomes a :class:`Rejection` naming file and line, collected in a
:class:`Rejections` (which counts them by category), and the rest is read. A
row whose host id cannot name a host (:func:`coreepi.ingest.fleet.host_id_problem`)
is a ``bad-host-id`` rejection. Nothing here touches the store.
"""

from __future__ import annotations

import bisect
import csv
import json
import os
import re
from array import array
from collections.abc import Container, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coreepi.ingest.fleet import BAD_HOST_ID, host_id_problem
from coreepi.model.events import EventKind, TelemetryEvent, event_id
from coreepi.model.fleet import ExposureInterval, HostRow, Rejections, parse_utc
from coreepi.model.limits import check_time, trim_attributes

__all__ = ["read_exposure", "read_hosts", "read_telemetry"]


def _unusable_host(path: Path, line: int, host_id: str | None, rejections: Rejections,
                   known_hosts: Container[str] | None = None,
                   missing: str = "empty host_id") -> bool:
    """Whether row ``line`` of ``path`` names no host it may: ``host_id``
    empty (None; rejected with the words ``missing``), one that cannot name a
    host (:func:`~coreepi.ingest.fleet.host_id_problem`), or one not among
    ``known_hosts`` (when given). If so, the row's rejection is added."""
    if host_id is None:
        rejections.add(path, line, "missing-value", missing)
        return True
    problem = host_id_problem(host_id)
    if problem is not None:
        rejections.add(path, line, BAD_HOST_ID, f"host_id {host_id!r} {problem}; row not ingested")
        return True
    if known_hosts is not None and host_id not in known_hosts:
        rejections.add(path, line, "unknown-host", f"unknown host_id {host_id!r} (not in hosts)")
        return True
    return False


# --------------------------------------------------------------------------
# values


def _cell(value: str | None) -> str | None:
    """A CSV cell with surrounding blanks removed; empty means unknown (None)."""
    if value is None:
        return None
    value = value.strip()
    return value or None


# --------------------------------------------------------------------------
# hosts.csv and exposure.csv


#: what ``errors="surrogateescape"`` makes of bytes that are not UTF-8
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


class _Lines:
    """The physical lines of a CSV file as the csv module reads them, with the
    lines of the record being read kept (``taken``) so that a record broken
    by an unbalanced quote can be given back (:meth:`give_back`) and re-read
    line by line: one stray quote costs its own line, not the lines after it."""

    def __init__(self, fh: Iterator[str]) -> None:
        self._fh = fh
        self._back: list[str] = []
        self.taken: list[str] = []
        self.line = 0  # physical lines handed out so far

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        text = self._back.pop() if self._back else next(self._fh)
        self.taken.append(text)
        self.line += 1
        return text

    def give_back(self, lines: list[str]) -> None:
        self._back.extend(reversed(lines))
        self.line -= len(lines)


def _csv_rows(
    path: Path, required: tuple[str, ...], rejections: Rejections
) -> Iterator[tuple[int, dict[str, str | None]]]:
    """(line, row) for each well-formed row of a CSV file with a header.
    A missing file or column is one rejection for the whole file."""
    try:
        # undecodable bytes become lone surrogates, so that one bad byte rejects
        # its row (below), not the whole file
        fh = open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")
    except OSError as exc:
        rejections.add(path, None, "unreadable-file", f"cannot read: {exc.strerror}")
        return
    with fh:
        lines = _Lines(fh)
        # strict: a quote left open to the end of the file is an error, not one
        # last row that silently swallows every line after it
        reader = csv.reader(lines, strict=True)
        try:
            header = next(reader, None)
        except (csv.Error, UnicodeDecodeError) as exc:
            rejections.add(path, 1, "malformed-row", f"unreadable header: {exc}")
            return
        if header is None:
            rejections.add(path, None, "missing-column", "empty file (no header line)")
            return
        if any(_NOT_UTF8.search(h) for h in header):
            rejections.add(path, 1, "malformed-row", "header line is not UTF-8 text")
            return
        names = [h.strip() for h in header]
        missing = [c for c in required if c not in names]
        if missing:
            rejections.add(
                path, 1, "missing-column",
                f"header lacks column(s) {', '.join(missing)} (has: {', '.join(names)})",
            )
            return
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes or "" in names:
            rejections.add(path, 1, "missing-column",
                           f"header has duplicate or empty column names: {dupes or ['']}")
            return
        while True:
            start_line = lines.line + 1
            lines.taken = []
            try:
                fields: list[str] | None = next(reader)
                problem = (None if len(fields) == len(names) or not any(f.strip() for f in fields)
                           else f"expected {len(names)} fields, found {len(fields)}")
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as exc:
                fields, problem = None, f"malformed CSV: {exc}"
            if problem is not None:
                if len(lines.taken) > 1:  # a quote ran over lines: re-read them on their own
                    lines.give_back(lines.taken[1:])
                    reader = csv.reader(lines, strict=True)
                    problem += f" (a quoted field opened on line {start_line} is not closed)"
                rejections.add(path, start_line, "malformed-row", problem)
                continue
            assert fields is not None
            if not fields or all(not f.strip() for f in fields):
                continue  # blank line
            if any(_NOT_UTF8.search(f) for f in fields):
                rejections.add(path, start_line, "malformed-row", "row is not UTF-8 text")
                continue
            yield start_line, {n: _cell(v) for n, v in zip(names, fields, strict=True)}


def read_hosts(path: str | os.PathLike[str], rejections: Rejections) -> Iterator[HostRow]:
    """The hosts of ``hosts.csv``: a ``host_id`` column, then one column per
    static attribute. Rejects rows without a host_id and repeated host ids."""
    path = Path(path)
    first_seen: dict[str, int] = {}
    for line, row in _csv_rows(path, ("host_id",), rejections):
        host_id = row.pop("host_id")
        if _unusable_host(path, line, host_id, rejections):
            continue
        assert host_id is not None
        if host_id in first_seen:
            rejections.add(path, line, "duplicate-host",
                           f"host_id {host_id!r} already given on line {first_seen[host_id]}")
            continue
        first_seen[host_id] = line
        yield HostRow(host_id, _trimmed(path, line, row, rejections), line)


def _trimmed(path: Path, line: int | None, attrs: dict[str, Any],
             rejections: Rejections) -> dict[str, Any]:
    """``attrs`` within the attribute limits; the keys dropped are counted in
    one kept-with-a-problem rejection naming the limit (the row itself counts)."""
    kept, dropped, limit = trim_attributes(attrs)
    if dropped:
        rejections.add(path, line, "attribute-limit",
                       f"{dropped} of {len(attrs)} attributes dropped (limit {limit}, see "
                       "docs/limits.md); the row is kept", action="kept")
    return kept


class _Intervals:
    """Per host, the intervals seen so far, as sorted arrays of epoch
    microseconds (16 bytes per interval, so 10M intervals fit in memory)."""

    def __init__(self) -> None:
        self._by_host: dict[str, tuple[array[int], array[int], array[int]]] = {}

    def overlapping(self, host: str, start: int, end: int) -> int | None:
        """The line of an interval of ``host`` overlapping [start, end), if any."""
        starts, ends, lines = self._by_host.get(host, (array("q"), array("q"), array("q")))
        i = bisect.bisect_right(starts, start)
        if i > 0 and ends[i - 1] > start:
            return lines[i - 1]
        if i < len(starts) and starts[i] < end:
            return lines[i]
        return None

    def add(self, host: str, start: int, end: int, line: int) -> None:
        starts, ends, lines = self._by_host.setdefault(host, (array("q"), array("q"), array("q")))
        i = bisect.bisect_right(starts, start)
        starts.insert(i, start)
        ends.insert(i, end)
        lines.insert(i, line)


def _us(t: datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def read_exposure(
    path: str | os.PathLike[str],
    rejections: Rejections,
    known_hosts: Container[str] | None = None,
) -> Iterator[ExposureInterval]:
    """The intervals of ``exposure.csv`` (``host_id, start, end`` + attribute
    overrides). Rejects bad timestamps, ``end <= start``, hosts not in
    ``known_hosts`` (when given) and an interval overlapping an earlier one of
    the same host (the earlier one is kept)."""
    path = Path(path)
    seen = _Intervals()
    for line, row in _csv_rows(path, ("host_id", "start", "end"), rejections):
        host_id = row.pop("host_id")
        raw_start, raw_end = row.pop("start"), row.pop("end")
        if _unusable_host(path, line, host_id, rejections, known_hosts):
            continue
        assert host_id is not None
        try:
            start = check_time(parse_utc(raw_start or ""), "start")
            end = check_time(parse_utc(raw_end or ""), "end")
        except ValueError as exc:
            rejections.add(path, line, "bad-timestamp", str(exc))
            continue
        if end <= start:
            rejections.add(path, line, "end-before-start",
                           f"end {end.isoformat()} is not after start {start.isoformat()}")
            continue
        s, e = _us(start), _us(end)
        other = seen.overlapping(host_id, s, e)
        if other is not None:
            rejections.add(path, line, "overlap",
                           f"interval of host {host_id!r} overlaps the one on line {other}")
            continue
        seen.add(host_id, s, e, line)
        attrs = _trimmed(path, line, {k: v for k, v in row.items() if v is not None}, rejections)
        yield ExposureInterval(host_id, start, end, attrs, line)


# --------------------------------------------------------------------------
# telemetry.jsonl

_EVENT_FIELDS = set(TelemetryEvent.model_fields)


def read_telemetry(
    path: str | os.PathLike[str],
    rejections: Rejections,
    known_hosts: Container[str] | None = None,
) -> Iterator[TelemetryEvent]:
    """Events of ``telemetry.jsonl``, one JSON object per line with at least
    ``host_id``, ``ts`` and ``kind``. ``event_id`` defaults to a hash of the
    line, ``summary`` to ``"KIND on HOST"``; keys that are not fields of
    :class:`TelemetryEvent` go into ``detail``."""
    path = Path(path)
    try:
        fh = open(path, encoding="utf-8-sig", errors="surrogateescape")  # BOM-tolerant
    except OSError as exc:
        rejections.add(path, None, "unreadable-file", f"cannot read: {exc.strerror}")
        return
    kinds = ", ".join(k.value for k in EventKind)
    with fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                rejections.add(path, line, "not-json", f"not JSON: {exc.msg} (column {exc.colno})")
                continue
            except RecursionError:
                rejections.add(path, line, "not-json", "not usable JSON: nested too deeply")
                continue
            if not isinstance(obj, dict):
                rejections.add(path, line, "not-json", "not a JSON object")
                continue
            host_id = obj.get("host_id")
            if _unusable_host(path, line, host_id if isinstance(host_id, str) and host_id else None,
                              rejections, known_hosts, missing="no host_id"):
                continue
            if not isinstance(obj.get("ts"), str):
                rejections.add(path, line, "bad-timestamp", "no ts (ISO-8601 UTC)")
                continue
            try:
                ts = check_time(parse_utc(obj["ts"]), "ts")
            except ValueError as exc:
                rejections.add(path, line, "bad-timestamp", str(exc))
                continue
            if obj.get("kind") not in {k.value for k in EventKind}:
                rejections.add(path, line, "bad-value",
                               f"kind {obj.get('kind')!r} is not one of: {kinds}")
                continue
            fields = {k: v for k, v in obj.items() if k in _EVENT_FIELDS}
            extra = {k: v for k, v in obj.items() if k not in _EVENT_FIELDS}
            detail = fields.get("detail") if isinstance(fields.get("detail"), dict) else {}
            fields["detail"] = {**extra, **detail}
            fields["ts"] = ts
            fields.setdefault("event_id", event_id(host_id, ts.isoformat(), obj["kind"], text.strip()))
            fields.setdefault("summary", f"{obj['kind']} on {host_id}")
            fields.setdefault("source", f"{path}:{line}")
            try:
                yield TelemetryEvent.model_validate(fields)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                rejections.add(path, line, "bad-value", f"{where}: {first['msg']}")
