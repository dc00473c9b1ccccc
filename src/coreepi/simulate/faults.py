"""Hardware fault injection from outside the program, and real cores, with gdb.

A hardware fault is not a bug of the program: the CPU computes a wrong stack
pointer, a register or a memory word loses a bit. The injector does to a
running process what such hardware would do. The workload runs under
``gdb -batch`` (started with ``starti``: gdb is its parent, so no ptrace
attach permission is needed, whatever ``kernel.yama.ptrace_scope`` says);
at chosen delays the driver sends the process SIGSTOP, which stops it
wherever it is — a random instant of its own execution — and the gdb script
applies the next planned fault:

``rsp-8`` / ``rsp+8``
    the stack pointer off by 8 (DESIGN.md's bad CPU);
``reg-bitflip``
    one bit of a general-purpose register or rip flipped;
``stack-bitflip`` / ``heap-bitflip``
    one bit of a word ``offset`` words above rsp, or of the heap word at
    ``fraction`` of the ``[heap]`` mapping, flipped.

Then it lets the process run on. The process crashes wherever that leads —
gdb stops at the fatal signal and writes the core with ``gcore`` before the
signal is delivered, like ``tests/corefactory.py`` — or it does not crash
(the fault hit a dead value), and the next fault follows, until the planned
faults are used up and the healthy run ends. A stop that comes before the
process ran on from the last fault (on a loaded machine, while gdb was still
applying it) strikes nothing: a second rsp-8 there would make rsp 16 off,
not model the disease again. Everything that happened is
logged: where each fault landed (pc, sp, symbol, old and new values) and
where the process crashed.

Runs without faults (a bug of the program) use the same script: the program
crashes on its own. Nothing global is touched: no core_pattern, no sysctl;
only our own child processes are traced, and they are killed by pid when
the run ends or is interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GDB_SCRIPT", "GdbRun", "run_under_gdb"]

#: the gdb Python script (run with ``gdb -batch -x``); its configuration is a
#: JSON file named by $COREEPI_GDB_CONFIG, its log the file named there.
GDB_SCRIPT = r"""
import json, os, signal
import gdb

MASK = (1 << 64) - 1
cfg = json.load(open(os.environ["COREEPI_GDB_CONFIG"]))
log = {"state": "starting", "faults": []}


def save():
    tmp = cfg["log"] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(log, fh)
    os.replace(tmp, cfg["log"])


def reg(name):
    return int(gdb.parse_and_eval("(unsigned long)$" + name)) & MASK


def where():
    pc = reg("pc")
    try:
        sym = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    except gdb.error:
        sym = ""
    if sym.startswith("No symbol"):
        sym = ""
    return {"pc": "0x%x" % pc, "sp": "0x%x" % reg("sp"), "symbol": sym.split(" in section")[0]}


def word(addr):
    return int(gdb.parse_and_eval("*(unsigned long *)0x%x" % addr)) & MASK


def heap_range(pid):
    with open("/proc/%d/maps" % pid) as fh:
        for line in fh:
            if line.rstrip().endswith("[heap]"):
                lo, hi = line.split()[0].split("-")
                return int(lo, 16), int(hi, 16)
    return None


def moved_since(done):
    # whether the process ran since the last fault: not at its pc with the sp it left
    if not done:
        return True
    last, here = done[-1], where()
    sp = last.get("new") if last.get("target") == "rsp" else last["at"]["sp"]
    return (here["pc"], here["sp"]) != (last["at"]["pc"], sp)


