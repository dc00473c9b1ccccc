"""Collectors' prefixes of kernel log lines, normalised to the console form.

A kernel line reaches coreepi behind whatever wrote it down: syslog and the
journal (``Mar 19 10:32:12 host kernel: ``, ISO-8601 times), ``dmesg -T``
(``[Sun Feb 23 16:24:18 2025] ``), ``dmesg -x`` (``kern  :warn  : ``),
``dmesg --time-format iso``, ``/dev/kmsg`` records
(``6,3964,206764307,-;``), a collector's date or a paste's indentation in
front of a console stamp. :func:`normalize_line` turns each into the
console form (``[  123.456789] message``) the scanner's report windows are
written for (:mod:`coreepi.parse.kernel.scan`). Times are not read here:
the report's own line keeps them (:mod:`coreepi.parse.kernel.oops`).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["NO_UPTIME", "normalize_line"]

_CONSOLE_STAMP_RE: Final = re.compile(r"^(?:<[0-9]+>)?\[ *[0-9]+\.[0-9]+\]")
# Prefixes added by log collectors, normalised to the console form.
_SYSLOG_RE: Final = re.compile(
    r"^(?:[A-Z][a-z]{2} [ 0-9]?[0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,]+(?:Z|[+-][0-9:]+)?) (\S+) kernel: "
)
_MONOTONIC_RE: Final = re.compile(r"^(\[ *[0-9]+\.[0-9]+\]) \S+ kernel: ")
_DMESG_T_RE: Final = re.compile(r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]?[0-9] [0-9:]{8} [0-9]{4}\] ")
_DMESG_X_RE: Final = re.compile(r"^[a-z]+ *:[a-z]+ *: ")
# dmesg --time-format iso ("2025-02-23T16:24:18,123456+00:00 "), alone or after
# dmesg -x's facility/level; the zone is required so a bare date is not taken.
_ISO_RE: Final = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2}) "
)
# a /dev/kmsg record: "level,sequence,microseconds since boot,flags;message"
_KMSG_RE: Final = re.compile(r"^[0-9]{1,3},[0-9]+,([0-9]+),[^;]{0,16};")
# The console prefix given to lines whose prefix has a wall clock but no
# uptime (dmesg -T, ISO times), so report windows and unreliable-frame
# stripping work as on a console log. Internal only: the report's line and
# times are read from the raw line (coreepi.parse.kernel.oops).
NO_UPTIME: Final = "[    0.000000] "
# Debris before a console timestamp: a collector's date ("2016-09-28
# 02:12:08 [810422.485203] …"), a paste's indentation or line number.
_LEADING_RE: Final = re.compile(
    r"^(?:[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.,]+ |\s+|[0-9]+\t)(?=(?:<[0-9]+>)?\[ *[0-9]+\.[0-9]+\])"
)



def normalize_line(line: str) -> str:
    """Strip a syslog / journal / ``dmesg -x`` prefix; turn a ``/dev/kmsg``
    record into a console line, and a ``dmesg -T`` or ISO-8601 (``dmesg
    --time-format iso``) prefix into :data:`NO_UPTIME`, so report windows
    work."""
    if "kernel: " in line:
        match = _SYSLOG_RE.match(line)
        if match is not None:
            rest = line[match.end():]
            return rest if _CONSOLE_STAMP_RE.match(rest) else NO_UPTIME + rest
        match = _MONOTONIC_RE.match(line)
        if match is not None:
            return match.group(1) + " " + line[match.end():]
    if line.startswith("[") and line[1:2].isupper():  # "[Mon …": dmesg -T
        match = _DMESG_T_RE.match(line)
        if match is not None:
            return NO_UPTIME + line[match.end():]
    elif line[:1].islower():
        match = _DMESG_X_RE.match(line)
        if match is not None:
            rest = line[match.end():]
            return normalize_line(rest) if rest[:1].isdigit() else rest
    elif line[:1].isspace() or line[:1].isdigit():
        match = _LEADING_RE.match(line)
        if match is not None:
            return line[match.end():]
        if line[:1].isdigit():
            return _digit_prefix(line)
    return line


def _digit_prefix(line: str) -> str:
    """A line starting with a digit: a /dev/kmsg record becomes a console
    line with its uptime, an ISO-timed line gets :data:`NO_UPTIME`."""
    match = _KMSG_RE.match(line)
    if match is not None:
        usec = int(match.group(1))
        return f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] " + line[match.end():]
    match = _ISO_RE.match(line)
    if match is not None:
        return NO_UPTIME + line[match.end():]
    return line
