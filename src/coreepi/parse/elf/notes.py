"""Decode the notes of a Linux ELF core: NT_PRSTATUS, NT_PRPSINFO, NT_SIGINFO,
NT_AUXV and NT_FILE.

Layouts are the 64-bit ones of ``include/uapi/linux/elfcore.h``,
``include/linux/elfcore.h`` and the registers of ``arch/x86/include/asm/user_64.h``
(``struct user_regs_struct``) and ``arch/arm64/include/uapi/asm/ptrace.h``
(``struct user_pt_regs``). Both architectures share the generic prstatus and
prpsinfo layout; only ``pr_reg`` differs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from coreepi.parse.elf.corefile import CoreFile

__all__ = ["CoreNotes", "FileMapping", "Prstatus", "Prpsinfo", "Siginfo", "read_notes", "REGISTERS"]

NT_PRSTATUS = 1
NT_PRPSINFO = 3
NT_AUXV = 6
NT_SIGINFO = 0x53494749
NT_FILE = 0x46494C45

# NT_FILE bounds. The kernel writes at most 4 MiB of NT_FILE (fs/binfmt_elf.c,
# MAX_FILE_NOTE_SIZE), so under 170k entries; gdb's gcore one per mapping
# (vm.max_map_count, 65530 by default). Each entry costs ~3 KiB downstream.
MAX_FILE_ENTRIES = 1 << 18
MAX_PAGE_SIZE = 1 << 30
_U64_MAX = (1 << 64) - 1

REGISTERS: dict[str, tuple[str, ...]] = {
    # struct user_regs_struct, in order
    "x86_64": (
        "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
        "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
        "gs_base", "ds", "es", "fs", "gs",
    ),
    # struct user_pt_regs: x0..x30, sp, pc, pstate
    "aarch64": tuple(f"x{i}" for i in range(31)) + ("sp", "pc", "pstate"),
}  # fmt: skip
PC_REGISTER = {"x86_64": "rip", "aarch64": "pc"}
SP_REGISTER = {"x86_64": "rsp", "aarch64": "sp"}

# prstatus: si_signo, si_code, si_errno (3 x i32), pr_cursig (i16) + pad,
# pr_sigpend, pr_sighold (u64), pid, ppid, pgrp, sid (i32), 4 timevals (64 bytes).
_PRSTATUS_HEAD = struct.Struct("<iiihxxQQiiii")
_PR_REG_OFFSET = 112
# prpsinfo: state, sname, zomb, nice (chars), pad, pr_flag (u64), uid, gid (u32),
# pid, ppid, pgrp, sid (i32), fname[16], psargs[80].
_PRPSINFO = struct.Struct("<bcbb4xQIIiiii16s80s")

AT_NAMES = {
    3: "PHDR", 4: "PHENT", 5: "PHNUM", 6: "PAGESZ", 7: "BASE", 8: "FLAGS", 9: "ENTRY",
    11: "UID", 12: "EUID", 13: "GID", 14: "EGID", 15: "PLATFORM", 16: "HWCAP", 17: "CLKTCK",
    23: "SECURE", 24: "BASE_PLATFORM", 25: "RANDOM", 26: "HWCAP2", 27: "RSEQ_FEATURE_SIZE",
    28: "RSEQ_ALIGN", 29: "HWCAP3", 30: "HWCAP4", 31: "EXECFN", 32: "SYSINFO",
    33: "SYSINFO_EHDR", 51: "MINSIGSTKSZ",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Prstatus:
    """One thread's NT_PRSTATUS: its tid, pending signal and registers."""

    tid: int
    cursig: int
    ppid: int
    registers: dict[str, int]


@dataclass(frozen=True, slots=True)
class Prpsinfo:
    pid: int
    ppid: int
    uid: int
    gid: int
    fname: str
    psargs: str


@dataclass(frozen=True, slots=True)
class Siginfo:
    """NT_SIGINFO: the kernel's ``siginfo_t`` for the fatal signal (128 bytes)."""

    signo: int
    errno: int
    code: int
    addr: int  # si_addr, meaningful for fault signals
    pid: int  # si_pid / si_uid, meaningful for kill/tgkill
    uid: int


@dataclass(frozen=True, slots=True)
class FileMapping:
    """One NT_FILE entry: a file-backed mapping (offset in bytes)."""

    start: int
    end: int
    offset: int
    path: str


@dataclass(slots=True)
class CoreNotes:
    threads: list[Prstatus] = field(default_factory=list)
    prpsinfo: Prpsinfo | None = None
    siginfo: Siginfo | None = None
    auxv: dict[int, int] = field(default_factory=dict)
    auxv_raw: bytes = b""
    files: list[FileMapping] = field(default_factory=list)
    page_size: int | None = None
    warnings: list[str] = field(default_factory=list)


