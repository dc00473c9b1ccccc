"""Linux signal and si_code names.

Numbers are the asm-generic / x86 numbering, which x86-64 and aarch64 share
(``include/uapi/asm-generic/signal.h``); si_code values come from
``include/uapi/asm-generic/siginfo.h`` (see also sigaction(2)).
"""

from __future__ import annotations

__all__ = ["signal_name", "si_code_name", "has_fault_address", "has_sender"]

SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
    18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG",
    24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH",
    29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS",
}  # fmt: skip

SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV, SIGCHLD, SIGIO, SIGSYS = 4, 5, 7, 8, 11, 17, 29, 31

# si_code <= 0 (and SI_KERNEL) mean the same for every signal.
_GENERIC = {
    0: "SI_USER", 0x80: "SI_KERNEL", -1: "SI_QUEUE", -2: "SI_TIMER", -3: "SI_MESGQ",
    -4: "SI_ASYNCIO", -5: "SI_SIGIO", -6: "SI_TKILL", -7: "SI_DETHREAD", -60: "SI_ASYNCNL",
}  # fmt: skip

_PER_SIGNAL: dict[int, dict[int, str]] = {
    SIGILL: {
        1: "ILL_ILLOPC", 2: "ILL_ILLOPN", 3: "ILL_ILLADR", 4: "ILL_ILLTRP",
        5: "ILL_PRVOPC", 6: "ILL_PRVREG", 7: "ILL_COPROC", 8: "ILL_BADSTK", 9: "ILL_BADIADDR",
    },
    SIGFPE: {
        1: "FPE_INTDIV", 2: "FPE_INTOVF", 3: "FPE_FLTDIV", 4: "FPE_FLTOVF", 5: "FPE_FLTUND",
        6: "FPE_FLTRES", 7: "FPE_FLTINV", 8: "FPE_FLTSUB", 14: "FPE_FLTUNK", 15: "FPE_CONDTRAP",
    },
    SIGSEGV: {
        1: "SEGV_MAPERR", 2: "SEGV_ACCERR", 3: "SEGV_BNDERR", 4: "SEGV_PKUERR",
        5: "SEGV_ACCADI", 6: "SEGV_ADIDERR", 7: "SEGV_ADIPERR", 8: "SEGV_MTEAERR",
        9: "SEGV_MTESERR", 10: "SEGV_CPERR",
    },
    SIGBUS: {
        1: "BUS_ADRALN", 2: "BUS_ADRERR", 3: "BUS_OBJERR", 4: "BUS_MCEERR_AR",
        5: "BUS_MCEERR_AO",
    },
    SIGTRAP: {
        1: "TRAP_BRKPT", 2: "TRAP_TRACE", 3: "TRAP_BRANCH", 4: "TRAP_HWBKPT", 5: "TRAP_UNK",
        6: "TRAP_PERF",
    },
    SIGCHLD: {
        1: "CLD_EXITED", 2: "CLD_KILLED", 3: "CLD_DUMPED", 4: "CLD_TRAPPED", 5: "CLD_STOPPED",
        6: "CLD_CONTINUED",
    },
    SIGIO: {1: "POLL_IN", 2: "POLL_OUT", 3: "POLL_MSG", 4: "POLL_ERR", 5: "POLL_PRI", 6: "POLL_HUP"},
    SIGSYS: {1: "SYS_SECCOMP", 2: "SYS_USER_DISPATCH"},
}  # fmt: skip

_FAULT_SIGNALS = {SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV}


def signal_name(number: int) -> str | None:
    """``SIGSEGV`` for 11; ``SIGRTMIN+n`` for real-time signals; None if unknown."""
    if number in SIGNALS:
        return SIGNALS[number]
    if 34 <= number <= 64:
        return f"SIGRTMIN+{number - 34}" if number > 34 else "SIGRTMIN"
    return None


def si_code_name(signo: int, si_code: int) -> str | None:
    """The symbolic si_code (``SEGV_MAPERR``, ``SI_TKILL`` …) or None if unknown."""
    if si_code <= 0 or si_code == 0x80:
        return _GENERIC.get(si_code)
    return _PER_SIGNAL.get(signo, {}).get(si_code)


def has_fault_address(signo: int, si_code: int) -> bool:
    """True when siginfo's union holds si_addr: a fault signal raised by the
    kernel (si_code > 0), not one sent with kill/tgkill."""
    return signo in _FAULT_SIGNALS and 0 < si_code < 0x80


def has_sender(si_code: int) -> bool:
    """True when siginfo's union holds si_pid/si_uid (kill, tgkill, sigqueue)."""
    return si_code in (0, -1, -6)
