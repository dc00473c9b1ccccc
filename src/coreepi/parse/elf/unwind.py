"""Modules, symbols and stack unwinding of a userspace core, with drgn.

This is the one place coreepi sets up drgn (https://drgn.readthedocs.io):
drgn finds the loaded modules (NT_FILE, r_debug's link map, the vDSO), their
build-ids and debug files, unwinds each thread with DWARF CFI (falling back to
the frame-pointer chain), and symbolizes frames, inlined functions included.
No drgn object leaves this module: it returns plain dataclasses.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import drgn

from coreepi.model.report import FrameTrust
from coreepi.parse.demangle import demangle
from coreepi.parse.elf.cfi_cache import CACHE as CFI_CACHE
from coreepi.parse.elf.cfi_index import CfiIndex
from coreepi.parse.elf.linkmap import LinkMapObject
from coreepi.parse.elf.unidentified import LocalFile

__all__ = ["UnwoundFrame", "UnwoundModule", "UnwoundThread", "Unwinding", "unwind_core"]

MAX_FRAMES = 512  # per thread; deeper stacks (runaway recursion) are cut here

# What drgn raises for a malformed core or ELF file (drgn/python/error.c). A
# plain ``Exception`` is drgn's DRGN_ERROR_OTHER, e.g. "libelf error: invalid
# ELF file data"; MemoryError is its answer to a size it refuses to allocate.
_DRGN_ERRORS = (
    drgn.FaultError,
    drgn.BadDataError,
    drgn.OutOfBoundsError,
    drgn.ObjectAbsentError,
    ValueError,
    LookupError,
    OverflowError,
    OSError,
    NotImplementedError,
    MemoryError,
)


def is_drgn_error(exc: BaseException) -> bool:
    """True for the exceptions drgn raises on bad input (as far as their types
    tell them apart from bugs of ours)."""
    return isinstance(exc, _DRGN_ERRORS) or type(exc) is Exception


@dataclass(slots=True)
class UnwoundModule:
    path: str
    build_id: str | None
    base: int
    end: int
    load_bias: int | None
    loaded_file: str | None
    debug_file: str | None


@dataclass(slots=True)
class UnwoundFrame:
    pc: int
    sp: int | None
    function: str | None
    function_offset: int | None
    file: str | None
    line: int | None
    column: int | None
    inlined: bool
    trust: FrameTrust
    module: UnwoundModule | None


@dataclass(slots=True)
class UnwoundThread:
    tid: int
    frames: list[UnwoundFrame] = field(default_factory=list)
    error: str | None = None


@dataclass(slots=True)
class Unwinding:
    modules: list[UnwoundModule]
    threads: dict[int, UnwoundThread]
    warnings: list[str]


def unwind_core(
    core_path: str | os.PathLike[str],
    *,
    exe: Path | None = None,
    sysroot: Path | None = None,
    debug_dirs: Sequence[Path] = (),
    tids: Sequence[int] = (),
    link_map: Sequence[LinkMapObject] = (),
    local_files: Sequence[LocalFile] = (),
) -> Unwinding:
    """Find the modules of the core at ``core_path`` and unwind every thread.

    ``exe`` is the crashed executable when it is not at the path recorded in
    the core; ``sysroot`` is tried as a prefix of every module path;
    ``debug_dirs`` are searched for debug files by build-id and debuglink.
    ``link_map``: objects read from the core's link map, for a core without
    NT_FILE (drgn then finds only the main program and the vDSO): each one no
    drgn module covers becomes a shared-library module. ``local_files``: the
    files accepted for the objects the core states no build-id for
    (:mod:`.unidentified`); each one no drgn module covers becomes a
    shared-library module too. Files are accepted only when their build-id
    matches the core's, or, without one, when they are in ``local_files``. Never
    contacts debuginfod. Raises what drgn raises (see :func:`is_drgn_error`)
    when the core cannot be opened at all (the caller validates the file
    first); later drgn failures become warnings or a thread's error.
    """
    warnings: list[str] = []
    # drgn logs each module without debug info; we report that as one warning.
    logging.getLogger("drgn").setLevel(logging.ERROR)
    prog = drgn.Program()
    _set_core_dump(prog, os.fspath(core_path))
    prog.set_enabled_debug_info_finders(["standard"])  # never debuginfod: no network
    options = prog.debug_info_options
    options.directories = tuple(os.fspath(d) for d in debug_dirs) + tuple(options.directories)
    try:
        prog.create_loaded_modules()
    except Exception as exc:
        if not is_drgn_error(exc):
            raise
        warnings.append(f"could not list every loaded module: {exc}")
    try:
        _add_link_map_modules(prog, link_map)
        _add_local_file_modules(prog, local_files)
    except Exception as exc:
        if not is_drgn_error(exc):
            raise
        warnings.append(f"could not add the link map's modules: {exc}")
    # The build-ids the core states. A file drgn accepts for a module without
    # one was not checked against anything: its build-id is not the module's.
    stated = {m.name: m.build_id for m in prog.modules()}
    try:
        _offer_files(prog, exe, sysroot, link_map[0].name if link_map else "", local_files)
        # The modules by name, not load_debug_info(default=True): that one
        # also looks "main" up to guess the program's language, which
        # indexes all DWARF of every module (~0.07 s of CPU for libc alone);
        # and it would skip the modules added from the link map.
        prog.load_module_debug_info(*prog.modules())
    except drgn.MissingDebugInfoError:
        pass  # reported below, per module
    except Exception as exc:
        if not is_drgn_error(exc):
            raise
        warnings.append(f"debug info could not be loaded: {exc}")

    modules = []
    try:
        for m in prog.modules():
            module = _module(m, stated.get(m.name))
            if module is not None:
                modules.append(module)
    except Exception as exc:
        if not is_drgn_error(exc):
            raise
        warnings.append(f"could not list every loaded module: {exc}")
    # The vDSO never has a debug file on disk: saying so on every core is noise.
    on_disk = [m for m in modules if m.debug_file is None and not m.path.startswith("linux-vdso")]
    not_found = [m.path for m in on_disk if m.loaded_file is None]
    no_debug = [m.path for m in on_disk if m.loaded_file is not None]
    if not_found:
        warnings.append(
            "file not found (frames get module + offset only, no names) for: " + ", ".join(not_found)
        )
    if no_debug:
        warnings.append(
            "no debug info (names from symbol tables only, no file:line) for: " + ", ".join(no_debug)
        )
    modules.sort(key=lambda m: m.base)
    by_base = _ModuleLookup(modules)
    cfi = _CfiCache(prog)

    threads: dict[int, UnwoundThread] = {}
    symbols: _SymbolCache = {}
    try:
        for thread in prog.threads():
            if tids and thread.tid not in tids:
                continue
            threads[thread.tid] = _unwind_thread(thread, by_base, cfi, symbols, prog)
    except Exception as exc:
        if not is_drgn_error(exc):
            raise
        warnings.append(f"could not list every thread: {exc}")
    return Unwinding(modules, threads, warnings)


def _set_core_dump(prog: drgn.Program, path: str) -> None:
    """``prog.set_core_dump(path)``, without loading drgn's plugins (drgn
    loads them, once per process, on the first program set up). coreepi runs
    no drgn commands and wants the same analysis wherever it runs, so no
    plugin of the environment may hook it; ``*`` also skips drgn's scan of
    every installed package's entry points (importlib.metadata: ~0.05 s),
    where naming drgn's two CLI plugins did not. A DRGN_DISABLE_PLUGINS set
    by the user is left as it is."""
    if "DRGN_DISABLE_PLUGINS" in os.environ:
        prog.set_core_dump(path)
        return
    os.environ["DRGN_DISABLE_PLUGINS"] = "*"
    try:
        prog.set_core_dump(path)
    finally:
        os.environ.pop("DRGN_DISABLE_PLUGINS", None)


def _add_link_map_modules(prog: drgn.Program, objects: Sequence[LinkMapObject]) -> None:
    """Create a drgn shared-library module, with its address range and
    build-id, for each link-map object that no existing module covers."""
    if not objects:
        return
    covered = [r for m in prog.modules() for r in (m.address_ranges or ())]
    for obj in objects:
        if not obj.name or any(lo <= obj.start < hi for lo, hi in covered):
            continue
        module = prog.shared_library_module(obj.name, obj.dynamic, create=True)
        module.address_range = (obj.start, obj.end)
        if obj.build_id:
            module.build_id = bytes.fromhex(obj.build_id)


def _add_local_file_modules(prog: drgn.Program, files: Sequence[LocalFile]) -> None:
    """Create a drgn shared-library module, with its address range, for each
    accepted file of an object without a build-id that no module covers
    (drgn makes modules from the link map only; NT_FILE alone names these)."""
    if not files:
        return
    covered = [r for m in prog.modules() for r in (m.address_ranges or ())]
    for f in files:
        if any(lo <= f.start < hi for lo, hi in covered):
            continue
        # drgn keys a shared library by its dynamic section's address (l_ld)
        module = prog.shared_library_module(f.name, f.dynamic or f.start, create=True)
        module.address_range = (f.start, f.end)


def _offer_files(
    prog: drgn.Program, exe: Path | None, sysroot: Path | None, main_name: str,
    local_files: Sequence[LocalFile] = (),
) -> None:
    """Offer the user's executable and sysroot copies to drgn's modules.
    ``main_name``: the main program's path when drgn could not name it (no
    NT_FILE; from AT_EXECFN), offered as drgn offers NT_FILE paths. drgn
    checks build-ids, so offering a wrong file is harmless, except to a
    module without one: such a module gets its file from ``local_files``
    (checked against the core) and no other."""
    for module in prog.modules():
        if module.build_id is None and not _is_vdso(module.name):
            # open_core has checked ``exe`` against the core already
            main = exe is not None and isinstance(module, drgn.MainModule)
            vetted = os.fspath(exe) if main and exe is not None else None
            _offer_local_file(module, local_files, vetted)
            continue
        candidates: list[str] = []
        name = module.name
        if isinstance(module, drgn.MainModule):
            if exe is not None:
                candidates.append(os.fspath(exe))
            if not name and main_name:
                name = main_name
                candidates.append(name)
        if sysroot is not None and name.startswith("/"):
            candidates.append(os.path.join(os.fspath(sysroot), name.lstrip("/")))
        for path in candidates:
            if os.path.isfile(path):
                try:
                    module.try_file(path)
                except (OSError, ValueError):
                    pass


def _offer_local_file(module: drgn.Module, local_files: Sequence[LocalFile],
                      vetted: str | None) -> None:
    """Give a module without a build-id ``vetted`` (the user's checked
    executable) or the accepted file of the object it covers, or tell drgn
    to look for none (its own search would take any file at the module's
    path, a wrong one included)."""
    ranges = module.address_ranges or ()
    local = next((f.path for f in local_files if any(lo <= f.start < hi for lo, hi in ranges)),
                 None)
    if vetted or local:
        try:
            module.try_file(vetted or local)
            return
        except (OSError, ValueError):
            pass
    if module.wants_loaded_file():
        module.loaded_file_status = drgn.ModuleFileStatus.DONT_WANT
    if module.wants_debug_file():
        module.debug_file_status = drgn.ModuleFileStatus.DONT_WANT


def _is_vdso(name: str) -> bool:
    """The vDSO: drgn reads its image from the core's memory."""
    return name.startswith(("linux-vdso", "linux-gate", "[vdso"))


