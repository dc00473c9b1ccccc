"""Modules of a core without an NT_FILE note, named from the dynamic linker's
link map in the core's memory.

Each core is a real one (gcore and kernel, tests/corefactory.py) copied with
its NT_FILE note's type rewritten to a type nobody reads, so every other
byte stays as the crash wrote it. The expected modules are those coreepi
reports for the untouched core, whose NT_FILE names them (and which
test_elfutils_differential checks against elfutils).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from badcore import layout
from corefactory import Crash

from coreepi.model.report import CrashReport
from coreepi.parse.elf.core import parse_core

NT_FILE = 0x46494C45
NOT_A_NOTE_TYPE = 0x4E4F4E45  # "ENON": no reader knows it


def without_nt_file(core: Path, out: Path) -> Path:
    """A copy of ``core`` whose NT_FILE note's type is rewritten (ELF64
    note header: namesz, descsz, type)."""
    data = bytearray(core.read_bytes())
    note = layout(bytes(data)).note(NT_FILE)
    struct.pack_into("<I", data, note.at + 8, NOT_A_NOTE_TYPE)
    out.write_bytes(data)
    assert NT_FILE not in {n.type for n in layout(bytes(data)).notes}
    return out


def modules(report: CrashReport) -> list[tuple[str, int, int, str | None]]:
    return [(m.path, m.base, m.end, m.build_id) for m in report.modules]


def frames(report: CrashReport) -> list[tuple[str | None, str | None, int | None]]:
    return [(f.function, f.module, f.line) for f in report.crashed_thread.frames]


@pytest.mark.parametrize("case", ["null_deref", "null_deref@kernel", "threads50@kernel"])
def test_modules_from_link_map_match_nt_file(
    get_crash: Callable[[str], Crash], tmp_path: Path, case: str
) -> None:
    crash = get_crash(case)
    original = parse_core(crash.core, exe=crash.binary)
    stripped = parse_core(without_nt_file(crash.core, tmp_path / "core"), exe=crash.binary)
    want = modules(original)
    assert {p for p, *_ in want} >= {
        str(crash.binary), "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"
    }
    assert modules(stripped) == want
    assert frames(stripped) == frames(original)
    assert stripped.process.exe == original.process.exe == str(crash.binary)
    assert f"core has no NT_FILE note: {len(want)} modules named from the dynamic linker's " \
        "link map (r_debug)" in stripped.analysis.warnings  # fmt: skip


def test_no_nt_file_library_debug_info_by_build_id(
    get_crash: Callable[[str], Crash], tmp_path: Path
) -> None:
    """Without NT_FILE and with no --exe, the stripped program's debug file is
    found by the build-id read from its image in memory (--debug-dir)."""
    crash = get_crash("null_deref-stripped")
    assert crash.debug_dir is not None
    core = without_nt_file(crash.core, tmp_path / "core")
    report = parse_core(core, debug_dirs=[crash.debug_dir])
    main = report.modules[0]
    assert main.path == str(crash.binary)
    assert main.debug_file is not None and main.debug_file.startswith(str(crash.debug_dir))
    got = [(f.function, f.line) for f in report.crashed_thread.frames[:3]]
    assert got == [
        ("store_field", crash.line("CRASH-LINE")),
        ("handle_request", crash.line("CALLER-LINE")),
        ("main", crash.line("MAIN-LINE")),
    ]
