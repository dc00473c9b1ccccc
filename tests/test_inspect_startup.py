"""What `coreepi inspect` pays for at start-up: no Typer for an ordinary
command line (and the same output as through Typer), only its own command
module otherwise, no scan of installed packages for drgn plugins, and the
.eh_frame_hdr search table read in one pass (the same table as the general
decoder's).

Each check runs in a fresh interpreter (a subprocess), because what a process
has imported is the thing measured."""

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
from corefactory import Crash

from coreepi.cli.inspect_args import OPTIONS, parse_inspect_argv
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


# -- inspect without Typer ----------------------------------------------------


def test_plain_inspect_command_lines_are_read_without_typer() -> None:
    got = parse_inspect_argv(["c.core", "--exe", "bin/app", "--debug-dir=/d1", "--debug-dir", "/d2",
                              "--json", "--host-id", "h7", "--captured-at=2024-05-01"])
    assert got == {"core": Path("c.core"), "exe": Path("bin/app"), "sysroot": None,
                   "debug_dir": [Path("/d1"), Path("/d2")], "all_threads": False,
                   "registers": False, "json_output": True, "no_analysis": False,
                   "case_defs": None, "host_id": "h7", "captured_at": "2024-05-01",
                   "siglists": None}


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["c.core", "--help"], ["c.core", "-h"], ["a.core", "b.core"], ["c.core", "--exe"],
    ["c.core", "--exe", "--json"], ["c.core", "--json=yes"], ["c.core", "--bogus"], ["--", "c.core"],
    ["c.core", "--exe="],
])
def test_anything_else_goes_to_typer(argv: list[str]) -> None:
    assert parse_inspect_argv(argv) is None


def test_typer_command_takes_its_options_from_the_table() -> None:
    import typer

    from coreepi.cli.main import build_app

    command = typer.main.get_command(build_app("inspect")).commands["inspect"]
    params = {p.name: p for p in command.params}
    for spec in OPTIONS:
        param = params[spec.dest]
        assert param.opts == [spec.flag] and param.help == spec.help
        assert param.is_flag == (spec.kind == "flag")
        assert param.multiple == (spec.kind == "paths")
    assert set(params) == {"core", *(o.dest for o in OPTIONS)}