def _module(m: drgn.Module, build_id: bytes | None) -> UnwoundModule | None:
    """The module ``m`` as found in the core; ``build_id``: the one the core
    states for it (None: none)."""
    try:
        ranges = m.address_ranges
    except (ValueError, AttributeError):
        return None
    if not ranges:
        return None
    base = min(r[0] for r in ranges)
    end = max(r[1] for r in ranges)
    bias = m.loaded_file_bias if m.loaded_file_path else m.debug_file_bias
    return UnwoundModule(
        path=m.name,
        build_id=build_id.hex() if build_id else None,
        base=base,
        end=end,
        load_bias=bias,
        loaded_file=m.loaded_file_path,
        debug_file=m.debug_file_path,
    )


class _ModuleLookup:
    def __init__(self, modules: list[UnwoundModule]) -> None:
        self._modules = modules

    def find(self, address: int) -> UnwoundModule | None:
        for m in self._modules:
            if m.base <= address < m.end:
                return m
        return None


class _CfiCache:
    """CfiIndex per module, built on first use from the module's file (or, for
    the vDSO, from its image in the core's memory)."""

    def __init__(self, prog: drgn.Program) -> None:
        self._prog = prog
        self._by_path: dict[str, list[CfiIndex]] = {}

    def covers(self, module: UnwoundModule | None, pc: int) -> bool:
        if module is None:
            return False
        key = module.path
        if key not in self._by_path:
            self._by_path[key] = self._build(module)
        link_pc = pc - (module.load_bias or 0)
        return any(index.covers(link_pc) for index in self._by_path[key])

    def _build(self, module: UnwoundModule) -> list[CfiIndex]:
        indexes = []
        roles = {module.loaded_file: "loaded", module.debug_file: "debug"}
        for path, role in roles.items():  # drgn matched both files to the module's build-id
            if path and os.path.isfile(path):
                indexes.append(CFI_CACHE.get(module.build_id, role, path))
        if not indexes and module.path.startswith(("linux-vdso", "linux-gate", "[vdso")):
            try:
                image = self._prog.read(module.base, min(module.end - module.base, 1 << 20))
                indexes.append(CfiIndex.from_elf(image))
            except drgn.FaultError:
                pass
        return indexes