def apply(f, pid):
    rec = {"fault": f, "at": where()}
    kind = f["kind"]
    try:
        if kind in ("rsp-8", "rsp+8"):
            old = reg("rsp")
            new = (old - 8 if kind == "rsp-8" else old + 8) & MASK
            gdb.execute("set $rsp = 0x%x" % new)
            rec.update(target="rsp", old="0x%x" % old, new="0x%x" % new)
        elif kind == "reg-bitflip":
            name = f["register"]
            old = reg(name)
            new = old ^ (1 << f["bit"])
            gdb.execute("set $%s = 0x%x" % ("pc" if name == "rip" else name, new))
            rec.update(target=name, old="0x%x" % old, new="0x%x" % new)
        else:
            if kind == "stack-bitflip":
                addr = reg("rsp") + 8 * f["offset"]
            else:
                rng = heap_range(pid)
                if rng is None:
                    rec.update(target="heap", skipped="no [heap] mapping")
                    return rec
                words = (rng[1] - rng[0]) // 8
                addr = rng[0] + 8 * min(int(f["fraction"] * words), words - 1)
            old = word(addr)
            new = old ^ (1 << f["bit"])
            gdb.execute("set *(unsigned long *)0x%x = 0x%x" % (addr, new))
            rec.update(target="0x%x" % addr, old="0x%x" % old, new="0x%x" % new)
    except gdb.error as exc:
        rec["skipped"] = str(exc)
    return rec


def main():
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    gdb.execute("set disable-randomization off")  # ASLR, like any fleet host
    gdb.execute("handle SIGSTOP stop print nopass")
    for sig in cfg["pass_signals"]:
        gdb.execute("handle %s nostop noprint pass" % sig)
    faults = cfg["faults"]
    if cfg.get("exec_wrapper"):
        gdb.execute("set exec-wrapper " + cfg["exec_wrapper"])
    gdb.execute("starti", to_string=True)
    pid = gdb.selected_inferior().pid
    if faults:
        # faults strike the program's own execution, not the dynamic loader
        try:
            gdb.execute("tbreak main", to_string=True)
            gdb.execute("continue", to_string=True)
        except gdb.error:
            pass
    log.update(state="running", pid=pid)
    save()
    while True:
        try:
            gdb.execute("continue", to_string=True)
        except gdb.error as exc:
            log.update(state="done", outcome="gdb-error", error=str(exc))
            break
        inf = gdb.selected_inferior()
        if inf.pid == 0 or not inf.threads():
            log.update(state="done", outcome="exited")
            break
        signo = int(gdb.parse_and_eval("$_siginfo.si_signo"))
        if signo == signal.SIGSTOP:
            if len(log["faults"]) >= len(faults):
                continue  # a late stop: nothing left to inject
            if not moved_since(log["faults"]):
                # the stop came while the last fault was being applied (a loaded
                # machine): a fault now would add to it (rsp off by 16), not
                # strike anew; the fault waits for the next stop
                continue
            log["faults"].append(apply(faults[len(log["faults"])], pid))
            save()
            continue
        info = {
            "signal": signo,
            "si_code": int(gdb.parse_and_eval("$_siginfo.si_code")),
            "fault_address": "0x%x" % (int(gdb.parse_and_eval(
                "(unsigned long)$_siginfo._sifields._sigfault.si_addr")) & MASK),
        }
        info.update(where())
        log.update(state="crashed", crash=info)
        save()
        gdb.execute("gcore " + cfg["core"], to_string=True)
        log.update(state="done", outcome="crashed")
        break
    save()
    try:
        gdb.execute("kill", to_string=True)
    except gdb.error:
        pass


try:
    main()
except Exception as exc:  # noqa: BLE001 - reported through the log
    log.update(state="done", outcome="script-error", error="%s: %s" % (type(exc).__name__, exc))
    save()
