"""Run a command with stdin from a generator of N MiB of ELF-like bytes and
print the command's peak RSS (KiB, from os.wait4) and wall time as JSON.

Run as a fresh interpreter: a process forked from a big one inherits the
parent's ru_maxrss (exec keeps the old mm's high-water mark), so the test
starts this small program, which forks the measured command itself.
Usage: python rss_probe.py MIB -- command args...
"""

import json
import os
import sys
import time

CHUNK = 1 << 20


def blocks() -> list[bytes]:
    rnd = os.urandom(CHUNK)
    zero = bytes(CHUNK)
    text = (b"libc.so.6 /usr/lib/x86_64-linux-gnu/ GLIBC_2.34 " * 30000)[:CHUNK]
    return [zero, rnd[: CHUNK // 2] + zero[: CHUNK // 2], text, zero, rnd[:4096] * 256]


def main() -> None:
    mib = int(sys.argv[1])
    cmd = sys.argv[sys.argv.index("--") + 1:]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.dup2(r, 0)
        os.execv(cmd[0], cmd)
    os.close(r)
    started = time.monotonic()
    data = blocks()
    header = b"\x7fELF\x02\x01\x01" + bytes(CHUNK - 7)
    os.write(w, header)
    for i in range(1, mib):
        view = memoryview(data[i % len(data)])
        while view:
            view = view[os.write(w, view):]
    os.close(w)
    _, status, usage = os.wait4(pid, 0)
    print(json.dumps({"maxrss_kib": usage.ru_maxrss, "seconds": time.monotonic() - started,
                      "status": os.waitstatus_to_exitcode(status), "bytes": mib * CHUNK}))


if __name__ == "__main__":
    main()