# ELF symbol of a frame by (pc, interrupted): drgn looks a caller frame's
# symbol up at pc - 1, an interrupted one's at pc. Threads of one process
# share most of their return addresses, and each drgn lookup costs ~50 us.
_SymbolCache = dict[tuple[int, bool], "drgn.Symbol | None"]


def _unwind_thread(
    thread: drgn.Thread,
    modules: _ModuleLookup,
    cfi: _CfiCache,
    symbols: _SymbolCache,
    prog: drgn.Program | None = None,
) -> UnwoundThread:
    out = UnwoundThread(tid=thread.tid)
    try:
        trace = thread.stack_trace()
    except Exception as exc:
        if not is_drgn_error(exc):
            raise
        out.error = f"no stack trace: {exc}"
        return out
    # Trust of a physical frame depends on how it was unwound from the frame
    # below it: with CFI when that frame's pc had an FDE, else frame pointers.
    callee_pc: int | None = None
    callee_interrupted = False
    # (pc, sp) of the physical frames so far: drgn's frame-pointer fallback
    # follows a saved rbp that points at itself forever (a corrupt or
    # not-yet-set-up frame record), giving MAX_FRAMES copies of one frame.
    seen: set[tuple[int, int | None]] = set()
    for i, frame in enumerate(trace):
        if i >= MAX_FRAMES:
            out.error = f"stack deeper than {MAX_FRAMES} frames; cut"
            break
        try:
            pc = frame.pc
        except LookupError:
            # CFI marks the return address undefined in the outermost frame
            # (_start, clone): the normal end of a stack.
            break
        try:
            sp: int | None = frame.sp
        except LookupError:
            sp = None
        if not frame.is_inline:
            if (pc, sp) in seen:
                out.error = f"frame #{i} repeats an earlier frame (pc and sp): unwinding loop; cut"
                break
            seen.add((pc, sp))
        module = modules.find(pc)
        prev = out.frames[-1] if out.frames else None
        if prev is not None and prev.inlined and prev.pc == pc and prev.sp == sp:
            trust = prev.trust  # same physical frame as the inlined one before it
        elif frame.interrupted or i == 0:
            trust = FrameTrust.CONTEXT
        else:
            assert callee_pc is not None
            # drgn looks CFI up at pc - 1 for a caller frame (the call may be
            # the last instruction of a function), at pc for an interrupted one.
            lookup = callee_pc if callee_interrupted else callee_pc - 1
            trust = FrameTrust.CFI if cfi.covers(modules.find(lookup), lookup) else (
                FrameTrust.FRAME_POINTER
            )
        if not frame.is_inline:
            callee_pc, callee_interrupted = pc, frame.interrupted
        try:
            symbolized = _symbolize(frame, pc, sp, trust, module, symbols)
        except Exception as exc:
            if not is_drgn_error(exc):
                raise
            out.error = f"frame #{i} could not be read: {exc}"
            break
        if (
            frame.interrupted
            and i > 0
            and out.frames
            and out.frames[-1].function is None
            and not out.frames[-1].inlined
            and prog is not None
        ):
            _name_signal_trampoline(prog, out.frames[-1], symbols)
        out.frames.append(symbolized)
    return out


