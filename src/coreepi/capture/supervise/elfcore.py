"""Write a stopped process's ELF core file, as the kernel (and gdb's ``gcore``) do.

The supervisor calls :func:`write_core` while every thread of the process is
stopped under ptrace, before the fatal signal is delivered. Layout
(``fs/binfmt_elf.c``, ``elf_core_dump``): ELF header, one PT_NOTE, one PT_LOAD
per mapping of ``/proc/PID/maps``; notes in the kernel's order: for the
crashing thread NT_PRSTATUS, NT_PRPSINFO, NT_SIGINFO, NT_AUXV, NT_FILE,
NT_PRFPREG; then NT_PRSTATUS and NT_PRFPREG of every other thread.

What is dumped follows the kernel's default ``coredump_filter`` (0x33,
``vma_dump_size`` in ``fs/coredump.c``): anonymous mappings, private file
mappings that have been written to (``Anonymous:`` > 0 in ``smaps``), the
vDSO, and the first page of file mappings that start with an ELF header (so a
reader finds every module's build-id); other file mappings are left to the
files themselves (``p_filesz`` 0, as the kernel does). Pages that read as
zeros become holes (a sparse file). Struct layouts: 64-bit
``struct elf_prstatus`` / ``elf_prpsinfo`` (``include/linux/elfcore.h``).
"""

from __future__ import annotations

import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ThreadRegs", "write_core"]

PAGE = os.sysconf("SC_PAGE_SIZE")
CHUNK = 1 << 20
_ZERO = bytes(CHUNK)

NT_PRSTATUS, NT_PRFPREG, NT_PRPSINFO, NT_AUXV = 1, 2, 3, 6
NT_SIGINFO, NT_FILE = 0x53494749, 0x46494C45
PT_LOAD, PT_NOTE = 1, 4
ET_CORE = 4
E_MACHINE = {"x86_64": 62, "aarch64": 183}
EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
PHDR = struct.Struct("<IIQQQQQQ")
# si_signo, si_code, si_errno, pr_cursig (+2 pad), pr_sigpend, pr_sighold,
# pid, ppid, pgrp, sid, then four struct timevals (left zero).
PRSTATUS_HEAD = struct.Struct("<iiihxxQQiiii64x")
PRPSINFO = struct.Struct("<bcbb4xQIIiiii16s80s")


@dataclass(frozen=True, slots=True)
class ThreadRegs:
    """One stopped thread: ``gregs`` is its ``elf_gregset_t`` and ``fpregs``
    its FP register set (PTRACE_GETREGSET NT_PRSTATUS / NT_PRFPREG)."""

    tid: int
    gregs: bytes
    fpregs: bytes


@dataclass(frozen=True, slots=True)
class _Vma:
    start: int
    end: int
    perms: str
    offset: int
    path: str
    anonymous_kb: int


def _note(name: bytes, ntype: int, desc: bytes) -> bytes:
    name0 = name + b"\0"
    pad = lambda b: b + bytes(-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(name0), len(desc), ntype) + pad(name0) + pad(desc)


def _vmas(pid: int) -> list[_Vma]:
    """Mappings from ``/proc/PID/smaps``: range, perms, offset, path, Anonymous kB."""
    out: list[_Vma] = []
    head: list[str] | None = None
    anon = 0
    for line in Path(f"/proc/{pid}/smaps").read_text(errors="surrogateescape").splitlines():
        first = line.split(None, 1)[0] if line else ""
        if "-" in first and not first.endswith(":"):
            if head is not None:
                out.append(_vma(head, anon))
            head, anon = line.split(None, 5), 0
        elif first == "Anonymous:":
            anon = int(line.split()[1])
    if head is not None:
        out.append(_vma(head, anon))
    return out


def _vma(fields: list[str], anon: int) -> _Vma:
    lo, hi = fields[0].split("-")
    path = fields[5] if len(fields) > 5 else ""
    return _Vma(int(lo, 16), int(hi, 16), fields[1], int(fields[2], 16), path, anon)


def _dump_size(v: _Vma, mem: int) -> int:
    """Bytes of ``v`` to write (the kernel's vma_dump_size, default filter)."""
    if "r" not in v.perms or v.path in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
        return 0
    file_backed = v.path.startswith("/") and not v.path.startswith("/SYSV")
    if not file_backed or v.anonymous_kb > 0 or v.path == "[vdso]":
        return v.end - v.start
    if v.offset == 0:
        try:
            if os.pread(mem, 4, v.start) == b"\x7fELF":
                return PAGE
        except OSError:
            return 0
    return 0


def _prpsinfo(pid: int) -> bytes:
    stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    rest = stat[stat.rindex(")") + 2 :].split()
    state, ppid, pgrp, sid = rest[0], int(rest[1]), int(rest[2]), int(rest[3])
    nice = int(rest[16])
    status = Path(f"/proc/{pid}/status").read_text(errors="replace")
    ids = {k: int(v.split()[0]) for k, v in
           (line.split(":", 1) for line in status.splitlines() if line.startswith(("Uid", "Gid")))}
    args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").strip()
    sname = state.encode()[:1]
    return PRPSINFO.pack("RSDTZW".find(state) if state in "RSDTZW" else 0, sname,
                         int(state == "Z"), nice, 0, ids["Uid"], ids["Gid"], pid, ppid, pgrp,
                         sid, comm.encode()[:15], args[:79])