def _coreepi(argv: list[str], *, typer_path: bool) -> subprocess.CompletedProcess[str]:
    entry = "coreepi.cli.main" if typer_path else "coreepi.cli.entry"
    # checked at exit (status 97 if wrong): the fast path ends in os._exit,
    # so a line after main() would never run
    code = ("import atexit, os, sys\n"
            f"sys.argv = ['coreepi', *{argv!r}]\n"
            f"atexit.register(lambda: ('typer' in sys.modules) == {typer_path!r} or os._exit(97))\n"
            f"from {entry} import main\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "120"})


@pytest.mark.parametrize("extra", [["--all-threads", "--registers"], ["--json"]])
def test_fast_path_prints_what_typer_prints(get_crash: Callable[[str], Crash],
                                            extra: list[str]) -> None:
    crash = get_crash("null_deref")
    argv = ["inspect", str(crash.core), "--exe", str(crash.binary), *extra]
    fast, slow = _coreepi(argv, typer_path=False), _coreepi(argv, typer_path=True)
    assert fast.returncode == slow.returncode == 0, (fast.stderr, slow.stderr)

    def same(text: str) -> str:  # the analysis time differs from run to run
        return re.sub(r'"duration_seconds": [0-9.e-]+', "", text)

    assert same(fast.stdout) == same(slow.stdout) and fast.stdout
    assert fast.stderr == slow.stderr


def test_fast_path_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.core"
    junk.write_bytes(b"not a core at all")
    fast = _coreepi(["inspect", str(junk)], typer_path=False)
    assert fast.returncode == 2 and fast.stdout == ""
    assert fast.stderr.startswith(f"coreepi: error: {junk}") and fast.stderr.count("\n") == 1


def test_fast_json_imports_no_package_metadata_nor_rich(get_crash: Callable[[str], Crash]) -> None:
    # pydantic's plugin loader imports importlib.metadata (~0.025 CPU-s) even
    # with every plugin off; the fast path registers a loader without it
    crash = get_crash("null_deref")
    argv = ["inspect", str(crash.core), "--exe", str(crash.binary), "--json"]
    # and, drawing nothing, no Rich (its import is ~0.025 CPU-s)
    code = ("import atexit, os, sys\n"
            f"sys.argv = ['coreepi', *{argv!r}]\n"
            "atexit.register(lambda: 'importlib.metadata' in sys.modules and os._exit(97))\n"
            "atexit.register(lambda: 'rich' in sys.modules and os._exit(98))\n"
            "from coreepi.cli.entry import main\nmain()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["signal"]["name"] == "SIGSEGV"


@pytest.mark.parametrize(("setting", "stubbed"), [(None, True), ("1", True),
                                                  ("some_plugin", False), ("", False)])
def test_plugin_loader_is_replaced_only_with_every_plugin_off(setting: str | None,
                                                              stubbed: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if setting is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = setting
    code = ("import json, sys\n"
            "from coreepi.cli.entry import disable_pydantic_plugins\n"
            "disable_pydantic_plugins()\n"
            "from coreepi.model.report import Frame\n"
            "from pydantic.plugin._loader import get_plugins\n"
            "loader = sys.modules['pydantic.plugin._loader']\n"
            "print(json.dumps([getattr(loader, '__file__', None) is None, list(get_plugins()),\n"
            "                  Frame(index=0, pc='0x10', trust='context').pc]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120, env=env)
    assert json.loads(proc.stdout) == [stubbed, [], 16]


def test_pydantic_takes_only_get_plugins_from_its_plugin_loader() -> None:
    # what the replacement loader provides is all pydantic imports from it
    import pydantic

    root = Path(pydantic.__file__).parent
    uses = sorted({use for source in root.rglob("*.py") if source.name != "_loader.py"
                   for use in re.findall(r"_loader\b.*", source.read_text(encoding="utf-8"))})
    assert uses == ["_loader import get_plugins"]


def test_fast_path_collects_cycles_rarely(get_crash: Callable[[str], Crash]) -> None:
    # Python's default (a young collection every 700 allocations) ran ~90
    # collections of the start-up's long-lived objects, 3.5 % of the CPU
    crash = get_crash("null_deref")
    argv = ["inspect", str(crash.core), "--exe", str(crash.binary)]
    code = ("import atexit, gc, sys\n"
            f"sys.argv = ['coreepi', *{argv!r}]\n"
            "def young(): return gc.get_stats()[0]['collections']\n"
            "atexit.register(lambda: sys.stderr.write(f'young collections: {young()}\\n'))\n"
            "from coreepi.cli.entry import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    collections = int(re.findall(r"young collections: (\d+)", proc.stderr)[-1])
    assert 0 < collections <= 40  # 88 with the default


def test_fast_path_skips_the_interpreter_teardown(get_crash: Callable[[str], Crash],
                                                  tmp_path: Path) -> None:
    # A global's __del__ runs in the interpreter's teardown (what the fast
    # path skips, ~15 % of its CPU time); the atexit handlers still run, after
    # the whole report was written: the scratch directory the gzip core was
    # decompressed into is gone.
    crash = get_crash("null_deref")
    core = tmp_path / "core.gz"
    core.write_bytes(gzip.compress(crash.core.read_bytes(), compresslevel=1))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = ["inspect", str(core), "--exe", str(crash.binary)]
    code = ("import atexit, sys\n"
            f"sys.argv = ['coreepi', *{argv!r}]\n"
            "class Mark:\n"
            "    def __del__(self, open=open):  # builtins are gone by then\n"
            f"        open({str(tmp_path / 'teardown')!r}, 'w').close()\n"
            "mark = Mark()\n"
            f"atexit.register(lambda: open({str(tmp_path / 'atexit')!r}, 'w').close())\n"
            "from coreepi.cli.entry import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "120", "TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{crash.binary.name} pid ") and "modules" in proc.stdout
    assert (tmp_path / "atexit").exists()
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "teardown").exists()
