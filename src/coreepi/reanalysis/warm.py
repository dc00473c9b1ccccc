"""A warm sandbox: the analysis worker imported once, forked once per core.

A cold analysis child (``python -m coreepi.ingest.worker``) spends most of
its CPU before it reads the core: interpreter start-up and the imports of
drgn, pydantic, the parsers and the rules (``docs/scale.md`` has the
profile). A *zygote* (``python -m coreepi.reanalysis.warm``, one per Dask
worker) does those imports once, then forks one child per core. The child
runs exactly what the cold child runs — :func:`coreepi.ingest.worker.main`
with the same arguments, so the same limits (RLIMIT_AS, RLIMIT_CPU, no core
file), the same death with its parent, the same ``TMPDIR`` scratch folder —
and the caller is the same runner: :class:`coreepi.ingest.sandbox.Sandbox`,
given a :class:`WarmLauncher` in place of ``subprocess.Popen``. Its wall-time
limit kills the child by pid; its decoding of what the child printed is
unchanged.

Protocol, over a Unix socket pair (the zygote's standard input):

- the caller sends one JSON line ``{"argv": [...], "env": {...}}`` with two
  file descriptors attached (SCM_RIGHTS): the write ends of the child's
  stdout and stderr pipes;
- the zygote forks and answers ``{"pid": N}``, then, when the child has
  ended, ``{"status": S}`` (S as ``Popen.returncode``: minus the signal
  number for a child killed by a signal).

The zygote also keeps what children learn that is worth keeping: the CFI
indexes of the files cores map (:mod:`coreepi.parse.elf.cfi_cache`, an LRU
by build-id). A child writes the names of the indexes it built (build-id,
role, path; at most :data:`MAX_FEEDBACK_BYTES`) on a pipe the zygote reads
once the child has ended; the zygote builds those indexes itself from the
files, after checking each file's build-id, so the next children inherit
them by fork and a subverted child can make it read a file, never trust
data it wrote.

One child at a time per zygote (a Dask worker runs one task at a time):
:class:`WarmLauncher` serialises callers. The zygote ends at EOF on its
socket, which the kernel delivers whenever its caller's process ends, however
it ends (PR_SET_PDEATHSIG would follow the *thread* that started the zygote,
and a Dask worker's threads come and go); each child dies with the zygote.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["WarmChild", "WarmLauncher", "main"]

_WORKER = ("-m", "coreepi.ingest.worker")

MAX_FEEDBACK_BYTES = 32768
"""What a child may tell the zygote, bytes (below a pipe's 64 KiB buffer: the
child writes it before it ends, the zygote reads it after)."""


def _send(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode() + b"\n"
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


class _Lines:
    """JSON lines read from a socket (and the file descriptors sent with them)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def read(self) -> tuple[dict[str, Any] | None, list[int]]:
        """The next object and the descriptors that came with it; (None, []) at EOF."""
        fds: list[int] = []
        while b"\n" not in self.buf:
            data, got, _flags, _addr = socket.recv_fds(self.sock, 65536, 4)
            fds += got
            if not data:
                return None, fds
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line), fds


def _child(argv: list[str], env: dict[str, str], out_fd: int, err_fd: int,
           sock: socket.socket, feedback_fd: int) -> None:
    """In the forked child: become what ``Popen(..., start_new_session=True)``
    would have started, run the worker's ``main``, tell the zygote what it
    learnt (``feedback_fd``), and never return."""
    code = 1
    try:
        sock.close()  # fd 0: the zygote's end of the socket pair
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out_fd, 1), (err_fd, 2)):
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        # the worker checks it was not re-parented: its parent is this zygote
        from coreepi.ingest.worker import PARENT_PID_ENV, main as worker_main

        os.environ[PARENT_PID_ENV] = str(os.getppid())
        import tempfile

        tempfile.tempdir = None  # read TMPDIR again: the sandbox's scratch folder
        code = worker_main(argv)
        sys.stdout.flush()
        _tell(feedback_fd)
    except BaseException:  # noqa: BLE001 (the child must never return into the zygote's loop)
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _tell(fd: int) -> None:
    """Write the CFI indexes this child built (JSON, bounded) for the zygote."""
    from coreepi.parse.elf.cfi_cache import CACHE

    built: list[list[str]] = []
    size = 2
    for entry in CACHE.take_built():
        size += len(json.dumps(entry)) + 1
        if size > MAX_FEEDBACK_BYTES:
            break
        built.append(list(entry))
    os.write(fd, json.dumps(built).encode())


def _learn(fd: int) -> None:
    """In the zygote, once a child has ended: read what it built (see
    :func:`_tell`) and build those CFI indexes here, each checked against
    its file's build-id (:meth:`coreepi.parse.elf.cfi_cache.CfiCache.fill`).
    Anything malformed is ignored: a child's word is a hint."""
    from coreepi.parse.elf.cfi_cache import CACHE

    os.set_blocking(fd, False)
    data = b""
    try:
        while len(data) <= MAX_FEEDBACK_BYTES and (chunk := os.read(fd, 65536)):
            data += chunk
    except BlockingIOError:
        pass  # a descendant of the child still holds the pipe: what came is all
    try:
        built = json.loads(data)
    except ValueError:
        return
    for entry in built if isinstance(built, list) else ():
        if (isinstance(entry, list) and len(entry) == 3 and all(isinstance(x, str) for x in entry)
                and entry[1] in ("loaded", "debug")):
            CACHE.fill(*entry)


