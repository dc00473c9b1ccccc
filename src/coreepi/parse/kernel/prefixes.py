"""Collectors' prefixes of kernel log lines: one reader, two views.

A kernel line reaches coreepi behind whatever wrote it down: syslog and the
journal (``Mar 19 10:32:12 host kernel: ``, ISO-8601 times), ``dmesg -T``
(``[Sun Feb 23 16:24:18 2025] ``), ``dmesg -x`` (``kern  :warn  : ``),
``dmesg --time-format iso``, ``/dev/kmsg`` records
(``6,3964,206764307,-;``), ``<4>`` levels, a collector's date or a paste's
indentation in front of a console stamp — and often two of them stacked: a
collector's wall clock over the kernel's own printk time
(``2025-02-23T16:24:18.123456+00:00 node17 kernel: [  292.658378] …``,
``[Sun Feb 23 16:24:18 2025] [  292.658378] …``).

This module is the one place that knows those prefixes (the kernel parser
and the telemetry parsers both read lines through it; telemetry imports
kernel, never the other way). One reader, two views:

* :func:`split_prefix` -> :class:`LogLine`: the message without any prefix,
  its times (the outer wall clock as ``ts``, the printk stamp as
  ``uptime``) and the syslog program: for the telemetry parsers and the
  times of a kernel report (:mod:`coreepi.parse.kernel.oops`).
* :func:`normalize_line` -> the console form (``[  123.456789] message``)
  that the scanner's report windows are written for
  (:mod:`coreepi.parse.kernel.scan`); a line whose prefix has a wall clock
  but no uptime gets :data:`NO_UPTIME`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

__all__ = ["MAX_MESSAGE_CHARS", "MAX_RAW_CHARS", "MONTHS", "NO_UPTIME", "LogLine", "normalize_line",
           "split_prefix"]

MAX_RAW_CHARS: Final = 4096  # LogLine.raw cap (TelemetryEvent.raw's)
MAX_MESSAGE_CHARS: Final = 8192  # longer lines are cut before their prefix is read

# The console prefix given to lines whose prefix has a wall clock but no
# uptime (dmesg -T, ISO times), so report windows and unreliable-frame
# stripping work as on a console log. Internal to the kernel view: a
# report's times are read with split_prefix from the raw line.
NO_UPTIME: Final = "[    0.000000] "

# ISO-8601 (journal -o short-iso, RFC 3339, dmesg --time-format iso's comma)
# and dmesg -T's ctime, each written once: in _PREFIX, and alone to read the
# fields of the text _PREFIX captured.
_ISO_TIME: Final = r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(?P<zone>Z|[+-]\d{2}:?\d{2})?"
_CTIME: Final = r"(?:[A-Z][a-z]{2} )?([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))? (\d{4})"


def _uncaptured(pattern: str) -> str:
    """``pattern`` with its plain groups made non-capturing: inside
    _PREFIX only the whole time is kept, and every capture costs each match."""
    return re.sub(r"(?<!\\)\((?!\?)", "(?:", pattern)


_TAG: Final = r"kernel|[\w.\-/@]{1,64}\[\d{1,10}\]|mcelog|rasdaemon"
# The whole prefix grammar, outermost first; every part is optional, so the
# first (greedy) path always matches and nothing backtracks into an earlier
# choice: the reader is one C-level match per line.
_PREFIX: Final = re.compile(
    # /dev/kmsg "level,sequence,microseconds since boot,flags;", or dmesg -x fields
    r"(?:(?P<kmsg>\d{1,3},\d+,(?P<usec>\d+),[^;]{0,16};)|(?P<dx>[a-z]{2,8} *:[a-z]{2,8} *: ))?"
    # a level, then a paste's indentation or line number before a console stamp
    r"(?P<lvl><\d{1,3}>)?(?P<debris>(?:\s+|\d+\t)(?=(?:<\d{1,3}>)?\[ *\d+\.\d+\]))?"
    # a collector's time: ISO-8601, dmesg -T, BSD syslog, or a console stamp
    # (journalctl -o short-monotonic puts its host tag after one)
    r"(?P<time>(?P<iso>" + _uncaptured(_ISO_TIME) + r") +|\[(?P<dmt>" + _uncaptured(_CTIME) + r")\] ?"
    r"|(?P<bsd>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?) +"
    r"|(?P<mono>\[ *(?P<mup>\d{1,10}\.\d{1,9})\])(?:\[ *[CT]\d{1,7}\])? ?)?"
    # after a time: "host tag: " ("kernel", or a program with a pid, so that
    # "EDAC MC0: " is never taken for one); the tag alone after a wall clock
    r"(?(time)(?:\S{1,255} (?P<tag>" + _TAG + r"): |(?(mono)(?!)|(?P<tag2>" + _TAG + r"): )))?"
    # the printk stamp under the collector's prefix (with the caller id of
    # CONFIG_PRINTK_CALLER), unless a kmsg record or a leading stamp gave the uptime
    r"(?P<lvl2><\d{1,3}>)?(?(kmsg)|(?(mono)|(?P<stamp>\[ *(?P<up>\d{1,10}\.\d{1,9})\])(?:\[ *[CT]\d{1,7}\])? ?))?"
)
_ISO: Final = re.compile(_ISO_TIME)
_DMESG_T: Final = re.compile(_CTIME)
#: English month abbreviations (dmesg -T, BSD syslog) by their number 1-12
MONTHS: Final = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


@dataclass(frozen=True, slots=True)
class LogLine:
    """One input line. ``message`` is the text without the collector's and
    the console's prefixes; ``raw`` the line as read (capped at
    :data:`MAX_RAW_CHARS`); ``number`` its 1-based line number. ``ts`` is
    the UTC wall clock of the prefix (when it has a year), ``uptime`` the
    seconds since boot of a printk stamp or kmsg record."""

    number: int
    raw: str
    message: str
    ts: datetime | None = None
    uptime: float | None = None
    program: str | None = None  # syslog tag without pid: "kernel", "mcelog" …
    wallclock_text: str | None = None  # a time without a year (BSD syslog)


def _fraction(text: str | None) -> int:
    return int((text or "0")[:6].ljust(6, "0"))


def _tz(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)))


def _wall_clock(found: re.Match[str]) -> datetime | None:
    """The UTC time of an ISO or ``dmesg -T`` prefix; None for BSD syslog
    (no year) or a date that does not exist."""
    iso, dmesg_t = found.group("iso"), found.group("dmt")
    try:
        if iso is not None:
            match = _ISO.match(iso)
            assert match is not None  # the same shape as in _PREFIX
            y, mo, d, h, mi, s, frac, zone = match.groups()
            when = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), _fraction(frac), tzinfo=_tz(zone))
            return when.astimezone(UTC)
        if dmesg_t is not None:
            match = _DMESG_T.match(dmesg_t)
            assert match is not None
            mon, day, h, mi, s, frac, year = match.groups()
            return datetime(int(year), MONTHS[mon], int(day), int(h), int(mi), int(s), _fraction(frac),
                            tzinfo=UTC)
    except (KeyError, ValueError, OverflowError):
        return None
    return None


def _uptime(found: re.Match[str]) -> float | None:
    if found.group("usec") is not None:
        return int(found.group("usec")) / 1e6
    up = found.group("mup") or found.group("up")
    return float(up) if up is not None else None


def _program(found: re.Match[str]) -> str | None:
    tag = found.group("tag") or found.group("tag2")
    return tag.split("[", 1)[0] if tag is not None else None


def split_prefix(number: int, raw: str) -> LogLine:
    """Take a line's prefixes off and read its times. Never raises.

    Understood: ``/dev/kmsg`` records (``6,3964,206764307,-;msg``), ``dmesg
    -x`` (``kern  :warn  : ``), ``<4>`` levels, ISO-8601 times (journal
    ``-o short-iso``, rsyslog RFC 3339, ``dmesg --time-format iso`` with its
    comma), ``dmesg -T`` (``[Sun Feb 23 16:24:18 2025]``), BSD syslog
    (``Mar 19 10:32:12 host kernel:``; no year, so no ``ts``), console
    ``[  123.456789]`` with an optional ``[ T123]`` caller, the ``host
    tag:`` that follows a syslog time, a paste's indentation before a
    console stamp, and a printk stamp under any of the collector's times
    (both times kept). Wall clocks without a zone are taken as UTC
    (``dmesg -T`` prints the host's local time: set TZ=UTC).
    """
    text = raw[:MAX_MESSAGE_CHARS].rstrip("\r")
    found = _PREFIX.match(text)
    assert found is not None  # every part is optional
    bsd = found.group("bsd")
    return LogLine(number, raw[:MAX_RAW_CHARS], text[found.end():], _wall_clock(found), _uptime(found),
                   _program(found), bsd.strip() if bsd is not None else None)


def normalize_line(line: str) -> str:
    """``line`` in the console form: a /dev/kmsg record becomes ``[uptime]
    message``; a collector's prefix over a printk stamp is stripped down to
    the stamp (also under another program's tag: ``dmesg -w | logger``
    relays kernel lines); a wall-clock prefix without one (``dmesg -T``,
    ISO with a zone, a syslog time with its ``host kernel:``) becomes
    :data:`NO_UPTIME`; ``dmesg -x`` fields and a paste's indentation go.
    Other programs' lines without a printk stamp, and a bare date with
    neither zone nor tag (it may be the message's own text), are left as
    they are."""
    first = line[:1]
    if first == "[" and not line[1:2].isupper() and "kernel: " not in line:
        return line  # a console line: the scanner's common case, kept cheap
    if not (first.isalnum() or first.isspace() or first in "[<"):
        return line
    found = _PREFIX.match(line)
    end = found.end() if found is not None else 0
    if found is None or not end:
        return line
    # start() is -1 for a part that is not there
    if found.start("kmsg") >= 0:
        usec = int(found.group("usec"))
        return f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] " + line[found.end("kmsg"):]
    tag = _program(found)
    if tag is not None and tag != "kernel" and found.start("stamp") < 0:
        return line  # another program's message; with a printk stamp it is relayed kernel output
    mono = found.start("mono")
    if mono >= 0:
        if tag is not None:  # "[ 1.2] host kernel: msg"
            return line[mono: found.end("mono")] + " " + line[end:]
        level = found.start("lvl")
        return line[level if level >= 0 and found.start("debris") < 0 else mono:]
    stamp = found.start("stamp")
    if stamp >= 0:
        level = found.start("lvl2")
        return line[level if level >= 0 else stamp:]
    if found.start("time") >= 0 and (tag is not None or found.start("zone") >= 0 or found.start("dmt") >= 0):
        return NO_UPTIME + line[end:]
    if found.start("dx") >= 0:
        return line[end:]
    return line
