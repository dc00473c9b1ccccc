"""The ptrace capture mode: run a command with its whole process tree traced,
and write the core of every process that is about to die of a core-dumping signal.

The command is started seized (PTRACE_SEIZE before its ``exec``, with
TRACEFORK/VFORK/CLONE/EXEC), so every process and thread of its tree is
traced from its first instruction. At a signal-delivery-stop whose signal's
default action is to dump core (signal(7)) and which the process neither
catches nor ignores, the supervisor stops the process's other threads
(PTRACE_INTERRUPT), reads their registers, writes the core
(:mod:`~coreepi.capture.supervise.elfcore`) and then delivers the signal: the
process dies exactly as it would have, with the same signal and exit status.
Every other stop is passed through unchanged (signals re-injected, group-stops
kept with PTRACE_LISTEN).

When the command's own process exits, tracees still alive (daemons the
command left behind) are detached, so they run on untraced and ``ci run``
returns. The supervisor runs in one thread: ptrace requests must come from
the thread that attached.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from coreepi.capture.supervise import ptrace
from coreepi.capture.supervise.base import CapturedCrash, CaptureResult
from coreepi.capture.supervise.elfcore import ThreadRegs, write_core
from coreepi.capture.supervise.ptrace_users import ptrace_user

__all__ = ["CORE_SIGNALS", "run_traced"]

# signal(7): the signals whose default action is "Core".
CORE_SIGNALS = frozenset({
    signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP, signal.SIGABRT, signal.SIGBUS,
    signal.SIGFPE, signal.SIGSEGV, signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSYS,
})
_GROUP_STOP = frozenset({signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU})


def _proc_status(tid: int) -> dict[str, str]:
    text = Path(f"/proc/{tid}/status").read_text(errors="replace")
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _dies_of(tid: int, sig: int) -> bool:
    """Will delivering ``sig`` to ``tid`` kill it with a core? True when the
    signal dumps core by default and the process neither catches nor ignores
    it (a fault signal that is blocked or ignored was already reset to the
    default action by the kernel, force_sig_info_to_task)."""
    if sig not in CORE_SIGNALS:
        return False
    try:
        status = _proc_status(tid)
    except OSError:
        return False
    bit = 1 << (sig - 1)
    return not (int(status.get("SigCgt", "0"), 16) & bit or int(status.get("SigIgn", "0"), 16)
                & bit)


def _ignore_gone(call: object, *args: int) -> bool:
    """Run a ptrace call; False when the tracee is gone (ESRCH)."""
    try:
        call(*args)  # type: ignore[operator]
    except OSError as exc:
        if exc.errno != errno.ESRCH:
            raise
        return False
    return True


class _Supervisor:
    def __init__(self, root: int, core_dir: Path) -> None:
        self.root, self.core_dir = root, core_dir
        self.tracees: set[int] = {root}
        self.dumped: set[int] = set()  # thread groups whose core is written
        self.crashes: list[CapturedCrash] = []
        self.root_status: int | None = None
        self.untraced: list[str] = []  # programs let go at exec, and why

    def loop(self) -> None:
        while self.root_status is None:
            try:
                tid, status = os.waitpid(-1, ptrace.WALL)
            except ChildProcessError:
                return
            self.handle(tid, status)
        self.release()

    def handle(self, tid: int, status: int) -> None:
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            self.tracees.discard(tid)
            self.dumped.discard(tid)
            if tid == self.root:
                self.root_status = status
            return
        if not os.WIFSTOPPED(status):
            return
        self.tracees.add(tid)
        sig, event = os.WSTOPSIG(status), status >> 16
        if event in (ptrace.EVENT_FORK, ptrace.EVENT_VFORK, ptrace.EVENT_CLONE):
            try:
                self.tracees.add(ptrace.get_event_msg(tid))
            except OSError:  # the parent died meanwhile; the child reports itself
                pass
            _ignore_gone(ptrace.cont, tid)
        elif event == ptrace.EVENT_EXEC and (why := ptrace_user(tid)):
            self.let_go(tid, why)
        elif event == ptrace.EVENT_STOP:
            _ignore_gone(ptrace.listen if sig in _GROUP_STOP else ptrace.cont, tid)
        elif event:
            _ignore_gone(ptrace.cont, tid)
        else:  # signal-delivery-stop
            if _dies_of(tid, sig):
                self.dump(tid, sig)
            _ignore_gone(ptrace.cont, tid, sig)

    def let_go(self, tid: int, why: str) -> None:
        """Detach a process that has just exec'd a program that ptraces (itself
        or a child): it runs untraced, as without coreepi, and so do its
        children; its crashes are not captured here (say so)."""
        try:
            comm = Path(f"/proc/{tid}/comm").read_text(errors="replace").strip()
        except OSError:
            comm = "?"
        if _ignore_gone(ptrace.detach, tid):
            self.tracees.discard(tid)
            self.untraced.append(f"pid {tid} ({comm}) runs untraced, its crashes not captured "
                                 f"by ptrace: {why}")

    def dump(self, tid: int, sig: int) -> None:
        """Write the core of ``tid``'s process, all its threads stopped."""
        started = time.perf_counter()
        try:
            pid = int(_proc_status(tid)["Tgid"])
        except (OSError, KeyError, ValueError):
            return
        if pid in self.dumped:  # a second thread faulting while the first dies
            return
        self.dumped.add(pid)
        crash = CapturedCrash(core=None, pid=pid, signal=sig)
        try:
            crash.comm = Path(f"/proc/{pid}/comm").read_text(errors="replace").strip()
            crash.exe = os.readlink(f"/proc/{pid}/exe")
            crash.cmdline = [a.decode(errors="replace") for a in
                             Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
        except OSError:
            pass
        later = self.stop_others(pid, tid)
        try:
            siginfo = ptrace.get_siginfo(tid)
            threads = [self.regs(t) for t in [tid, *later]]
            path = self.core_dir / f"core.{crash.comm or 'unknown'}.{pid}"
            write_core(path, pid, threads, siginfo)
            crash.core = path
        except OSError as exc:
            crash.error = f"core of pid {pid} not written: {exc}"
        crash.seconds = time.perf_counter() - started
        self.crashes.append(crash)
        for t, status in later.items():
            if status >> 16 == ptrace.EVENT_STOP and os.WSTOPSIG(status) not in _GROUP_STOP:
                _ignore_gone(ptrace.cont, t)  # our own interrupt: just resume
            else:
                self.handle(t, status)

    def stop_others(self, pid: int, tid: int) -> dict[int, int]:
        """Interrupt every other thread of ``pid``; {tid: its stop status}."""
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != tid]
        except OSError:
            return {}
        asked = [t for t in tids if _ignore_gone(ptrace.interrupt, t)]
        stopped: dict[int, int] = {}
        for t in asked:
            try:
                _, status = os.waitpid(t, ptrace.WALL)
            except ChildProcessError:
                continue
            if os.WIFSTOPPED(status):
                stopped[t] = status
            else:
                self.handle(t, status)
        return stopped

    @staticmethod
    def regs(tid: int) -> ThreadRegs:
        try:
            fpregs = ptrace.get_regset(tid, ptrace.NT_PRFPREG)
        except OSError:
            fpregs = b""
        return ThreadRegs(tid, ptrace.get_regset(tid, ptrace.NT_PRSTATUS), fpregs)

    def release(self) -> None:
        """Detach every tracee still alive (the command's leftovers)."""
        asked = [t for t in self.tracees if _ignore_gone(ptrace.interrupt, t)]
        for t in asked:
            try:
                _, status = os.waitpid(t, ptrace.WALL)
            except ChildProcessError:
                continue
            if os.WIFSTOPPED(status):
                pending = os.WSTOPSIG(status) if status >> 16 == 0 else 0
                _ignore_gone(ptrace.detach, t, pending)


def run_traced(argv: Sequence[str], core_dir: Path, *, env: Mapping[str, str] | None = None
               ) -> CaptureResult:
    """Run ``argv`` (PATH searched) traced; cores go to ``core_dir``. Raises
    OSError when ptrace is not permitted here (seccomp, Yama scope 3)."""
    read_end, write_end = os.pipe()
    environ = dict(os.environ if env is None else env)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child execs)
        try:
            os.close(write_end)
            os.read(read_end, 1)  # wait until the parent has seized us
            os.execvpe(argv[0], list(argv), environ)
        except OSError as exc:
            os.write(2, f"coreepi: {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)
    os.close(read_end)
    try:
        ptrace.seize(child)
    except OSError:
        os.kill(child, signal.SIGKILL)  # our own child, never started
        os.waitpid(child, 0)
        os.close(write_end)
        raise
    os.write(write_end, b"go")
    os.close(write_end)
    supervisor = _Supervisor(child, core_dir)
    supervisor.loop()
    status = supervisor.root_status
    code = 0 if status is None else (os.waitstatus_to_exitcode(status))
    return CaptureResult(mode="ptrace", returncode=code, crashes=supervisor.crashes,
                         warnings=supervisor.untraced)
