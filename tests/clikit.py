"""Helpers for the CLI tests: run ``coreepi`` as a user does (a child
process), and a small fleet of real cores (one crasher binary under
``symbols/``, cores plain and zstd-compressed, three hosts) ingested by the
CLI into a data dir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import zstandard
from fleetfactory import CoreSet

HOSTS = ("h1", "h2", "h3")


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
        **kw: object) -> subprocess.CompletedProcess[str]:
    """``coreepi ARGS`` in a child process (text output); ``env`` is added to
    a copy of this environment without any COREEPI_* variable."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("COREEPI_")}
    return subprocess.run([sys.executable, "-m", "coreepi", *args], capture_output=True,
                          text=True, timeout=timeout, env=base | (env or {}), check=False,
                          **kw)  # type: ignore[call-overload]


@dataclass
class CliFleet:
    """A fleet directory, the data dir it was ingested into, and what is in it:
    ``cores`` (crash file name -> the original uncompressed core), ``binary``."""

    fleet: Path
    data: Path
    binary: Path
    cores: dict[str, Path]


def make_cli_fleet(root: Path, coreset: CoreSet, count: int = 6) -> CliFleet:
    """:func:`write_cli_fleet`, ingested with ``coreepi ingest`` into ``root/data``."""
    made = write_cli_fleet(root, coreset, count)
    done = cli("ingest", str(made.fleet), "--data-dir", str(made.data), "--jobs", "2")
    assert done.returncode == 0, done.stderr
    return made


def write_cli_fleet(root: Path, coreset: CoreSet, count: int = 6) -> CliFleet:
    """``count`` cores over three hosts, a day apart from 2024-01-02; every
    other one zstd-compressed; the binary in ``symbols/`` under another name
    (found by build-id, never by name). Not ingested (``data`` does not exist)."""
    fleet = root / "fleet"
    crashes = fleet / "crashes"
    crashes.mkdir(parents=True)
    (fleet / "symbols" / "bin").mkdir(parents=True)
    shutil.copy(coreset.binary, fleet / "symbols" / "bin" / "renamed-crasher")
    (fleet / "hosts.csv").write_text("host_id,cpu_model\nh1,EPYC 7763\nh2,Xeon 8380\n"
                                     "h3,Xeon 8380\n")
    (fleet / "exposure.csv").write_text("host_id,start,end\n" + "".join(
        f"{h},2024-01-01T00:00:00Z,2024-01-31T00:00:00Z\n" for h in HOSTS))
    cores = {}
    for i, core in enumerate(coreset.cores[:count]):
        name = f"core.{i + 1}" + (".zst" if i % 2 else "")
        data = core.read_bytes()
        (crashes / name).write_bytes(zstandard.ZstdCompressor().compress(data) if i % 2
                                     else data)
        (crashes / f"{name}.json").write_text(json.dumps(
            {"host_id": HOSTS[i % 3], "captured_at": f"2024-01-{i + 2:02d}T10:00:00Z"}))
        cores[name] = core
    return CliFleet(fleet, root / "data", coreset.binary, cores)


def coreepi_argv() -> list[str]:
    return [sys.executable, "-m", "coreepi"]


def in_pty(args: list[str], cols: int = 80, rows: int = 24,
           env: dict[str, str] | None = None) -> str:
    """Run coreepi with stdin, stdout and stderr on a pseudo-terminal of
    ``cols`` x ``rows`` (``PAGER=cat`` unless ``env`` says otherwise); what it printed."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("COREEPI_") and k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([*coreepi_argv(), *args], stdout=slave, stderr=slave, stdin=slave,
                            env=base | {"PAGER": "cat"} | (env or {}), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