def _preload() -> None:
    """Import what an analysis imports (the cold child's start-up cost: every
    module of ``coreepi.parse`` and ``coreepi.analyze``, most of them imported
    lazily on a core's first use) and read the built-in signature lists."""
    import importlib
    import pkgutil

    import coreepi.analyze
    import coreepi.ingest.artifacts
    import coreepi.ingest.buildid  # noqa: F401
    import coreepi.parse
    from coreepi.analyze.signature.config import load_lists

    for package in (coreepi.analyze, coreepi.parse):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    load_lists()


def main() -> int:
    """The zygote's loop: one request, one forked child, its status; until EOF."""
    _preload()
    # what the zygote holds now is shared with every child: keep the collector
    # from touching (and so copying) those pages in each child
    gc.freeze()
    sock = socket.socket(fileno=0)
    lines = _Lines(sock)
    while True:
        request, fds = lines.read()
        if request is None:
            return 0
        out_fd, err_fd = fds
        feedback_r, feedback_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(feedback_r)
            _child(request["argv"], request["env"], out_fd, err_fd, sock, feedback_w)
        os.close(feedback_w)
        os.close(out_fd)
        os.close(err_fd)
        _send(sock, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send(sock, {"status": os.waitstatus_to_exitcode(status)})
        # after the status: the caller has its result; this costs the next request
        _learn(feedback_r)
        os.close(feedback_r)


class WarmChild:
    """One forked analysis child, with the part of ``Popen``'s interface that
    :class:`~coreepi.ingest.sandbox.Sandbox` uses: ``pid``, ``returncode``,
    :meth:`communicate`, :meth:`kill`."""

    def __init__(self, launcher: WarmLauncher, pid: int, out_fd: int, err_fd: int) -> None:
        self.launcher = launcher
        self.pid = pid
        self.returncode: int | None = None
        self._fds = {out_fd: bytearray(), err_fd: bytearray()}
        self._order = (out_fd, err_fd)
        self._sel = selectors.DefaultSelector()
        for fd in self._order:
            self._sel.register(fd, selectors.EVENT_READ)

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Read the child's stdout and stderr to their end, then its status.
        Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds (the
        child keeps running: :meth:`kill` it, then call this again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(["coreepi.reanalysis.warm"], timeout or 0)
            for key, _ in self._sel.select(left):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    self._fds[key.fd] += chunk
                else:
                    self._sel.unregister(key.fd)
                    os.close(key.fd)
        if self.returncode is None:
            self.returncode = self.launcher._status()  # noqa: SLF001 (its own launcher)
        out, err = (bytes(self._fds[fd]) for fd in self._order)
        return out, err

    def kill(self) -> None:
        """SIGKILL the child, by pid (it is still the zygote's unreaped child
        until the zygote answers its status, so the pid cannot be reused)."""
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class WarmLauncher:
    """Starts analysis children by fork from a zygote this object starts (and
    restarts, should it die). A ``Sandbox`` launcher: call it with the cold
    child's argv and environment; it returns a :class:`WarmChild`. Callers
    are served one at a time (a lock held from the fork to the status).
    :meth:`close` ends the zygote."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lines: _Lines | None = None

    def start(self) -> None:
        """Start the zygote now (else the first call does); it imports while
        the caller goes on."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()

    def _start(self) -> None:
        from coreepi.ingest.worker import PARENT_PID_ENV

        mine, theirs = socket.socketpair()
        self._proc = subprocess.Popen([sys.executable, "-m", "coreepi.reanalysis.warm"],
                                      stdin=theirs, start_new_session=True,
                                      env={**os.environ, PARENT_PID_ENV: str(os.getpid())})
        theirs.close()
        self._sock, self._lines = mine, _Lines(mine)

    def __call__(self, argv: list[str], env: dict[str, str]) -> WarmChild:
        if argv[1:3] != list(_WORKER):
            raise ValueError(f"not an analysis worker's command line: {argv[:3]}")
        self._lock.acquire()
        try:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            try:
                assert self._sock is not None and self._lines is not None
                _send(self._sock, {"argv": argv[3:], "env": env}, [out_w, err_w])
            finally:
                os.close(out_w)
                os.close(err_w)
            reply, _ = self._lines.read()
            if reply is None:  # the zygote died: start a fresh one next time
                self._proc = None
                raise OSError("the warm analysis process ended unexpectedly")
            return WarmChild(self, int(reply["pid"]), out_r, err_r)
        except BaseException:
            self._lock.release()
            raise

    def _status(self) -> int:
        """The current child's exit status (releases the lock taken at launch)."""
        try:
            assert self._lines is not None
            reply, _ = self._lines.read()
            if reply is None:  # the zygote died with the child: as if killed
                self._proc = None
                return -signal.SIGKILL
            return int(reply["status"])
        finally:
            self._lock.release()

    def close(self) -> None:
        """End the zygote (EOF on its socket) and wait for it."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            if self._proc is not None:
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None


if __name__ == "__main__":
    sys.exit(main())