"""


@dataclass
class GdbRun:
    """What one run under gdb did. ``outcome``: ``crashed`` (``core`` written),
    ``exited`` (the program ended without crashing), ``timeout``, or an
    error (``gdb-error``, ``script-error``, ``no-gdb-log``)."""

    outcome: str
    core: Path | None
    crash: dict[str, Any] | None = None
    faults: list[dict[str, Any]] = field(default_factory=list)
    faults_sent: int = 0
    seconds: float = 0.0
    error: str | None = None
    gdb_output: str = ""

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"outcome": self.outcome, "seconds": round(self.seconds, 3)}
        if self.crash:
            d["crash"] = self.crash
        if self.faults or self.faults_sent:
            d["faults_applied"] = self.faults
            d["faults_sent"] = self.faults_sent
        if self.error:
            d["error"] = self.error
        return d


def _read_log(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_under_gdb(
    binary: Path,
    argv: Sequence[str],
    core: Path,
    workdir: Path,
    *,
    faults: Sequence[dict[str, Any]] = (),
    pass_signals: Sequence[str] = (),
    stack_kib: int | None = None,
    timeout: float = 60.0,
) -> GdbRun:
    """Run ``binary argv`` under gdb; inject ``faults`` (dicts of
    :class:`coreepi.simulate.sampling.PlannedFault`, each ``delay_ms`` after
    the previous) from outside; write ``core`` with gcore at the fatal signal.

    ``workdir`` holds the script, its configuration and log. The gdb process
    and the program are killed (by pid) on timeout or interruption."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "inject.py"
    script.write_text(GDB_SCRIPT)
    log_path = workdir / "gdb-log.json"
    config = {
        "faults": list(faults),
        "pass_signals": list(pass_signals),
        "core": str(core),
        "log": str(log_path),
        "exec_wrapper": (
            f'/bin/sh -c \'ulimit -S -s {stack_kib} && exec "$0" "$@"\'' if stack_kib else None
        ),
    }
    (workdir / "config.json").write_text(json.dumps(config))
    env = dict(os.environ, DEBUGINFOD_URLS="", COREEPI_GDB_CONFIG=str(workdir / "config.json"))
    # auto-load off: no libthread_db or Python pretty-printers (single-threaded
    # workloads; gcore still writes every LWP), which saves a tenth of the run
    argv_gdb = [
        "gdb",
        "-batch",
        "-nx",
        "-iex",
        "set debuginfod enabled off",
        "-iex",
        "set auto-load off",
        "-x",
        str(script),
        "--args",
        str(binary),
        *argv,
    ]
    started = time.monotonic()
    out_path = workdir / "gdb-output.txt"
    with open(out_path, "wb") as out:
        gdb = subprocess.Popen(
            argv_gdb,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    pid: int | None = None
    sent = 0
    try:
        deadline = started + timeout
        # wait for the program to exist
        while gdb.poll() is None and time.monotonic() < deadline:
            pid = _read_log(log_path).get("pid")
            if pid:
                break
            time.sleep(0.005)
        for fault in faults:
            stop_at = time.monotonic() + fault.get("delay_ms", 100) / 1000
            while gdb.poll() is None and time.monotonic() < min(stop_at, deadline):
                time.sleep(0.002)
            if gdb.poll() is not None or time.monotonic() >= deadline or pid is None:
                break
            if _read_log(log_path).get("state") != "running":
                break  # crashed: gcore is being written
            os.kill(pid, signal.SIGSTOP)
            sent += 1
        try:
            gdb.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass
    finally:
        if gdb.poll() is None:
            if pid:
                _kill(pid)
            _kill(gdb.pid)
            gdb.wait()
    seconds = time.monotonic() - started
    log = _read_log(log_path)
    text = out_path.read_text(errors="replace")[-4000:]
    outcome = log.get("outcome") or ("timeout" if seconds >= timeout else "no-gdb-log")
    if outcome == "crashed" and not core.is_file():
        outcome = "gcore-failed"
    return GdbRun(
        outcome=outcome,
        core=core if outcome == "crashed" else None,
        crash=log.get("crash"),
        faults=log.get("faults", []),
        faults_sent=sent,
        seconds=seconds,
        error=log.get("error") or (None if outcome in ("crashed", "exited") else text[-1500:]),
        gdb_output=text,
    )
