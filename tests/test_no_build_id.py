"""Files for modules that state no build-id: ``--exe`` of a PIE and a
library under ``--sysroot``, on real cores of programs linked with
``--build-id=none``.

Without a build-id, drgn takes any file it is offered; coreepi checks a file
against what the core records (layout, and the bytes the core holds of its
read-only segments: ``parse/elf/exe_check.py``) and uses only one that fits.
The wrong files here have the same page layout as the right ones (small
programs of one toolchain), so only the bytes tell them apart.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corefactory import (  # noqa: E402
    CRASHERS_DIR,
    Case,
    CoreFactory,
    Crash,
    CrasherUnavailable,
    Variant,
    build_id_of,
)
from testdata import shared  # noqa: E402

from coreepi.ingest.artifacts import inspect_core  # noqa: E402
from coreepi.model.report import CrashReport  # noqa: E402
from coreepi.parse.elf.exe_check import exe_mismatch  # noqa: E402
from coreepi.parse.elf.notes import FileMapping  # noqa: E402

PIE = ("-g", "-O0", "-fno-omit-frame-pointer", "-fPIE", "-pie")


class NoBuildIdFactory(CoreFactory):
    variants: ClassVar[dict[str, Variant]] = {
        "null_deref-pie": Variant("null_deref-pie", "null_deref.c", PIE, build_id=False),
        "divzero-pie": Variant("divzero-pie", "divzero.c", PIE, build_id=False),
    }
    cases: ClassVar[dict[str, Case]] = {
        "null_deref-pie": Case("null_deref-pie", "null_deref-pie", "gcore"),
        "null_deref-pie@kernel": Case("null_deref-pie@kernel", "null_deref-pie", "kernel"),
    }


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> NoBuildIdFactory:
    if platform.machine() != "x86_64":
        pytest.skip(f"the crashers are x86-64 specific; this is {platform.machine()}")
    return NoBuildIdFactory(tmp_path_factory.mktemp("no-build-id"))


def _crash(factory: CoreFactory, name: str) -> Crash:
    try:
        return factory.crash(name)
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))


def _functions(report: CrashReport) -> list[str | None]:
    assert report.crashed_thread is not None
    return [f.function for f in report.crashed_thread.frames]


def _warnings(report: CrashReport) -> str:
    return "\n".join(report.analysis.warnings)


# -- --exe of a PIE without a build-id ------------------------------------------------


@pytest.mark.parametrize("case", ["null_deref-pie", "null_deref-pie@kernel"])
def test_wrong_pie_of_the_same_layout_is_refused(factory: NoBuildIdFactory, case: str) -> None:
    crash = _crash(factory, case)
    wrong, _, _ = factory.binary("divzero-pie")
    assert build_id_of(crash.binary) is None and build_id_of(wrong) is None  # the premise
    # NT_FILE as eu-readelf reads it
    mappings = [FileMapping(*f) for f in crash.notes.files if f[3] == str(crash.binary)]
    assert exe_mismatch(str(wrong), "x86_64", mappings) is None, "layouts differ: no test"
    report = inspect_core(crash.core, exe=wrong)
    assert (f"--exe {wrong}: its bytes differ from the core's copy of the mapping "
            f"{mappings[0].start:#x}-{mappings[0].end:#x} (file offset 0x0), so it is not the "
            f"core's {crash.binary}; not used") in report.analysis.warnings
    # the file at the core's own path fits, and is used instead
    assert report.modules[0].debug_file == str(crash.binary)
    assert report.signature is not None
    assert report.signature.signature == "store_field | handle_request | main"
    assert "divide" not in _functions(report)


def test_right_pie_without_build_id_is_used(factory: NoBuildIdFactory, tmp_path: Path) -> None:
    crash = _crash(factory, "null_deref-pie")
    renamed = tmp_path / "renamed-copy"
    shutil.copy(crash.binary, renamed)
    report = inspect_core(crash.core, exe=renamed)
    assert "--exe" not in _warnings(report)
    main = report.modules[0]
    assert (main.path, main.build_id, main.debug_file) == (str(crash.binary), None, str(renamed))
    assert _functions(report)[:3] == ["store_field", "handle_request", "main"]


# -- a shared library without a build-id, under --sysroot -------------------------------


def _cc(*argv: str | Path) -> None:
    proc = subprocess.run(["gcc", *map(str, argv)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"gcc {argv}: {proc.stderr}")


@pytest.fixture(scope="module")
def library_crash(factory: NoBuildIdFactory,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(core, recorded path of the library, the library's own file): a
    program whose library (linked --build-id=none) crashed, cored by gcore;
    the library is then moved away from its recorded path."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    root = tmp_path_factory.mktemp("nobuildid-lib")
    lib = root / "lib" / "libnobuildid.so"
    lib.parent.mkdir()
    flags = ("-g", "-O0", "-fno-omit-frame-pointer", "-Wl,--build-id=none")
    _cc(*flags, "-shared", "-fPIC", "-o", lib, CRASHERS_DIR / "nobuildid_lib.c")
    prog = root / "nobuildid_main"
    _cc("-g", "-O0", "-Wl,--build-id", "-o", prog, CRASHERS_DIR / "nobuildid_main.c",
        f"-L{lib.parent}", "-lnobuildid", f"-Wl,-rpath,{lib.parent}")
    workdir = root / "core"
    workdir.mkdir()
    try:
        core, _out, _rc, _live = factory._gcore(prog, [], workdir, None)
    except CrasherUnavailable as exc:
        pytest.skip(str(exc))
    kept = root / "kept-libnobuildid.so"
    lib.rename(kept)
    yield core, lib, kept


def _sysroot(root: Path, recorded: Path, file: Path) -> Path:
    target = root / str(recorded).lstrip("/")
    target.parent.mkdir(parents=True)
    shutil.copy(file, target)
    return root


def test_library_without_build_id_found_under_sysroot(
        library_crash: tuple[Path, Path, Path], tmp_path: Path) -> None:
    core, recorded, kept = library_crash
    alone = inspect_core(core)
    assert _functions(alone)[:2] == [None, None]  # the file is gone from its path
    report = inspect_core(core, sysroot=_sysroot(tmp_path, recorded, kept))
    assert _functions(report)[:3] == ["lib_store", "lib_entry", "main"]
    module = next(m for m in report.modules if m.path == str(recorded))
    assert (module.build_id, module.debug_file) == (None, str(tmp_path / str(recorded).lstrip("/")))


def test_wrong_library_without_build_id_under_sysroot_is_refused(
        library_crash: tuple[Path, Path, Path], tmp_path: Path) -> None:
    core, recorded, _kept = library_crash
    other = tmp_path / "other.so"
    _cc("-g", "-O0", "-fno-omit-frame-pointer", "-Wl,--build-id=none", "-DOTHER", "-shared",
        "-fPIC", "-o", other, CRASHERS_DIR / "nobuildid_lib.c")
    sysroot = _sysroot(tmp_path / "root", recorded, other)
    report = inspect_core(core, sysroot=sysroot)
    copy = sysroot / str(recorded).lstrip("/")
    assert f"{copy}: its bytes differ from the core's copy of the mapping" in _warnings(report)
    assert f"so it is not the core's {recorded}; not used" in _warnings(report)
    functions = _functions(report)
    assert functions[:2] == [None, None] and "other_store" not in functions
    module = next(m for m in report.modules if m.path == str(recorded))
    assert module.debug_file is None


def test_old_library_with_a_reserved_gap_under_sysroot(tmp_path: Path) -> None:
    """elfutils' test-core.core: test-core-lib.so (no build-id, 2 MiB segment
    alignment) is mapped with a PROT_NONE hole between its segments, which
    NT_FILE lists as a mapping of the file. Under --sysroot it names the
    crashing function (eu-stack, given the same files, does too)."""
    cores = shared("elf-cores-elfutils")
    if cores is None:
        pytest.skip("shared/testdata/elf-cores-elfutils not found")
    import bz2

    files = {}
    for name in ("test-core.core", "test-core.exec", "test-core-lib.so"):
        files[name] = tmp_path / name
        files[name].write_bytes(bz2.decompress((cores / f"{name}.bz2").read_bytes()))
    where = "home/jkratoch/redhat/elfutils-libregr"
    sysroot = tmp_path / "root"
    (sysroot / where).mkdir(parents=True)
    shutil.copy(files["test-core-lib.so"], sysroot / where / "test-core-lib.so")
    report = inspect_core(files["test-core.core"], exe=files["test-core.exec"], sysroot=sysroot)
    assert _functions(report)[:2] == ["libfunc", "main"]
    lib = next(m for m in report.modules if m.path == f"/{where}/test-core-lib.so")
    assert lib.debug_file == str(sysroot / where / "test-core-lib.so")
    gap = FileMapping(0x7F67F2AB0000, 0x7F67F2CAF000, 0x1000, lib.path)
    assert gap in [FileMapping(m.start, m.end, m.offset, m.path or "") for m in report.memory_map]


def test_mapped_data_file_is_not_a_module(get_crash: Callable[[str], Crash]) -> None:
    """sigbus@kernel maps a 16-byte data file (no ELF header: not a module).
    The file is at its recorded path; it is neither checked as a module's
    file nor warned about."""
    crash = get_crash("sigbus@kernel")
    data = next(f[3] for f in crash.notes.files if f[3].endswith("sixteen-bytes"))
    report = inspect_core(crash.core, exe=crash.binary)
    assert Path(data).read_bytes()[:4] != b"\x7fELF"
    assert data not in _warnings(report)
    assert all(m.path != data for m in report.modules)
