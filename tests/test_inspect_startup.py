"""What `coreepi inspect` pays for at start-up: only its own command module,
no scan of installed packages for drgn plugins, and the .eh_frame_hdr search
table read in one pass (the same table as the general decoder's).

Each check runs in a fresh interpreter (a subprocess), because what a process
has imported is the thing measured."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from corefactory import Crash

from coreepi.parse.elf import cfi_index
from coreepi.parse.elf.cfi_index import CfiIndex, _read_encoded


def _run(code: str) -> object:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_inspect_imports_only_its_own_command() -> None:
    got = _run(
        "import json, sys, typer\n"
        "from coreepi.cli.main import build_app\n"
        "group = typer.main.get_command(build_app('inspect'))\n"
        "mods = sorted(m for m in sys.modules if m.startswith('coreepi.cli.'))\n"
        "print(json.dumps([sorted(group.commands), mods]))\n"
    )
    commands, modules = got  # type: ignore[misc]
    assert commands == ["inspect", "submit"]
    for other in ("coreepi.cli.serve", "coreepi.cli.report", "coreepi.cli.crashes",
                  "coreepi.cli.ci", "coreepi.cli.store", "coreepi.capture.commands"):
        assert other not in modules


def test_full_app_has_every_command() -> None:
    # `--help`, a typo or a test's `app`: every command, in the help's order.
    got = _run(
        "import json, typer\n"
        "from coreepi.cli.main import app, build_app\n"
        "full = typer.main.get_command(app)\n"
        "typo = typer.main.get_command(build_app('inspekt'))\n"
        "print(json.dumps([list(full.commands), list(typo.commands)]))\n"
    )
    full, typo = got  # type: ignore[misc]
    assert full == typo
    assert full[:4] == ["inspect", "submit", "ingest", "report"]
    assert {"token", "store", "agent", "ci", "alerts", "schema", "demo"} <= set(full)


def test_unwinding_does_not_scan_entry_points(get_crash: Callable[[str], Crash]) -> None:
    crash = get_crash("null_deref")
    got = _run(
        "import importlib.metadata as md, json\n"
        "groups = []\n"
        "real = md.entry_points\n"
        "def spy(**kw):\n"
        "    groups.append(kw.get('group'))\n"
        "    return real(**kw)\n"
        "md.entry_points = spy\n"
        "from pathlib import Path\n"
        "from coreepi.parse.elf.unwind import unwind_core\n"
        f"u = unwind_core({str(crash.core)!r}, exe=Path({str(crash.binary)!r}))\n"
        "print(json.dumps([groups, len(u.threads)]))\n"
    )
    groups, threads = got  # type: ignore[misc]
    assert threads >= 1
    assert "drgn.plugins" not in groups


def _libc() -> Path:
    out = subprocess.run(["ldd", sys.executable], capture_output=True, text=True, check=True)
    path = next(line.split("=>")[1].split("(")[0].strip()
                for line in out.stdout.splitlines() if "libc.so" in line)  # fmt: skip
    return Path(path)


def test_search_table_fast_path_equals_the_general_decoder() -> None:
    index = CfiIndex.from_elf(str(_libc()))
    assert index._hdr is not None and index._hdr.data[3] == cfi_index.DW_EH_PE_datarel_sdata4
    data, base = index._hdr.data, index._hdr.addr
    pos = 4
    _ptr, pos = _read_encoded(data, pos, data[1], base)
    count, pos = _read_encoded(data, pos, data[2], base)
    slow = []
    for _ in range(count):
        loc, pos = _read_encoded(data, pos, data[3], base)
        fde, pos = _read_encoded(data, pos, data[3], base)
        slow.append((loc, fde))
    assert count > 1000  # libc has thousands of FDEs
    assert index._table == sorted(slow)
