"""What every command's output does on the terminals and pipes users have:
a stdout that cannot encode "–" or "∞" (ASCII stand-ins, never an internal
error), TERM=dumb (no escape sequences), NO_COLOR (bold kept, no colour);
`report --format json` on an empty window (valid findings, crashes 0);
`inspect -` and `inspect /dev/stdin` (a core from a pipe); `telemetry` of
`journalctl -k` short lines (the syslog time read, its year said)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from clikit import cli, in_pty
from corefactory import Crash
from test_report import fill_store

from coreepi.store import open_store

GetCrash = Callable[[str], Crash]
#: what docs/cli.md promises for the characters the report uses
STAND_INS = {"\u2013": "-", "\u2022": "*", "\u221e": "inf", "\u00d7": "x", "\u2026": "..."}
NARROW = {"iso-8859-1": {"PYTHONIOENCODING": "iso-8859-1"},
          "ascii": {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0",
                    "PYTHONUTF8": "0"}}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("clioutput") / "data"
    with open_store(d) as store:
        fill_store(store)
    return d


def raw(args: list[str], env: dict[str, str], stdin: bytes | None = None
        ) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("COREEPI_", "LC_", "PYTHONIO"))}
    return subprocess.run([sys.executable, "-m", "coreepi", *args], capture_output=True,
                          env=base | env, input=stdin, timeout=300, check=False)


@pytest.mark.parametrize("encoding", sorted(NARROW))
def test_a_narrow_encoding_gets_ascii_stand_ins(encoding: str, data_dir: Path,
                                                get_crash: GetCrash) -> None:
    env = NARROW[encoding]
    report = raw(["report", "--no-pager", "--details", "--data-dir", str(data_dir)], env)
    assert report.returncode == 0, report.stderr
    text = report.stdout.decode(encoding)  # strict: every byte is of that encoding
    # the stand-ins, not "?", for what the report says with "–" and "•"
    utf8 = raw(["report", "--no-pager", "--details", "--data-dir", str(data_dir)],
               {"PYTHONIOENCODING": "utf-8"}).stdout.decode()
    used = {c for c in utf8 if c in STAND_INS and c not in text}
    assert used, "the report has none of the characters the test is about"
    assert "\u2013" not in text and "internal error" not in report.stderr.decode(encoding)
    # every line whose only non-ASCII characters have stand-ins reads with them
    lines = [line for line in utf8.splitlines()
             if not line.isascii() and all(c.isascii() or c in STAND_INS for c in line)]
    assert lines
    for line in lines:
        assert "".join(STAND_INS.get(c, c) if not c.encode(encoding, "ignore") else c
                       for c in line) in text.splitlines(), line
    for args in (["list", "--no-pager", "--data-dir", str(data_dir)],
                 ["alerts", "list", "--data-dir", str(data_dir)],
                 ["inspect", str(get_crash("null_deref").core)]):
        done = raw(args, env)
        assert done.returncode == 0 and b"internal error" not in done.stderr, (args, done)
        done.stdout.decode(encoding)


def test_term_dumb_has_no_escape_sequences(data_dir: Path, get_crash: GetCrash) -> None:
    report = ["report", "--no-pager", "--data-dir", str(data_dir)]
    assert "\x1b[" in in_pty(report, cols=120, env={"TERM": "xterm"})
    assert "\x1b" not in in_pty(report, cols=120, env={"TERM": "dumb"})
    inspect = ["inspect", str(get_crash("null_deref").core)]
    assert "\x1b" not in in_pty(inspect, cols=120, env={"TERM": "dumb"})
    # NO_COLOR: bold and underline stay, no colour code (30-37, 90-97, 38;…)
    plain = in_pty(report, cols=120, env={"TERM": "xterm", "NO_COLOR": "1"})
    codes = {c for seq in re.findall(r"\x1b\[([0-9;]*)m", plain) for c in seq.split(";")}
    assert "1" in codes and not codes & {str(n) for n in [*range(30, 39), *range(90, 98)]}


def test_report_json_of_an_empty_window_is_findings(data_dir: Path, tmp_path: Path) -> None:
    done = cli("report", "--data-dir", str(data_dir), "--format", "json", "--since",
               "2030-01-01")
    assert done.returncode == 0 and "no crash from 2030-01-01" in done.stderr
    findings = json.loads(done.stdout)
    assert findings["window"]["crashes"] == 0
    assert findings["groups"] == [] and findings["hosts"] == []
    empty = tmp_path / "empty"
    assert cli("store", "init", "--data-dir", str(empty)).returncode == 0
    done = cli("report", "--data-dir", str(empty), "--format", "json")
    assert done.returncode == 0 and json.loads(done.stdout)["window"]["crashes"] == 0
    for fmt, mark in (("markdown", "#"), ("html", "<html")):
        page = cli("report", "--data-dir", str(empty), "--format", fmt)
        assert page.returncode == 0 and mark in page.stdout.lower(), page.stderr


def test_inspect_reads_a_core_from_a_pipe(get_crash: GetCrash, tmp_path: Path) -> None:
    core = get_crash("null_deref").core
    want = json.loads(cli("inspect", str(core), "--json").stdout)
    env = {"TMPDIR": str(tmp_path)}
    packed = tmp_path.parent / f"{tmp_path.name}-core.gz"
    packed.write_bytes(gzip.compress(core.read_bytes()))
    for name, source in (("-", packed), ("/dev/stdin", core)):
        # through a pipe, not a redirected file: stdin is a FIFO
        done = subprocess.run(["sh", "-c", 'cat "$1" | "$2" -m coreepi inspect "$3" --json',
                               "sh", str(source), sys.executable, name],
                              capture_output=True, text=True, timeout=300, check=False,
                              env=os.environ | env)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert got["signature"] == want["signature"] and got["signal"] == want["signal"]
    packed.unlink()
    assert list(tmp_path.iterdir()) == []  # the spool file is gone
    small = cli("inspect", "-", input="x" * 5000, env=env | {"COREEPI_MAX_CORE_BYTES": "4096"})
    assert small.returncode == 2 and small.stderr.count("\n") == 1
    assert "-: more than 4,096 bytes" in small.stderr
    assert "-: standard input is a terminal; pipe a core in" in in_pty(["inspect", "-"])
    empty = cli("inspect", "-", input="")
    assert empty.returncode == 2 and "-: nothing on the pipe" in empty.stderr


JOURNAL = (
    "Feb 23 16:24:18 gpu7 kernel: NVRM: Xid (PCI:0000:9b:00): 119, pid=1234, name=python, "
    "Timeout after 6s of waiting for RPC response from GPU0 GSP!\n"
    "Dec 31 23:59:59 gpu7 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=0, name=x, "
    "GPU has fallen off the bus.\n"
)


def test_telemetry_reads_the_syslog_time(tmp_path: Path) -> None:
    log = tmp_path / "journal.txt"
    log.write_text(JOURNAL)
    mtime = 1_741_000_000  # 2025-03-03: Feb is 2025, Dec the year before
    os.utime(log, (mtime, mtime))
    done = cli("telemetry", str(log), "--json")
    assert done.returncode == 0, done.stderr
    times = sorted(json.loads(line)["ts"] for line in done.stdout.splitlines())
    assert times == ["2024-12-31T23:59:59Z", "2025-02-23T16:24:18Z"]
    assert "read as 2025 (the file's modification time, 2025-03-03" in done.stderr
    table = cli("telemetry", str(log), env={"COLUMNS": "80"})
    assert "2025-02-23T16:24:18+00:00" in table.stdout  # the time column is never cut
    given = cli("telemetry", str(log), "--json", "--year", "2023")
    times = sorted(json.loads(line)["ts"] for line in given.stdout.splitlines())
    assert times == ["2023-02-23T16:24:18Z", "2023-12-31T23:59:59Z"]
    assert "read as 2023 (--year)" in given.stderr
    # a line with no time at all: said, not written with a null ts
    log.write_text("NVRM: Xid (PCI:0000:9b:00): 79, pid=0, name=x, GPU has fallen off the bus.\n")
    bare = cli("telemetry", str(log), "--json")
    assert bare.returncode == 0 and bare.stdout == ""
    assert "1 event without a time: not written to telemetry.jsonl" in bare.stderr


def test_syslog_year_rule() -> None:
    from datetime import UTC, datetime

    from coreepi.parse.telemetry.syslog_year import SyslogYear

    january = SyslogYear(modified=datetime(2025, 1, 5, tzinfo=UTC))
    assert january.when("Dec 31 23:59:59.25") == datetime(2024, 12, 31, 23, 59, 59, 250000,
                                                           tzinfo=UTC)
    assert january.when("Jan  5 01:02:03") == datetime(2025, 1, 5, 1, 2, 3, tzinfo=UTC)
    assert SyslogYear(year=2023).when("Feb 29 00:00:00") is None  # no such day
    assert SyslogYear(year=2024).when("Feb 29 00:00:00") == datetime(2024, 2, 29, tzinfo=UTC)
    assert SyslogYear().when("Feb 23 16:24:18") is None
    assert "--year" in SyslogYear().describe()