def _name_signal_trampoline(prog: drgn.Program, tramp: UnwoundFrame, symbols: _SymbolCache) -> None:
    """The frame above an interrupted one is the signal trampoline (glibc's
    ``__restore_rt``). drgn looks a caller frame's symbol up at pc - 1, which
    for a trampoline is the padding before it (its CFI starts one byte early
    for that reason), so it comes back unnamed: look it up at pc itself."""
    key = (tramp.pc, True)
    if key not in symbols:
        try:
            symbols[key] = prog.symbol(tramp.pc)
        except (LookupError, ValueError):
            symbols[key] = None
    symbol = symbols[key]
    if symbol is not None:
        tramp.function = symbol.name
        tramp.function_offset = tramp.pc - symbol.address


def _symbolize(
    frame: drgn.StackFrame,
    pc: int,
    sp: int | None,
    trust: FrameTrust,
    module: UnwoundModule | None,
    symbols: _SymbolCache,
) -> UnwoundFrame:
    # drgn names an unknown function by its hex address; we keep None instead.
    function = frame.name
    if function is not None and function.startswith("0x"):
        function = None
    function_offset = None
    key = (pc, bool(frame.interrupted))
    if key in symbols:
        symbol = symbols[key]
    else:
        try:
            symbol = frame.symbol()
        except LookupError:
            symbol = None
        symbols[key] = symbol
    if symbol is not None and not frame.is_inline:
        # The ELF symbol carries the C++ qualified name (DWARF's DW_AT_name
        # is only the last component): prefer it, demangled.
        if symbol.name.startswith(("_Z", "_R")):
            function = demangle(symbol.name)
        elif function is None:
            function = symbol.name
        function_offset = pc - symbol.address
    file = line = column = None
    try:
        file, line, column = frame.source()
    except LookupError:
        pass
    return UnwoundFrame(
        pc=pc,
        sp=sp,
        function=function,
        function_offset=function_offset,
        file=file,
        line=line or None,
        column=column or None,
        inlined=bool(frame.is_inline),
        trust=trust,
        module=module,
    )