def _nt_file(vmas: Sequence[_Vma]) -> bytes:
    files = [v for v in vmas if v.path.startswith("/")]
    table = b"".join(struct.pack("<QQQ", v.start, v.end, v.offset // PAGE) for v in files)
    names = b"".join(v.path.encode("utf-8", "surrogateescape") + b"\0" for v in files)
    return struct.pack("<QQ", len(files), PAGE) + table + names


def _prstatus(pid: int, thread: ThreadRegs, signo: int) -> bytes:
    ppid, pgrp, sid = _parent_group(pid)
    head = PRSTATUS_HEAD.pack(signo, 0, 0, signo, 0, 0, thread.tid, ppid, pgrp, sid)
    return head + thread.gregs + struct.pack("<i4x", int(bool(thread.fpregs)))


def _parent_group(pid: int) -> tuple[int, int, int]:
    stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[2]), int(rest[3])


def _notes(pid: int, threads: Sequence[ThreadRegs], siginfo: bytes, vmas: Sequence[_Vma]
           ) -> bytes:
    signo = struct.unpack_from("<i", siginfo)[0]
    first, *others = threads
    parts = [_note(b"CORE", NT_PRSTATUS, _prstatus(pid, first, signo)),
             _note(b"CORE", NT_PRPSINFO, _prpsinfo(pid)),
             _note(b"CORE", NT_SIGINFO, siginfo),
             _note(b"CORE", NT_AUXV, Path(f"/proc/{pid}/auxv").read_bytes()),
             _note(b"CORE", NT_FILE, _nt_file(vmas))]
    if first.fpregs:
        parts.append(_note(b"CORE", NT_PRFPREG, first.fpregs))
    for t in others:
        parts.append(_note(b"CORE", NT_PRSTATUS, _prstatus(pid, t, signo)))
        if t.fpregs:
            parts.append(_note(b"CORE", NT_PRFPREG, t.fpregs))
    return b"".join(parts)


def _copy(mem: int, out: int, start: int, size: int) -> int:
    """Copy ``size`` bytes of the tracee's memory at ``start`` to ``out``'s
    position, zero chunks as holes; bytes that cannot be read stay zero.
    Returns the bytes actually read."""
    done = read = 0
    while done < size:
        n = min(CHUNK, size - done)
        try:
            data = os.pread(mem, n, start + done)
        except OSError:
            data = b""
        read += len(data)
        if data and data != _ZERO[: len(data)]:
            os.write(out, data)
            os.lseek(out, n - len(data), os.SEEK_CUR)
        else:
            os.lseek(out, n, os.SEEK_CUR)
        done += n
    return read


def write_core(path: Path, pid: int, threads: Sequence[ThreadRegs], siginfo: bytes) -> int:
    """Write the core of process ``pid`` (every thread stopped) to ``path``;
    ``threads[0]`` is the crashing thread, ``siginfo`` its 128-byte
    ``siginfo_t``. Returns the file's apparent size in bytes. Raises
    OSError when /proc cannot be read (the process is gone) or the file
    cannot be written."""
    arch = platform.machine()
    if arch not in E_MACHINE:
        raise OSError(f"cannot write cores for {arch} (only {', '.join(E_MACHINE)})")
    mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        vmas = _vmas(pid)
        sizes = [_dump_size(v, mem) for v in vmas]
        notes = _notes(pid, threads, siginfo, vmas)
        phnum = 1 + len(vmas)
        if phnum >= 0xFFFF:
            raise OSError(f"process {pid} has {len(vmas)} mappings; PN_XNUM cores not written")
        notes_at = EHDR.size + PHDR.size * phnum
        data_at = -(-(notes_at + len(notes)) // PAGE) * PAGE
        phdrs = [PHDR.pack(PT_NOTE, 0, notes_at, 0, 0, len(notes), 0, 4)]
        offset = data_at
        for v, size in zip(vmas, sizes, strict=True):
            flags = (4 if "r" in v.perms else 0) | (2 if "w" in v.perms else 0) | \
                (1 if "x" in v.perms else 0)
            phdrs.append(PHDR.pack(PT_LOAD, flags, offset, v.start, 0, size, v.end - v.start,
                                   PAGE))
            offset += size
        ident = b"\x7fELF\x02\x01\x01" + bytes(9)
        ehdr = EHDR.pack(ident, ET_CORE, E_MACHINE[arch], 1, 0, EHDR.size, 0, 0, EHDR.size,
                         PHDR.size, phnum, 0, 0, 0)
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(out, ehdr + b"".join(phdrs) + notes)
            os.lseek(out, data_at, os.SEEK_SET)
            for v, size in zip(vmas, sizes, strict=True):
                if size:
                    _copy(mem, out, v.start, size)
            os.ftruncate(out, offset)
        finally:
            os.close(out)
    finally:
        os.close(mem)
    return offset