def read_notes(core: CoreFile) -> CoreNotes:
    """Decode the process notes of ``core``. Notes of other owners or types are
    skipped; a note too short for its type adds a warning instead of failing."""
    out = CoreNotes()
    regnames = REGISTERS[core.arch]
    for note in core.notes():
        if note.name != "CORE":
            continue
        if note.type == NT_PRSTATUS:
            desc = core.note_desc(note)
            need = _PR_REG_OFFSET + 8 * len(regnames)
            if len(desc) < need:
                out.warnings.append(f"NT_PRSTATUS of {len(desc)} bytes, expected >= {need}")
                continue
            _signo, _code, _errno, cursig, _pend, _hold, pid, ppid, _pgrp, _sid = (
                _PRSTATUS_HEAD.unpack_from(desc)
            )
            values = struct.unpack_from(f"<{len(regnames)}Q", desc, _PR_REG_OFFSET)
            out.threads.append(Prstatus(pid, cursig, ppid, dict(zip(regnames, values))))
        elif note.type == NT_PRPSINFO:
            desc = core.note_desc(note)
            if len(desc) < _PRPSINFO.size:
                out.warnings.append(f"NT_PRPSINFO of {len(desc)} bytes, expected {_PRPSINFO.size}")
                continue
            _st, _sn, _z, _n, _flag, uid, gid, pid, ppid, _pg, _sid, fname, psargs = (
                _PRPSINFO.unpack_from(desc)
            )
            out.prpsinfo = Prpsinfo(pid, ppid, uid, gid, _cstr(fname), _cstr(psargs))
        elif note.type == NT_SIGINFO:
            desc = core.note_desc(note)
            if len(desc) < 24:
                out.warnings.append(f"NT_SIGINFO of {len(desc)} bytes, expected 128")
                continue
            signo, errno, code = struct.unpack_from("<iii", desc)
            (addr,) = struct.unpack_from("<Q", desc, 16)
            pid, uid = struct.unpack_from("<iI", desc, 16)
            # gcore writes one NT_SIGINFO per thread (the others say SIGSTOP,
            # gdb stopped them); the first, right after the crashing thread's
            # NT_PRSTATUS, is the fatal one. The kernel writes only that one.
            if out.siginfo is None:
                out.siginfo = Siginfo(signo, errno, code, addr, pid, uid)
        elif note.type == NT_AUXV:
            desc = core.note_desc(note)
            out.auxv_raw = desc
            for i in range(0, len(desc) - 15, 16):
                key, value = struct.unpack_from("<QQ", desc, i)
                if key == 0:
                    break
                out.auxv[key] = value
        elif note.type == NT_FILE:
            _decode_nt_file(core.note_desc(note), out)
    return out


def _decode_nt_file(desc: bytes, out: CoreNotes) -> None:
    """NT_FILE (fs/binfmt_elf.c, fill_files_note): count, page size, count
    (start, end, page offset) triples, then count NUL-terminated paths."""
    if len(desc) < 16:
        out.warnings.append("NT_FILE note too short")
        return
    count, page_size = struct.unpack_from("<QQ", desc)
    table_end = 16 + 24 * count
    if count > len(desc) // 24 or table_end > len(desc):
        out.warnings.append(f"NT_FILE claims {count} entries, more than its {len(desc)} bytes hold")
        return
    if count > MAX_FILE_ENTRIES:
        out.warnings.append(f"NT_FILE has {count} entries; only {MAX_FILE_ENTRIES} are read")
        count = MAX_FILE_ENTRIES
    if page_size & (page_size - 1) or page_size > MAX_PAGE_SIZE:
        out.warnings.append(f"NT_FILE page size {page_size} is impossible; file offsets unknown")
        page_size = 0
    names = desc[table_end:].split(b"\0", count)
    if len(names) < count:
        out.warnings.append(f"NT_FILE has {len(names)} paths for {count} entries")
    out.page_size = page_size or None
    bad = 0
    for i in range(count):
        start, end, pgoff = struct.unpack_from("<QQQ", desc, 16 + 24 * i)
        offset = pgoff * page_size
        if start >= end or offset > _U64_MAX:
            bad += 1
            continue
        path = names[i].decode("utf-8", "surrogateescape") if i < len(names) else "?"
        out.files.append(FileMapping(start, end, offset, path))
    if bad:
        out.warnings.append(f"NT_FILE: skipped {bad} entries with an empty range or a bad offset")


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()
